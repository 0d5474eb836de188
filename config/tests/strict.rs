//! Strict configuration (issue 20): what Tempesta's own parser refuses is
//! refused here too, at the right `file:line:col` with a message saying
//! what to do; what it accepts still loads (with a warning where Tempesta
//! warns); and the sticky/js_challenge directives produce a typed model.

use std::path::Path;
use std::time::Duration;

use config::{parse_str, CookieMode, Diagnostic, Severity};

/// (config, line, column, text the message or hint must contain)
const REFUSED: &[(&str, u32, u32, &str)] = &[
    ("whitelist_mark 1;\nwhitelist_mark 2;\n", 2, 1, "duplicate `whitelist_mark`"),
    ("http_uri_brange 0x61;\nhttp_uri_brange 0x62;\n", 2, 1, "duplicate `http_uri_brange`"),
    ("client_mem 1M;\nclient_mem 2M;\n", 2, 1, "duplicate `client_mem`"),
    ("grace_shutdown_time 1;\ngrace_shutdown_time 2;\n", 2, 1, "duplicate `grace_shutdown_time`"),
    ("client_ws_timeout 1;\nclient_ws_timeout 2;\n", 2, 1, "duplicate `client_ws_timeout`"),
    ("cache_ttl 1;\ncache_ttl 2;\n", 2, 1, "duplicate `cache_ttl`"),
    ("server_queue_size 5;\nserver_queue_size 6;\n", 2, 1, "duplicate `server_queue_size`"),
    ("srv_group g { server 127.0.0.1; server_queue_size 5; server_queue_size 6; }\n", 1, 54, "duplicate `server_queue_size`"),
    ("srv_group g { server 127.0.0.1; health auto; health auto; }\n", 1, 46, "duplicate `health`"),
    ("frang_limits { http_uri_len 5; http_uri_len 6; }\n", 1, 32, "duplicate `http_uri_len`"),
    ("frang_limits { concurrent_connections 5; concurrent_tcp_connections 6; }\n", 1, 42, "duplicate `concurrent_tcp_connections`"),
    ("srv_group g { server 127.0.0.1; }\nvhost a { proxy_pass g; cache_use_stale 5*; cache_use_stale 4*; }\n", 2, 45, "duplicate `cache_use_stale`"),
    ("srv_group g { server 127.0.0.1; }\nvhost a { proxy_pass g; http_post_validate; http_post_validate; }\n", 2, 45, "duplicate `http_post_validate`"),
    ("srv_group g { server 127.0.0.1; }\nvhost a { proxy_pass g; location prefix \"/a\" { frang_limits { http_uri_len 1; } frang_limits { http_uri_len 2; } } }\n", 2, 81, "duplicate `frang_limits`"),
    ("srv_group g { server 127.0.0.1; }\nvhost a { proxy_pass g; location prefix \"/a\" { proxy_pass g; proxy_pass g; } }\n", 2, 62, "duplicate `proxy_pass`"),
    ("health_check h { timeout 1; timeout 2; }\n", 1, 29, "duplicate `timeout`"),
    ("sticky { secret a; secret b; }\n", 1, 20, "duplicate `secret`"),
    ("srv_group g { server 127.0.0.1; }\nvhost a { proxy_pass g; sticky { cookie; } sticky { cookie; } }\n", 2, 44, "duplicate `sticky`"),
    ("req_hdr_set X-A 1;\nreq_hdr_set x-a 2;\n", 2, 13, "given twice"),
    ("cache_use_stale 500 500;\n", 1, 21, "listed twice"),
    ("cache_use_stale 4* 4*;\n", 1, 20, "listed twice"),
    ("cache_use_stale 5* 502;\n", 1, 20, "overlaps"),
    ("cache_use_stale 502 5*;\n", 1, 21, "overlaps"),
    ("cache_use_stale 304;\n", 1, 17, "not an error status"),
    ("cache_use_stale 3*;\n", 1, 17, "not an error status"),
    ("cache_use_stale 6*;\n", 1, 17, "bad status"),
    ("cache_purge_acl 10.0.0.0/8 10.0.0.0/8;\n", 1, 28, "listed twice"),
    ("client_mem 1500;\n", 1, 12, "not a multiple of 1K"),
    ("client_mem 0;\n", 1, 12, "out of range"),
    ("client_mem 200G;\n", 1, 12, "out of range"),
    ("client_mem 1M 2049;\n", 1, 15, "not a multiple of 1K"),
    ("cache_size 1M;\n", 1, 12, "out of range"),
    ("cache_size 17M;\n", 1, 12, "not a multiple of 2M"),
    ("cache_size 256G;\n", 1, 12, "out of range"),
    ("max_concurrent_streams 0;\n", 1, 24, "out of range"),
    ("max_concurrent_streams 65537;\n", 1, 24, "out of range"),
    ("keepalive_timeout 3000000000;\n", 1, 19, "out of range"),
    ("cache_ttl 2147483648;\n", 1, 11, "out of range"),
    ("frang_limits { request_rate 3000000000; }\n", 1, 29, "out of range"),
    ("frang_limits { ip_block 5000000000; }\n", 1, 25, "not a valid ip_block"),
    ("frang_limits { request_rate 10 0; }\n", 1, 32, "time frame 0 is out of range"),
    ("frang_limits { http_resp_code_block 403 0 5; }\n", 1, 41, "response limit 0 is out of range"),
    ("frang_limits { http_resp_code_block 403 10 70000; }\n", 1, 44, "out of range"),
    ("cache_methods GET PUT;\n", 1, 19, "cannot be cached"),
    ("sticky { sess_lifetime 3000000000; }\n", 1, 24, "out of range"),
    ("srv_group g { server 127.0.0.1; server_forward_retries 70000; }\n", 1, 56, "out of range"),
    ("server_queue_size 2147483648;\n", 1, 19, "out of range"),
    ("client_ws_timeout -1;\n", 1, 19, "not a valid"),
    ("grace_shutdown_time forever;\n", 1, 21, "not a valid"),
    ("http_uri_brange 0x20-0x7e;\n", 1, 17, "cannot allow byte 0x20"),
    ("http_token_brange 0x41-0x5a 0x2c;\n", 1, 29, "cannot allow byte 0x2c"),
    ("http_token_brange 0x3b;\n", 1, 19, "0x3b"),
    ("http_cookie_brange 0x3d;\n", 1, 20, "cannot allow byte 0x3d"),
    ("http_etag_brange 0x21-0x7e;\n", 1, 18, "cannot allow byte 0x22"),
    ("http_qetoken_brange 0x5c;\n", 1, 21, "cannot allow byte 0x5c"),
    ("http_xff_brange 0x2c;\n", 1, 17, "cannot allow byte 0x2c"),
    ("http_nctl_brange 0-31;\n", 1, 18, "cannot allow byte 0x00"),
    ("http_ctext_vchar_brange 0x0a;\n", 1, 25, "cannot allow byte 0x0a"),
    ("http_uri_brange 0x41-0x41;\n", 1, 17, "reversed or empty"),
    ("sticky { cookie_options Secure; }\n", 1, 10, "`cookie_options` without a sticky cookie"),
    ("sticky { js_challenge delay_min=1000 delay_range=1000; }\n", 1, 10, "`js_challenge` without a sticky cookie"),
    ("sticky { cookie enforce; }\nsrv_group g { server 127.0.0.1; }\nvhost a { proxy_pass g; sticky { js_challenge delay_min=1 delay_range=1; } }\n", 3, 34, "without a sticky cookie"),
    ("sticky { learn name=sid; js_challenge delay_min=1 delay_range=1; }\n", 1, 26, "learned cookie"),
    ("sticky { cookie; learn name=a; }\n", 1, 18, "cannot be used together"),
    ("sticky { cookie max_misses=3; }\n", 1, 17, "needs `enforce`"),
    ("sticky { cookie name=\"a b\"; }\n", 1, 22, "not a valid cookie name"),
    ("sticky { cookie name=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; }\n", 1, 22, "not a valid cookie name"),
    ("sticky { cookie enforce strict; }\n", 1, 25, "unknown `cookie` argument"),
    ("sticky { cookie name=a name=b; }\n", 1, 24, "given twice"),
    ("sticky { cookie; cookie_options Path=/a Path=/b; }\n", 1, 41, "given twice"),
    ("sticky { cookie; cookie_options Domain=dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd; }\n", 1, 18, "256 bytes"),
    ("sticky { cookie; js_challenge delay_min=1000; }\n", 1, 18, "needs `delay_range=`"),
    ("sticky { cookie; js_challenge delay_min=0 delay_range=5; }\n", 1, 41, "out of range"),
    ("sticky { cookie; js_challenge delay_min=1 delay_range=1 resp_code=418; }\n", 1, 67, "not a challenge status"),
    ("sticky { cookie; js_challenge delay_min=1 delay_range=1 a.html b.html; }\n", 1, 64, "one template at most"),
    ("sticky { cookie; js_challenge delay_min=1 delay_range=1 retries=3; }\n", 1, 57, "unknown option `retries=`"),
    ("sticky { sticky_sessions always; }\n", 1, 26, "unknown `sticky_sessions` option"),
    ("sticky { lifetime 5; }\n", 1, 10, "unknown directive `lifetime`"),
    ("srv_group g { server 127.0.0.1; learn; }\n", 1, 33, "needs the backend's cookie name"),
    ("srv_group g { server 127.0.0.1; sticky_sessions; sticky_sessions; }\n", 1, 50, "duplicate `sticky_sessions`"),
    ("sticky { secret \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"; }\n", 1, 17, "bytes long"),
    ("srv_group g { server 127.0.0.1; }\nvhost a { proxy_pass g; location prefix \"/a\" { sticky { cookie; } } }\n", 2, 48, "not allowed in location"),
    ("cookie enforce;\n", 1, 1, "belongs in `sticky`"),
    ("sticky cookie;\n", 1, 1, "takes a block"),
    ("http_chain { -> 301 = $host$host$host$host$host$host$host$host; }\n", 1, 23, "8 variables"),
    ("http_chain { hdr \"X-A\" == \"   \" -> block; }\n", 1, 27, "only whitespace"),
    ("http_chain { hdr \"  \" == \"a\" -> block; }\n", 1, 18, "empty hdr name"),
    ("http_chain { cookie \"*a*\" == \"x\" -> block; }\n", 1, 14, "double-wildcard cookie name"),
    ("cache 2;\ncache_purge;\n", 2, 1, "needs `cache_purge_acl`"),
    ("cache_purge_acl 127.0.0.1;\n", 1, 1, "without `cache_purge`"),
    // tempesta-test tests/cache/test_purge.py, test_wrong_config: either order.
    ("cache 0;\ncache_purge;\ncache_purge_acl 127.0.0.1;\n", 2, 1, "with `cache 0`"),
    ("cache_purge;\ncache 0;\ncache_purge_acl 127.0.0.1;\n", 1, 1, "with `cache 0`"),
    // tempesta-test tests/tf/test_tf_filters.py, TestConfig.
    ("tft {hash invalid_hash 5 5;}\n", 1, 11, "not a valid fingerprint"),
    ("tfh {\n  hash invalid_hash 5 5;\n}\n", 2, 8, "not a valid fingerprint"),
    ("tft storage_size=500 {hash a7007c90000 5 5;}\n", 1, 18, "multiple of 2 MiB"),
    ("tfh storage_size=500 {hash 55cbf8cce0170011 5 5;}\n", 1, 18, "multiple of 2 MiB"),
    ("tfh {hash 55cbf8cce0170011 5 5;}\ntfh {}\n", 2, 1, "duplicate `tfh`"),
    ("tft { hash 1f5a9a29ef170000 1; }\n", 1, 7, "too few arguments"),
    ("tft { hash 1f5a9a29ef170000 1 -1; }\n", 1, 31, "not a valid records per second"),
    ("tft { limit 1f5a9a29ef170000 1 1; }\n", 1, 7, "unknown directive `limit`"),
    ("tft size=4194304 { }\n", 1, 5, "unknown option `size=`"),
];

#[test]
fn invalid_configurations_are_refused_at_the_right_place() {
    let mut failures = Vec::new();
    for (text, line, col, needle) in REFUSED {
        let d = match parse_str("t.conf", text, Path::new("/etc/t")) {
            Ok(_) => {
                failures.push(format!("accepted: {text:?}"));
                continue;
            }
            Err(d) => d,
        };
        let hit = d.errors.iter().any(|e| {
            let shown = format!("{} {}", e.message, e.hint.as_deref().unwrap_or(""));
            e.line == *line && e.col == *col && shown.contains(needle)
        });
        if !hit {
            failures.push(format!(
                "{text:?}: wanted {line}:{col} `{needle}`, got:\n{d}"
            ));
        }
        // Every refusal tells the user what to do (an unknown name has a
        // hint only when a known one is close).
        assert!(
            d.errors
                .iter()
                .all(|e| e.hint.is_some() || e.message.starts_with("unknown directive")),
            "no hint: {d}"
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        REFUSED.len(),
        failures.join("\n")
    );
}

fn ok(text: &str) -> (config::Config, Vec<Diagnostic>) {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(l) => (l.config, l.warnings),
        Err(d) => panic!("refused:\n{text}\n{d}"),
    }
}

/// Valid configurations Tempesta accepts: still accepted, with the listed
/// warnings (line, column, text) where Tempesta warns or this proxy
/// cannot honour a detail.
/// A warning expected at (line, column) whose message contains the text.
type Expected = (u32, u32, &'static str);

const ACCEPTED: &[(&str, &[Expected])] = &[
    ("cache_methods GET HEAD GET;\n", &[(1, 24, "listed twice")]),
    ("frang_limits { http_methods get post get; }\n", &[(1, 38, "listed twice")]),
    ("whitelist_mark 1 7 1;\n", &[(1, 20, "listed twice")]),
    ("cache_fulfill suffix \".jpg\" \".jpg\";\n", &[(1, 29, "listed twice")]),
    ("frang_limits { request_rate 10 5; tcp_connection_rate 3 2; }\n", &[]),
    ("sticky { cookie; js_challenge delay_min=1000 delay_range=3000; }\n", &[(1, 18, "acts as `cookie enforce`")]),
    ("sticky { cookie; }\nsticky { cookie enforce; }\n", &[(2, 1, "replaces the earlier")]),
    ("client_mem 500M 1G;\ncache_size 268435456;\nmax_concurrent_streams 65536;\n", &[]),
    ("http_uri_brange 0x2f 0x41-0x5a 0x61-0x7a 0x30-0x39 0x26 0x3f 0x3a 0x2d 0x2e 0x5f 0x3d;\n", &[]),
    ("http_chain { -> 302 = https://$host$request_uri$host$request_uri$host$request_uri$host; }\n", &[]),
    ("cache_use_stale 4* 500 502 504;\n", &[]),
    ("req_hdr_add X-A 1;\nreq_hdr_add X-A 2;\nreq_hdr_set X-B;\n", &[]),
    ("tft storage_size=4194304 { hash 1f5a9a29ef170000 1 10; hash 0xdeadbeef 0 0; }\ntfh { }\n", &[]),
];

#[test]
fn valid_configurations_still_load() {
    for (text, expected) in ACCEPTED {
        let (_, warnings) = ok(text);
        let got: Vec<(u32, u32, String)> = warnings
            .iter()
            .map(|w| (w.line, w.col, w.message.clone()))
            .collect();
        assert_eq!(got.len(), expected.len(), "{text:?}: {got:?}");
        for ((l, c, m), (el, ec, needle)) in got.iter().zip(expected.iter()) {
            assert!(
                l == el && c == ec && m.contains(needle),
                "{text:?}: wanted {el}:{ec} `{needle}`, got {l}:{c} {m}"
            );
        }
        assert!(warnings.iter().all(|w| w.severity == Severity::Warning));
    }
}

#[test]
fn reference_examples_of_the_sticky_directives_load() {
    // The examples of the directive reference, each in its place.
    let text = "srv_group app {\n\
                    server 10.10.0.1:8080;\n\
                    server 10.10.0.2:8080;\n\
                    server [fc00::3]:8081 conns_n=1;\n\
                    sticky_sessions allow_failover;\n\
                }\n\
                grace_shutdown_time 5;\n\
                client_ws_timeout 600;\n\
                vhost site {\n\
                    proxy_pass app;\n\
                    sticky {\n\
                        cookie name=__cookie__ enforce max_misses=3;\n\
                        cookie_options Max-Age=5 Domain=example.com Secure HttpOnly;\n\
                        secret \"f00)9eR59*_/22\";\n\
                        sess_lifetime 900;\n\
                        js_challenge resp_code=503 delay_min=1000 delay_range=3000 /etc/ddos_redirect.html;\n\
                    }\n\
                }\n\
                vhost learned { proxy_pass app; sticky { learn name=user-id; sticky_sessions; } }\n";
    let (c, warnings) = ok(text);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.grace_shutdown_time, Duration::from_secs(5));
    assert_eq!(c.client_ws_timeout, Some(Duration::from_secs(600)));
    let g = c.server_group("app").expect("group");
    assert_eq!(g.sticky.as_ref().map(|s| s.allow_failover), Some(true));

    let site = &c.vhost("site").expect("vhost").sticky;
    let cookie = site.cookie.as_ref().expect("cookie");
    assert_eq!(cookie.name, "__cookie__");
    assert_eq!(
        cookie.mode,
        CookieMode::Issued {
            enforce: true,
            max_misses: Some(3)
        }
    );
    assert_eq!(
        cookie.options,
        [
            "Path=/",
            "Max-Age=5",
            "Domain=example.com",
            "Secure",
            "HttpOnly"
        ]
    );
    let js = cookie.js_challenge.as_ref().expect("challenge");
    assert_eq!(
        (js.delay_min, js.delay_range),
        (Duration::from_millis(1000), Duration::from_millis(3000))
    );
    assert_eq!(js.resp_code, 503);
    assert_eq!(
        js.template.as_deref(),
        Some(Path::new("/etc/ddos_redirect.html"))
    );
    assert_eq!(site.secret.as_deref(), Some("f00)9eR59*_/22"));
    assert_eq!(site.sess_lifetime, Some(Duration::from_secs(900)));
    assert!(site.sessions.is_none());

    let learned = &c.vhost("learned").expect("vhost").sticky;
    let cookie = learned.cookie.as_ref().expect("learned cookie");
    assert_eq!(
        (cookie.name.as_str(), cookie.mode),
        ("user-id", CookieMode::Learned)
    );
    assert_eq!(learned.sessions.map(|s| s.allow_failover), Some(false));
    // Nothing set at top level: the default vhost has no sticky cookie.
    assert!(!c.default_vhost.sticky.is_enabled());
}

#[test]
fn top_level_sticky_is_the_default_of_vhosts_without_their_own() {
    let text = "srv_group default { server 127.0.0.1:8000; }\n\
                sticky { cookie enforce; secret \"top\"; sess_lifetime 60; }\n\
                vhost plain { proxy_pass default; }\n\
                vhost own { proxy_pass default; sticky { cookie name=own; } }\n\
                vhost keyed { proxy_pass default; sticky { secret \"mine\"; sess_lifetime 0; } }\n";
    let (c, _) = ok(text);
    let plain = &c.vhost("plain").expect("vhost").sticky;
    assert_eq!(
        plain.cookie.as_ref().map(|k| k.name.as_str()),
        Some("__tfw")
    );
    assert!(plain.cookie.as_ref().is_some_and(|k| k.enforced()));
    assert_eq!(plain.secret.as_deref(), Some("top"));
    // `cookie` in the vhost replaces the top-level one, options and all;
    // the secret and lifetime it does not set are inherited.
    let own = &c.vhost("own").expect("vhost").sticky;
    let k = own.cookie.as_ref().expect("cookie");
    assert_eq!((k.name.as_str(), k.enforced()), ("own", false));
    assert_eq!(
        (own.secret.as_deref(), own.sess_lifetime),
        (Some("top"), Some(Duration::from_secs(60)))
    );
    // A vhost block without `cookie` keeps the top-level cookie.
    let keyed = &c.vhost("keyed").expect("vhost").sticky;
    assert_eq!(keyed.cookie, plain.cookie);
    assert_eq!(
        (keyed.secret.as_deref(), keyed.sess_lifetime),
        (Some("mine"), None)
    );
    // `secret "";` means random, as Tempesta's default.
    let (c, _) = ok("sticky { cookie; secret \"\"; }\n");
    assert_eq!(c.default_vhost.sticky.secret, None);
}

#[test]
fn the_sticky_model_round_trips_through_toml() {
    let text = "srv_group default { server 127.0.0.1:8000; learn name=sid; }\n\
                sticky { cookie enforce; cookie_options Secure; js_challenge delay_min=500 delay_range=1500 resp_code=403; }\n\
                grace_shutdown_time 3;\nclient_ws_timeout 0;\n";
    let (c, _) = ok(text);
    let toml_text = toml::to_string(&c).expect("serialize");
    let back = parse_str("t.toml", &toml_text, Path::new("/"))
        .unwrap_or_else(|d| panic!("{d}\n{toml_text}"));
    assert_eq!(back.config, c);
    assert_eq!(c.client_ws_timeout, None);
    assert_eq!(
        c.server_group("default")
            .and_then(|g| g.sticky.clone())
            .and_then(|s| s.learn),
        Some("sid".to_string())
    );
}

#[test]
fn rate_time_frames_are_kept_in_the_model() {
    let (c, _) = ok("frang_limits { request_rate 10 5; connection_rate 3 2; }\n");
    assert_eq!(c.frang.request_rate, Some(10));
    assert_eq!(c.frang.request_rate_frame, Duration::from_secs(5));
    assert_eq!(c.frang.tcp_connection_rate_frame, Duration::from_secs(2));
    let (c, w) = ok("frang_limits { request_rate 10; }\n");
    assert!(w.is_empty());
    assert_eq!(c.frang.request_rate_frame, Duration::from_secs(1));
}
