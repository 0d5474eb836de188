//! Real configurations: the two published Tempesta benchmark configs (read
//! from the team's shared seeds file at test time, never copied here: a missing
//! file fails the test unless KTLS_PROXY_SKIP_SHARED=1), the
//! project's etc/ files in both syntaxes, and the reference directive list.

use std::path::{Path, PathBuf};

use config::{load_path, parse_str, Action, Pattern, Proto};

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the team's shared folder (`../shared` beside the repository, or
/// `$KTLS_PROXY_SHARED_DIR`): its text, or None when `KTLS_PROXY_SKIP_SHARED=1` says to go
/// without it. Missing otherwise is a failure, never a silent skip: CI has the folder.
fn shared(rel: &str) -> Option<String> {
    let dir = std::env::var_os("KTLS_PROXY_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../shared"));
    let path = dir.join(rel);
    match std::fs::read_to_string(&path) {
        Ok(t) => Some(t),
        Err(_) if std::env::var_os("KTLS_PROXY_SKIP_SHARED").is_some() => {
            eprintln!(
                "SKIP (KTLS_PROXY_SKIP_SHARED): {} is missing",
                path.display()
            );
            None
        }
        Err(e) => panic!(
            "{}: {e}. These tests read the team's shared folder beside the repository; \
             set KTLS_PROXY_SHARED_DIR to where it is, or KTLS_PROXY_SKIP_SHARED=1 to skip them",
            path.display()
        ),
    }
}

/// The lines strictly between the first line starting with `from` and the
/// next line starting with `to`.
fn between(text: &str, from: impl Fn(&str) -> bool, to: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| from(l))
        .expect("start marker present")
        + 1;
    let len = lines[start..]
        .iter()
        .position(|l| l.starts_with(to))
        .expect("end marker present");
    lines[start..start + len].join("\n")
}

fn benchmark_configs() -> Option<(String, String)> {
    let seeds = shared("seeds/tempesta-vs-nginx-benchmarks.txt")?;
    let https = between(&seeds, |l| l.trim() == "Tempesta config:", "Nginx config");
    let h2 = between(
        &seeds,
        |l| l.starts_with("Current master as of") && l.contains("with config"),
        "and the old website",
    );
    Some((https, h2))
}

#[test]
fn https_benchmark_config_loads_verbatim() {
    let Some((https, _)) = benchmark_configs() else {
        return;
    };
    assert!(
        https.contains("proto=https"),
        "extracted the wrong block:\n{https}"
    );
    let loaded = parse_str("bench-https.conf", &https, Path::new("/etc/tempesta"))
        .unwrap_or_else(|d| panic!("{d}"));
    let c = &loaded.config;
    assert_eq!(c.listeners.len(), 2);
    assert_eq!(c.listeners[0].protos, vec![Proto::Https]);
    assert_eq!(c.listeners[1].protos, vec![Proto::Http]);
    let vhost = c.vhost("tempesta-tech.com").expect("vhost present");
    assert_eq!(vhost.tls.tickets.secret.as_deref(), Some("f00)9eR59*_/22"));
    assert_eq!(vhost.tls.tickets.lifetime.as_secs(), 7200);
    assert_eq!(
        vhost.tls.certificates[0].certificate,
        PathBuf::from("/root/tempesta/etc/tfw-root.crt")
    );
    // `cache_fulfill * *` at top level, after the vhost, still applies to it.
    assert_eq!(vhost.cache.rules.len(), 1);
    let chain = c
        .http_tables
        .chain("redirection_chain")
        .expect("chain present");
    assert_eq!(chain.rules.len(), 9);
    let redirects = chain
        .rules
        .iter()
        .filter(|r| matches!(r.action, Action::Redirect { status: 301, .. }))
        .count();
    assert_eq!(redirects, 8);
    assert_eq!(
        chain.rules[8].action,
        Action::Vhost("tempesta-tech.com".into())
    );
    assert_eq!(c.http_tables.main.rules.len(), 1);
    assert_eq!(
        c.http_tables.main.rules[0].action,
        Action::Chain("redirection_chain".into())
    );
}

#[test]
fn h2_benchmark_config_loads_verbatim() {
    let Some((_, h2)) = benchmark_configs() else {
        return;
    };
    assert!(h2.contains("proto=h2"), "extracted the wrong block:\n{h2}");
    let loaded = parse_str("bench-h2.conf", &h2, Path::new("/etc/tempesta"))
        .unwrap_or_else(|d| panic!("{d}"));
    let c = &loaded.config;
    assert_eq!(c.listeners[0].protos, vec![Proto::H2]);
    assert!(c.tls.match_any_server_name);
    let uri = c.byte_ranges.uri.expect("http_uri_brange set");
    assert!(uri.contains(b'/') && uri.contains(b'Z') && uri.contains(b'q') && uri.contains(b'='));
    assert!(!uri.contains(b'%'), "the comment says: no '%'");
    let block = c
        .default_vhost
        .frang
        .http_resp_code_block
        .as_ref()
        .expect("resp code block");
    assert_eq!(block.codes, vec![400, 403, 404]);
    assert_eq!((block.limit, block.timeframe.as_secs()), (100, 10));
    assert_eq!(c.frang.http_header_chunk_cnt, Some(10));
    // The global certificate is inherited by the vhost that has none.
    let vhost = c.vhost("tempesta-tech.com").expect("vhost present");
    assert_eq!(vhost.tls.certificates, c.default_vhost.tls.certificates);
    assert_eq!(vhost.tls.certificates.len(), 1);
}

#[test]
fn etc_conf_and_toml_load_to_the_same_config() {
    let etc = manifest_dir().join("../etc");
    let conf = load_path(&etc.join("tempesta.conf")).unwrap_or_else(|d| panic!("{d}"));
    let toml = load_path(&etc.join("tempesta.toml")).unwrap_or_else(|d| panic!("{d}"));
    assert!(conf.warnings.is_empty(), "{:?}", conf.warnings);
    assert_eq!(conf.config, toml.config);
    // Relative certificate paths were resolved against etc/.
    let v = conf.config.vhost("tempesta-tech.com").expect("vhost");
    let cert = &v.tls.certificates[0].certificate;
    assert!(
        cert.is_absolute() && cert.ends_with("etc/certs/tempesta.crt"),
        "{}",
        cert.display()
    );
    // As in the reference: only the site's host is routed (others match no rule: 403).
    let rules = &conf.config.http_tables.main.rules;
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].condition.as_ref().map(|c| &c.pattern),
        Some(&Pattern::Exact("tempesta-tech.com".into()))
    );
    assert_eq!(rules[0].action, Action::Chain("redirection_chain".into()));
    let chain = conf
        .config
        .http_tables
        .chain("redirection_chain")
        .expect("chain");
    assert_eq!(chain.rules.len(), 9, "eight redirects and the default rule");
}

#[test]
fn every_directive_of_the_reference_is_known() {
    let Some(reference) = shared("reference/tempesta_fw.conf") else {
        return;
    };
    let mut names: Vec<&str> = reference
        .lines()
        .filter_map(|l| l.strip_prefix("#").map(str::trim))
        .filter_map(|l| l.strip_prefix("TAG:"))
        .map(|n| n.trim().trim_end_matches('.'))
        .collect();
    names.sort();
    names.dedup();
    assert!(
        names.len() > 60,
        "expected the reference's directive headings, got {names:?}"
    );
    let unknown: Vec<&&str> = names
        .iter()
        .filter(|n| !config::directives::is_known(n))
        .collect();
    assert!(
        unknown.is_empty(),
        "directives of the reference not known here: {unknown:?}"
    );
}

#[test]
fn the_reference_file_itself_loads() {
    let Some(reference) = shared("reference/tempesta_fw.conf") else {
        return;
    };
    // It is all comments: it must load as an empty configuration.
    let loaded =
        parse_str("tempesta_fw.conf", &reference, Path::new("/")).unwrap_or_else(|d| panic!("{d}"));
    assert!(loaded.config.listeners.is_empty());
    assert_eq!(
        loaded.config.effective_listeners()[0].addr,
        "0.0.0.0:80".parse().unwrap()
    );
}

#[test]
fn toml_round_trips_through_serde() {
    let etc = manifest_dir().join("../etc");
    let conf = load_path(&etc.join("tempesta.conf")).unwrap_or_else(|d| panic!("{d}"));
    let text = toml::to_string(&conf.config).expect("serialize");
    let back =
        parse_str("round.toml", &text, Path::new("/")).unwrap_or_else(|d| panic!("{d}\n{text}"));
    assert_eq!(back.config, conf.config);
}

#[test]
fn load_path_reports_unreadable_files_and_resolves_against_the_file_dir() {
    let d = load_path(Path::new("/nonexistent/dir/x.conf")).unwrap_err();
    assert_eq!(d.errors.len(), 1);
    assert!(
        d.to_string()
            .starts_with("/nonexistent/dir/x.conf: error: cannot read"),
        "{d}"
    );

    let dir = std::env::temp_dir().join(format!("config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let conf =
        "listen 443 proto=https;\ntls_certificate c/a.crt;\ntls_certificate_key /abs/a.key;\n";
    let toml = "[[listeners]]\naddr = \"0.0.0.0:443\"\nprotos = [\"https\"]\n\n\
                [default_vhost]\nname = \"default\"\n\
                tls.certificates = [{ certificate = \"c/a.crt\", key = \"/abs/a.key\" }]\n";
    std::fs::write(dir.join("a.conf"), conf).expect("write");
    std::fs::write(dir.join("a.toml"), toml).expect("write");
    let from_conf = load_path(&dir.join("a.conf")).unwrap_or_else(|d| panic!("{d}"));
    let from_toml = load_path(&dir.join("a.toml")).unwrap_or_else(|d| panic!("{d}"));
    let _ = std::fs::remove_dir_all(&dir);
    let pair = &from_conf.config.default_vhost.tls.certificates[0];
    assert!(pair.certificate.is_absolute() && pair.certificate.ends_with("c/a.crt"));
    assert_eq!(pair.key, PathBuf::from("/abs/a.key"));
    assert_eq!(from_conf.config, from_toml.config);
}
