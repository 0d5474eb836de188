//! Tempesta parity, round 2 (issue 35): configurations Tempesta refuses are refused by
//! `proxy -t`, and those it loads load, checked through the real binary.

/// Runs `proxy -t` on `text`; returns whether it loaded and what it printed on stderr.
fn check(tag: &str, text: &str) -> (bool, String) {
    let dir = e2e::TempDir::new(tag);
    let path = dir.join("proxy.conf");
    std::fs::write(&path, text).expect("write config");
    let out = e2e::proxy_cmd(&path, &["-t"]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SITE: &str = "listen 127.0.0.1:1;\nsrv_group default { server 127.0.0.1:2; }\n\
                    vhost site { proxy_pass default; }\nhttp_chain { -> site; }\n";

/// `cache_purge` without `cache_purge_acl`, or the list without `cache_purge`: Tempesta
/// refuses both ("Directives mismatching", fw/vhost.c), so PURGE is never open to every
/// client; with both the configuration loads.
#[test]
fn cache_purge_and_its_acl_need_each_other() {
    let (ok, err) = check("cfg-purge", &format!("cache 2;\ncache_purge;\n{SITE}"));
    assert!(!ok, "cache_purge alone loaded: {err}");
    assert!(
        err.contains("proxy.conf:2:1") && err.contains("needs `cache_purge_acl`"),
        "{err}"
    );
    let (ok, err) = check(
        "cfg-acl",
        &format!("cache 2;\ncache_purge_acl 127.0.0.1;\n{SITE}"),
    );
    assert!(!ok, "cache_purge_acl alone loaded: {err}");
    assert!(err.contains("without `cache_purge`"), "{err}");
    let both = format!("cache 2;\ncache_purge;\ncache_purge_acl 127.0.0.1;\n{SITE}");
    let (ok, err) = check("cfg-both", &both);
    assert!(ok, "{err}");
}

/// `ctrl_frame_rate_multiplier` and `window_update_frame_rate_multiplier` take 1 to 65536,
/// Tempesta's range (fw/http.c, TfwCfgSpecInt { 1, 65536 }): 65536 loads, 65537 does not.
#[test]
fn frame_rate_multipliers_take_tempestas_range() {
    for name in [
        "ctrl_frame_rate_multiplier",
        "window_update_frame_rate_multiplier",
    ] {
        let (ok, err) = check("cfg-mul", &format!("{name} 65536;\n{SITE}"));
        assert!(ok, "{name} 65536: {err}");
        let (ok, err) = check("cfg-mul-over", &format!("{name} 65537;\n{SITE}"));
        assert!(!ok && err.contains("proxy.conf:1:"), "{name} 65537: {err}");
    }
}
