//! What valid configurations mean: defaults, inheritance, every directive
//! family landing in the right place of the model.

use std::path::{Path, PathBuf};
use std::time::Duration;

use config::*;

fn load(text: &str) -> Config {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(l) => l.config,
        Err(d) => panic!("refused:\n{text}\n{d}"),
    }
}

#[test]
fn listen_forms() {
    let c = load(
        "listen 443;\n\
         listen 127.0.0.1:8443 proto=https;\n\
         listen [::1]:443 proto=h2;\n\
         listen 10.0.0.1 proto=\"h2,https\";\n\
         listen [::1]:80 proto=http;\n\
         tls_certificate a.crt;\n\
         tls_certificate_key a.key;\n",
    );
    let got: Vec<(String, Vec<Proto>)> = c
        .listeners
        .iter()
        .map(|l| (l.addr.to_string(), l.protos.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("0.0.0.0:443".to_string(), vec![Proto::Http]),
            ("127.0.0.1:8443".to_string(), vec![Proto::Https]),
            ("[::1]:443".to_string(), vec![Proto::H2]),
            ("10.0.0.1:80".to_string(), vec![Proto::Https, Proto::H2]),
            ("[::1]:80".to_string(), vec![Proto::Http]),
        ]
    );
    assert!(!c.listeners[0].is_tls() && c.listeners[3].is_tls());
}

/// HTTP/3 listeners (an extension): UDP only, or beside TCP h2/https on one address; the
/// Alt-Svc advertisement's age, or none.
#[test]
fn h3_listen_forms_and_alt_svc() {
    let c = load(
        "listen 443 proto=h3;\n\
         listen 8443 proto=\"h2,h3\";\n\
         listen 9443 proto=\"https,h3\";\n\
         tls_certificate a.crt;\n\
         tls_certificate_key a.key;\n",
    );
    let l = &c.listeners;
    assert_eq!(l[0].protos, vec![Proto::H3]);
    assert!(l[0].is_h3() && !l[0].is_tcp() && l[0].is_tls());
    assert_eq!(l[1].protos, vec![Proto::H2, Proto::H3]);
    assert!(l[1].is_h3() && l[1].is_tcp());
    assert_eq!(l[2].protos, vec![Proto::Https, Proto::H3]);
    assert_eq!(c.h3_alt_svc, Some(86_400));
    assert_eq!(load("h3_alt_svc off;\n").h3_alt_svc, None);
    assert_eq!(load("h3_alt_svc max_age=60;\n").h3_alt_svc, Some(60));
}

#[test]
fn defaults_follow_tempesta() {
    let c = load("server 127.0.0.1;\n");
    assert_eq!(c.keepalive_timeout, Duration::from_secs(75));
    assert_eq!(c.max_concurrent_streams, 100);
    assert_eq!(c.cache.mode, CacheMode::Replicated);
    assert_eq!(c.cache.size, 256 << 20);
    assert_eq!(
        c.block_action.error,
        BlockAction {
            reply: true,
            log: true
        }
    );
    assert_eq!(
        c.block_action.attack,
        BlockAction {
            reply: false,
            log: true
        }
    );
    assert_eq!(c.frang.concurrent_tcp_connections, Some(1000));
    assert_eq!(c.frang.http_header_cnt, Some(50));
    assert_eq!(c.default_vhost.frang.http_body_len, Some(1 << 30));
    assert_eq!(
        c.default_vhost.frang.http_methods,
        vec![Method::Get, Method::Post, Method::Head]
    );
    assert!(c.default_vhost.frang.http_strict_host_checking);
    assert_eq!(c.tls.ktls, KtlsMode::Auto);
    assert_eq!(c.worker_processes, 1);
    assert_eq!(c.worker_threads, None);
    let g = c.server_group("default").expect("implicit group");
    assert_eq!(g.servers[0].addr, "127.0.0.1:80".parse().unwrap());
    assert_eq!((g.servers[0].conns_n, g.servers[0].weight), (32, 50));
    assert_eq!(
        (g.forward_retries, g.connect_retries, g.queue_size),
        (5, 10, 1000)
    );
    assert_eq!(g.forward_timeout, Duration::from_secs(60));
    assert_eq!(g.sched, Scheduler::Ratio(RatioMode::Static));
    // Implicit main chain: everything to the default vhost.
    assert_eq!(
        c.http_tables.main.rules,
        vec![Rule {
            condition: None,
            action: Action::Vhost("default".into())
        }]
    );
    assert_eq!(
        c.default_vhost.proxy_pass,
        Some(ProxyPass {
            group: "default".into(),
            backup: None
        })
    );
}

#[test]
fn server_groups_and_top_level_defaults() {
    let c = load(
        "sched hash;\n\
         server_forward_retries 3;\n\
         server 10.0.0.1:8080 conns_n=4;\n\
         srv_group app {\n\
             server 10.0.0.2 weight=10;\n\
             server [fc00::3]:8081 conns_n=1 backup;\n\
             server_queue_size 600;\n\
             server_forward_timeout 30;\n\
             server_retry_nonidempotent;\n\
             health auto;\n\
         }\n\
         srv_group dyn { server 10.0.0.9; sched ratio predict percentile 75 past=60 rate=10 ahead=20; }\n",
    );
    let names: Vec<&str> = c.server_groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, vec!["default", "app", "dyn"]);
    let app = c.server_group("app").unwrap();
    // sched and server_forward_retries inherited from top level.
    assert_eq!(app.sched, Scheduler::Hash);
    assert_eq!(app.forward_retries, 3);
    assert_eq!(app.queue_size, 600);
    assert_eq!(app.forward_timeout, Duration::from_secs(30));
    assert!(app.retry_nonidempotent);
    assert_eq!(app.health.as_deref(), Some("auto"));
    assert_eq!(app.servers[1].addr, "[fc00::3]:8081".parse().unwrap());
    assert!(app.servers[1].backup && !app.servers[0].backup);
    assert_eq!(app.servers[0].weight, 10);
    let dy = c.server_group("dyn").unwrap();
    assert_eq!(
        dy.sched,
        Scheduler::Ratio(RatioMode::Predict(Prediction {
            weight: DynamicWeight::Percentile(75),
            past: Duration::from_secs(60),
            rate: 10,
            ahead: Duration::from_secs(20),
        }))
    );
    assert_eq!(c.server_group("default").unwrap().servers[0].conns_n, 4);
}

#[test]
fn vhosts_inherit_global_settings_and_locations_inherit_vhosts() {
    let c = load(
        "srv_group g { server 127.0.0.1; }\n\
         srv_group s { server 127.0.0.2; }\n\
         frang_limits { http_uri_len 100; }\n\
         vhost early {\n\
             proxy_pass g backup=s;\n\
             resp_hdr_add X-A \"1\";\n\
             location prefix \"/static/\" {\n\
                 proxy_pass s;\n\
                 cache_fulfill suffix \".jpg\" \".png\";\n\
                 frang_limits { http_body_len 10; }\n\
             }\n\
             location regex \"/^/api/v[0-9]+//\" { req_hdr_set Cookie; }\n\
         }\n\
         frang_limits { http_uri_len 200; }\n\
         vhost late { proxy_pass g; tls_tickets off; hdr_via proxy1; }\n\
         cache_bypass prefix \"/private/\";\n\
         resp_hdr_set Server \"x\";\n\
         tls_tickets secret=\"k\" lifetime=60;\n\
         tls_certificate /c.pem;\n\
         tls_certificate_key k.pem;\n\
         tls_certificate /e.pem;\n\
         tls_certificate_key /e.key;\n",
    );
    let early = c.vhost("early").unwrap();
    let late = c.vhost("late").unwrap();
    // Frang limits are order-dependent.
    assert_eq!(early.frang.http_uri_len, Some(100));
    assert_eq!(late.frang.http_uri_len, Some(200));
    assert_eq!(c.default_vhost.frang.http_uri_len, Some(200));
    // Other settings: own value, else the global one wherever it appears.
    assert_eq!(early.headers.response.len(), 1);
    assert_eq!(late.headers.response[0].name, "Server");
    assert_eq!(late.headers.response[0].op, HeaderOp::Set);
    assert_eq!(early.cache.rules[0].action, CacheAction::Bypass);
    assert!(!late.tls.tickets.enabled);
    assert_eq!(early.tls.tickets.secret.as_deref(), Some("k"));
    assert_eq!(early.tls.tickets.lifetime, Duration::from_secs(60));
    assert_eq!(late.hdr_via.as_deref(), Some("proxy1"));
    // Two certificate pairs; relative key resolved against the base dir.
    assert_eq!(early.tls.certificates.len(), 2);
    assert_eq!(early.tls.certificates[0].key, PathBuf::from("/etc/t/k.pem"));
    // Locations.
    let loc = &early.locations[0];
    assert_eq!(
        (loc.op, loc.pattern.as_str()),
        (UrlMatchOp::Prefix, "/static/")
    );
    assert_eq!(loc.proxy_pass.as_ref().unwrap().group, "s");
    assert_eq!(loc.cache.rules[0].patterns, vec![".jpg", ".png"]);
    assert_eq!(loc.frang.http_body_len, Some(10));
    assert_eq!(loc.frang.http_uri_len, Some(100));
    assert_eq!(loc.headers.response, early.headers.response);
    let api = &early.locations[1];
    assert_eq!(api.op, UrlMatchOp::Regex);
    assert_eq!(
        api.proxy_pass.as_ref().unwrap().backup.as_deref(),
        Some("s")
    );
    assert_eq!(api.headers.request[0].value, None);
}

#[test]
fn frang_limits_all_directives_and_old_spellings() {
    let c = load(
        "frang_limits {\n\
             ip_block 60; request_rate 20; request_burst 15;\n\
             connection_rate 8; connection_burst 6; concurrent_connections 9;\n\
             tls_connection_rate 5; tls_connection_burst 4; tls_incomplete_connection_rate 3;\n\
             client_header_timeout 20; client_body_timeout 0;\n\
             http_header_chunk_cnt 10; http_body_chunk_cnt 0; http_field_len 256; http_header_cnt 0;\n\
             http_uri_len 1024; http_body_len 0; http_host_required false; http_ct_required true;\n\
             http_trailer_split_allowed; http_method_override_allowed on;\n\
             http_methods get post head purge; http_ct_vals \"text/plain\" \"text/html\";\n\
             http_resp_code_block 403 404 502 20 5;\n\
         }\n",
    );
    let g = &c.frang;
    assert_eq!(g.ip_block, IpBlock::For(Duration::from_secs(60)));
    assert_eq!((g.request_rate, g.request_burst), (Some(20), Some(15)));
    assert_eq!(
        (
            g.tcp_connection_rate,
            g.tcp_connection_burst,
            g.concurrent_tcp_connections
        ),
        (Some(8), Some(6), Some(9))
    );
    assert_eq!(
        (
            g.tls_connection_rate,
            g.tls_connection_burst,
            g.tls_incomplete_connection_rate
        ),
        (Some(5), Some(4), Some(3))
    );
    assert_eq!(
        (g.client_header_timeout, g.client_body_timeout),
        (Some(Duration::from_secs(20)), None)
    );
    assert_eq!(
        (
            g.http_header_chunk_cnt,
            g.http_body_chunk_cnt,
            g.http_hdr_len,
            g.http_header_cnt
        ),
        (Some(10), None, Some(256), None)
    );
    let h = &c.default_vhost.frang;
    assert_eq!((h.http_uri_len, h.http_body_len), (Some(1024), None));
    assert!(
        !h.http_strict_host_checking
            && h.http_ct_required
            && h.http_trailer_split_allowed
            && h.http_method_override_allowed
    );
    assert_eq!(
        h.http_methods,
        vec![Method::Get, Method::Post, Method::Head, Method::Purge]
    );
    assert_eq!(h.http_ct_vals, vec!["text/plain", "text/html"]);
    assert_eq!(
        h.http_resp_code_block
            .as_ref()
            .map(|b| (b.codes.clone(), b.limit)),
        Some((vec![403, 404, 502], 20))
    );
    let c = load("frang_limits { ip_block on; }\n");
    assert_eq!(c.frang.ip_block, IpBlock::Forever);
    let c = load("frang_limits { ip_block off; tcp_connection_rate 1; }\nfrang_limits { tcp_connection_burst 2; }\n");
    assert_eq!(c.frang.ip_block, IpBlock::Off);
    assert_eq!(
        (c.frang.tcp_connection_rate, c.frang.tcp_connection_burst),
        (Some(1), Some(2))
    );
}

#[test]
fn http_chain_full_grammar() {
    let c = load(
        "srv_group default { server 127.0.0.1; }\n\
         vhost app { proxy_pass default; }\n\
         vhost base { proxy_pass default; }\n\
         http_chain stat { -> mark = 6; -> base; }\n\
         http_chain {\n\
             mark == 1 -> app;\n\
             mark == 2 -> block;\n\
             hdr \"Connection\" == \"keep-alive\" -> app;\n\
             hdr \"X-Custom\" == \"*\" -> mark = 4;\n\
             hdr_host == \"bar.*\" -> base;\n\
             uri == \"*.php\" -> app;\n\
             uri != \"/static/*\" -> cache_disable;\n\
             uri == \"/nocache\" -> cache_disable = 0;\n\
             host == \"static.*\" -> stat;\n\
             method == GET -> cache_ttl = 30;\n\
             cookie \"session\" == \"admin*\" -> block;\n\
             hdr \"User-Agent\" ~ \"/bot/i\" -> block;\n\
             uri == \"/old\" -> 308 = https://$host$request_uri;\n\
             -> default;\n\
         }\n",
    );
    let rules = &c.http_tables.main.rules;
    let cond = |i: usize| rules[i].condition.clone().expect("condition");
    assert_eq!(cond(0).pattern, Pattern::Mark(1));
    assert_eq!(rules[1].action, Action::Block);
    assert_eq!(cond(2).field, Field::Header("Connection".into()));
    assert_eq!(cond(3).pattern, Pattern::Any);
    assert_eq!(rules[3].action, Action::Mark(4));
    assert_eq!(cond(4).field, Field::Header("Host".into()));
    assert_eq!(cond(4).pattern, Pattern::Prefix("bar.".into()));
    assert_eq!(cond(5).pattern, Pattern::Suffix(".php".into()));
    assert!(cond(6).negate);
    assert_eq!(cond(6).pattern, Pattern::Prefix("/static/".into()));
    assert_eq!(rules[6].action, Action::CacheDisable(true));
    assert_eq!(rules[7].action, Action::CacheDisable(false));
    assert_eq!(rules[8].action, Action::Chain("stat".into()));
    assert_eq!(cond(9).pattern, Pattern::Method(Method::Get));
    assert_eq!(rules[9].action, Action::CacheTtl(Duration::from_secs(30)));
    assert_eq!(cond(10).field, Field::Cookie("session".into()));
    assert_eq!(cond(11).pattern, Pattern::Regex("(?i-u)bot".into()));
    let Action::Redirect { status, url } = &rules[12].action else {
        panic!("{:?}", rules[12])
    };
    assert_eq!(*status, 308);
    assert_eq!(
        url.parts,
        vec![
            UrlPart::Literal("https://".into()),
            UrlPart::Host,
            UrlPart::RequestUri
        ]
    );
    assert_eq!(
        rules[13],
        Rule {
            condition: None,
            action: Action::Vhost("default".into())
        }
    );
    let stat = c.http_tables.chain("stat").unwrap();
    assert_eq!(stat.rules[0].action, Action::Mark(6));
}

#[test]
fn cache_global_directives() {
    let c = load(
        "cache 1;\n\
         cache_methods GET HEAD;\n\
         cache_ttl 300;\n\
         cache_size 512M;\n\
         cache_max_object_size 1048576;\n\
         cache_control_ignore no-cache PRIVATE;\n\
         cache_use_stale 4* 502 504;\n\
         cache_resp_hdr_del Set-Cookie;\n\
         cache_purge immediate;\n\
         cache_purge_acl 127.0.0.1 10.0.0.0/8;\n",
    );
    // `cache 1` (sharded): `cache 0` beside `cache_purge` is refused, as Tempesta refuses it.
    assert!(c.cache.mode.enabled());
    assert_eq!(c.cache.methods, vec![Method::Get, Method::Head]);
    assert_eq!(c.cache.ttl, Some(Duration::from_secs(300)));
    assert_eq!(
        (c.cache.size, c.cache.max_object_size),
        (512 << 20, 1 << 20)
    );
    let p = &c.default_vhost.cache;
    assert_eq!(p.control_ignore, vec!["no-cache", "private"]);
    assert_eq!(
        p.use_stale,
        vec![
            StatusPattern::Class(4),
            StatusPattern::Exact(502),
            StatusPattern::Exact(504)
        ]
    );
    assert_eq!(p.resp_hdr_del, vec!["set-cookie"]);
    assert_eq!(p.purge, Some(PurgeMode::Immediate));
    assert!(p.purge_acl[1].contains("10.9.8.7".parse().unwrap()));
}

#[test]
fn misc_global_directives() {
    let c = load(
        "keepalive_timeout 0;\n\
         max_concurrent_streams 50;\n\
         access_log dmesg;\n\
         access_log_file logs/access.log;\n\
         whitelist_mark 1 7531;\n\
         response_body 5* /err.html;\n\
         client_mem 500M;\n\
         http_max_header_list_size 4096;\n\
         http_allow_empty_body_content_type true;\n\
         block_action attack reply nolog;\n\
         health_check h1 { request \"GET /h HTTP/1.0\\r\\n\\r\\n\"; request_url \"/h\"; resp_code 200 204; resp_crc32 0x1a2b; timeout 5; }\n\
         server_failover_http 404 300 10;\n\
         http_token_brange 0x21-0x2b 0x2d-0x3a 0x3c-0x7e;\n\
         tls_match_any_server_name;\n\
         tls_ktls off;\n\
         worker_processes 4;\n\
         worker_threads 2;\n\
         stats_listen 127.0.0.1:9100;\n",
    );
    assert!(c.keepalive_timeout.is_zero());
    assert_eq!(c.max_concurrent_streams, 50);
    assert_eq!(
        c.access_log.destinations,
        vec![
            AccessLogDestination::Dmesg,
            AccessLogDestination::File("/etc/t/logs/access.log".into())
        ]
    );
    assert_eq!(c.whitelist_marks, vec![1, 7531]);
    assert_eq!(c.response_bodies[0].status, StatusPattern::Class(5));
    assert_eq!(
        c.client_mem,
        Some(ClientMem {
            soft: 500 << 20,
            hard: 1000 << 20
        })
    );
    assert_eq!(c.http_max_header_list_size, Some(4096));
    assert!(c.http_allow_empty_body_content_type);
    assert_eq!(
        c.block_action.attack,
        BlockAction {
            reply: true,
            log: false
        }
    );
    let h = &c.health_checks[0];
    assert_eq!(h.request, "GET /h HTTP/1.0\r\n\r\n");
    assert_eq!(
        (h.resp_codes.clone(), h.resp_crc32, h.timeout),
        (vec![200, 204], Some(0x1a2b), Duration::from_secs(5))
    );
    assert_eq!(
        c.server_failover_http[0],
        FailoverHttp {
            code: 404,
            count: 300,
            timeframe: Duration::from_secs(10)
        }
    );
    let tok = c.byte_ranges.token.unwrap();
    assert!(tok.contains(b'!') && tok.contains(b'~') && !tok.contains(b' ') && !tok.contains(b','));
    assert!(c.tls.match_any_server_name);
    assert_eq!(c.tls.ktls, KtlsMode::Off);
    assert_eq!((c.worker_processes, c.worker_threads), (4, Some(2)));
    assert_eq!(c.stats_listen, Some("127.0.0.1:9100".parse().unwrap()));
    // 0.7 `access_log on` means the kernel log; `off` disables.
    assert!(load("access_log on;\n").access_log.enabled());
    assert!(!load("access_log off;\n").access_log.enabled());
}

#[test]
fn pid_file_and_access_log_format() {
    let c = load("");
    assert_eq!(c.pid, PidFile::Default);
    // Without `pid`: a file of the configuration's own, named after it.
    let a = c.pid.path_for(Path::new("/etc/t/a.conf")).unwrap();
    let b = c.pid.path_for(Path::new("/etc/t/b.conf")).unwrap();
    let other_a = c.pid.path_for(Path::new("/etc/u/a.conf")).unwrap();
    assert_ne!(a, b);
    assert_ne!(a, other_a);
    assert!(a.starts_with(DEFAULT_PID_DIR), "{}", a.display());
    assert!(
        a.to_string_lossy().contains("ktls-proxy-a-"),
        "{}",
        a.display()
    );
    assert_eq!(c.access_log.format, AccessLogFormat::Tempesta);
    assert_eq!(
        load("pid off;\n").pid.path_for(Path::new("/etc/t/a.conf")),
        None
    );
    // Relative to the configuration's directory, like every other path.
    let c = load("pid run/p.pid;\naccess_log_format json;\n");
    assert_eq!(c.pid, PidFile::Path("/etc/t/run/p.pid".into()));
    assert_eq!(c.access_log.format, AccessLogFormat::Json);
}

#[test]
fn explicit_default_vhost_and_implicit_main_chain() {
    let c =
        load("srv_group default { server 127.0.0.1; }\nvhost default { resp_hdr_set X-D 1; }\n");
    assert!(c.vhosts.is_empty());
    assert_eq!(c.default_vhost.headers.response[0].name, "X-D");
    assert_eq!(c.http_tables.main.rules.len(), 1);
    // No implicit default rule when a chain already routes to default.
    let c = load("server 127.0.0.1;\nhttp_chain c { -> default; }\n");
    assert!(c.http_tables.main.rules.is_empty());
    // An explicit empty main chain drops everything.
    let c = load("server 127.0.0.1;\nhttp_chain { }\n");
    assert!(c.http_tables.main.rules.is_empty());
}

#[test]
fn comments_quotes_and_layout_do_not_matter() {
    let a = load("listen 80; # trailing\nserver 127.0.0.1:8000 conns_n=2;\n");
    let b = load("# header\nlisten\n  80\n;\n\nserver \"127.0.0.1:8000\"\n conns_n = \"2\" ;");
    assert_eq!(a, b);
}

#[test]
fn tls_ktls_takes_every_record_path() {
    for (word, mode) in [
        ("auto", KtlsMode::Auto),
        ("on", KtlsMode::On),
        ("user", KtlsMode::User),
        ("off", KtlsMode::Off),
    ] {
        let c = load(&format!("tls_ktls {word};\n"));
        assert_eq!(c.tls.ktls, mode, "tls_ktls {word}");
    }
}

#[test]
fn resp_crc32_auto_applies_to_the_auto_monitor_as_in_tempesta() {
    let text = "health_check auto { resp_code 200; resp_crc32 auto; timeout 2; }\n\
                health_check other { resp_code 200; resp_crc32 auto; }\n\
                listen 80;\n";
    let loaded = parse_str("t.conf", text, Path::new("/etc/t")).expect("loads");
    let checks = &loaded.config.health_checks;
    assert!(checks[0].resp_crc32_auto && checks[0].resp_crc32.is_none());
    assert!(!checks[1].resp_crc32_auto, "no effect outside `auto`");
    assert!(
        loaded.warnings.iter().any(|w| w
            .to_string()
            .contains("has effect only in `health_check auto`")),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn acme_vhosts_get_the_certificate_kept_under_the_state_dir() {
    let cfg = load(
        "srv_group g { server 127.0.0.1; }\n\
         acme { directory https://127.0.0.1:14000/dir; contact mailto:a@b.example mailto:c@b.example; state_dir acme; ca_root ca.pem; }\n\
         vhost Site.Example { tls_certificate acme; proxy_pass g; }\n\
         vhost other.example { proxy_pass g; }\n",
    );
    let acme = cfg.acme.clone().expect("acme");
    assert_eq!(acme.directory, "https://127.0.0.1:14000/dir");
    assert_eq!(acme.contact, ["mailto:a@b.example", "mailto:c@b.example"]);
    assert_eq!(acme.state_dir, Path::new("/etc/t/acme"));
    assert_eq!(acme.ca_root.as_deref(), Some(Path::new("/etc/t/ca.pem")));
    let site = cfg.vhost("Site.Example").expect("vhost");
    assert!(site.tls.acme);
    assert_eq!(
        site.tls.certificates[0].certificate,
        Path::new("/etc/t/acme/site.example/fullchain.pem")
    );
    assert_eq!(
        site.tls.certificates[0].key,
        Path::new("/etc/t/acme/site.example/key.pem")
    );
    assert!(!cfg.vhost("other.example").expect("vhost").tls.acme);
}

#[test]
fn frame_rate_multipliers_take_tempestas_whole_range() {
    // Tempesta's own tests load multipliers of 65536 (issue 35 found them refused here).
    let c = load(
        "ctrl_frame_rate_multiplier 65536;\n\
         window_update_frame_rate_multiplier 65536;\n",
    );
    assert_eq!(c.ctrl_frame_rate_multiplier, 65536);
    assert_eq!(c.window_update_frame_rate_multiplier, 65536);
}
