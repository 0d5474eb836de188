//! TLS to the servers (`server_tls` and its options, an extension): what a group gets,
//! what is inherited from the top level, and each mistake refused at its `file:line:col`.

use std::path::{Path, PathBuf};

use config::{load_path_and_files, parse_str, Diagnostics, ServerGroup};

fn groups(text: &str) -> Vec<ServerGroup> {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(l) => l.config.server_groups,
        Err(d) => panic!("refused:\n{text}\n{d}"),
    }
}

fn fail(text: &str) -> Diagnostics {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(l) => panic!("accepted:\n{text}\n{:#?}", l.config.server_groups),
        Err(d) => d,
    }
}

/// The error at `line:col` says `needle`.
fn assert_error(d: &Diagnostics, (line, col): (u32, u32), needle: &str) {
    assert!(
        d.errors
            .iter()
            .any(|e| e.line == line && e.col == col && e.message.contains(needle)),
        "no error {line}:{col} containing {needle:?} in\n{d}"
    );
}

#[test]
fn tls_is_off_unless_asked_and_verifies_by_default() {
    let g = groups("srv_group a { server 127.0.0.1:8443; }\n");
    assert_eq!(g[0].tls, None);
    let g = groups("srv_group a { server 127.0.0.1:8443; server_tls on; }\n");
    let tls = g[0].tls.as_ref().expect("tls on");
    assert!(tls.verify, "verification is on by default");
    assert_eq!((&tls.ca, &tls.sni, &tls.cert), (&None, &None, &None));
}

#[test]
fn every_option_is_read_and_paths_start_at_the_config_directory() {
    let g = groups(
        "srv_group a {\n server 127.0.0.1:8443;\n server_tls on;\n server_tls_ca ca.pem;\n\
         server_tls_verify off;\n server_tls_sni Origin.Example.;\n\
         server_tls_cert /k/client.crt client.key;\n}\n",
    );
    let tls = g[0].tls.as_ref().expect("tls on");
    assert_eq!(tls.ca.as_deref(), Some(Path::new("/etc/t/ca.pem")));
    assert!(!tls.verify);
    assert_eq!(tls.sni.as_deref(), Some("origin.example"));
    assert_eq!(
        tls.cert,
        Some((
            PathBuf::from("/k/client.crt"),
            PathBuf::from("/etc/t/client.key")
        ))
    );
}

/// Top-level settings configure the implicit group and are the defaults of explicit groups
/// (as every group setting); a group may turn TLS off for itself.
#[test]
fn top_level_settings_are_the_groups_defaults() {
    let g = groups(
        "server 127.0.0.1:8443;\nserver_tls on;\nserver_tls_sni o.test;\n\
         srv_group b { server 127.0.0.2:8443; server_tls_sni b.test; }\n\
         srv_group c { server 127.0.0.3:80; server_tls off; }\n",
    );
    let sni = |i: usize| g[i].tls.as_ref().and_then(|t| t.sni.clone());
    assert_eq!(sni(0).as_deref(), Some("o.test"));
    assert_eq!(sni(1).as_deref(), Some("b.test"));
    assert_eq!(g[2].tls, None);
}

#[test]
fn options_without_server_tls_on_are_refused_where_written() {
    let d = fail("srv_group a {\n server 127.0.0.1;\n server_tls_ca /x/ca.pem;\n}\n");
    assert_error(
        &d,
        (3, 2),
        "`server_tls_ca` is set but TLS to the servers is off",
    );
    let d = fail("srv_group a { server 127.0.0.1; server_tls off; server_tls_verify off; }\n");
    assert_error(&d, (1, 49), "`server_tls_verify` is set but TLS");
    let d = fail("server 127.0.0.1;\nserver_tls_sni a.test;\n");
    assert_error(&d, (2, 1), "`server_tls_sni` is set but TLS");
}

#[test]
fn malformed_options_are_refused_in_words() {
    let g = "srv_group a { server 127.0.0.1; server_tls on; ";
    let d = fail(&format!("{g}server_tls_cert /x/c.crt; }}\n"));
    assert_error(&d, (1, 48), "certificate without its private key");
    let d = fail(&format!("{g}server_tls_sni 10.0.0.1; }}\n"));
    assert_error(&d, (1, 63), "is an IP address, which SNI cannot carry");
    let d = fail(&format!("{g}server_tls_sni bad_name; }}\n"));
    assert_error(&d, (1, 63), "is not a host name");
    let d = fail(&format!("{g}server_tls_verify maybe; }}\n"));
    assert_error(&d, (1, 66), "is not a boolean");
    let d = fail(&format!("{g}server_tls on; }}\n"));
    assert_error(&d, (1, 48), "duplicate `server_tls`");
    let d = fail("vhost v { server_tls on; proxy_pass default; }\nserver 127.0.0.1;\n");
    assert!(d.to_string().contains("server_tls"), "{d}");
}

/// The files are read as the proxy loads: a missing CA bundle or a key given as the
/// certificate is refused at its own argument.
#[test]
fn missing_or_wrong_files_are_named_at_their_argument() {
    let dir = std::env::temp_dir().join(format!("server-tls-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let key = dir.join("client.key");
    std::fs::write(
        &key,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .expect("write key");
    let conf = dir.join("p.conf");
    std::fs::write(
        &conf,
        "srv_group a {\n server 127.0.0.1:8443;\n server_tls on;\n server_tls_ca nowhere.pem;\n\
         server_tls_cert client.key client.key;\n}\n",
    )
    .expect("write config");
    let d = match load_path_and_files(&conf) {
        Ok(_) => panic!("accepted a missing CA file"),
        Err(d) => d,
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert_error(&d, (4, 2), "nowhere.pem: does not exist");
    assert_error(&d, (5, 17), "holds a private key, not a certificate");
}
