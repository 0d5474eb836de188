//! Bounded fuzzing inside `cargo test`: random bytes and randomly mutated
//! real configurations must never panic the loader; they either load or
//! produce diagnostics. (The unbounded version is fuzz/fuzz_targets/config_parse.rs.)

use std::path::Path;

use proptest::prelude::*;

const SEED_CONF: &str = include_str!("../../etc/tempesta.conf");
const SEED_TOML: &str = include_str!("../../etc/tempesta.toml");

/// A second, self-contained seed with syntax the first lacks, so mutations
/// reach every validator.
const SEED_EXTRA: &str = r#"
tls_certificate /c.pem; tls_certificate_key /k.pem;
listen 443 proto="h2,https";
srv_group default { server 127.0.0.1; }
srv_group app { server 10.0.0.1:80 conns_n=4 weight=10 backup; sched ratio predict percentile 90 past=30 ahead=10; health h; }
health_check h { request "GET / HTTP/1.0\r\n\r\n"; resp_code 200; resp_crc32 0xabc; timeout 3; }
vhost v { proxy_pass app backup=default; location regex "/^\/a/i" { cache_bypass suffix ".php"; frang_limits { http_body_len 5; } } }
frang_limits { ip_block 30; http_resp_code_block 403 404 10 5; http_ct_vals "text/plain"; }
http_uri_brange 0x2f 0x41-0x5a 48;
cache_purge; cache_purge_acl 10.0.0.0/8; cache_use_stale 5*; access_log dmesg mmap logger_config=/x.json;
http_chain c { hdr "X" ~ "/^a+$/" -> mark = 3; cookie "s" != "*x" -> 302 = https://$host$request_uri; -> v; }
http_chain { method == purge -> cache_disable = 1; uri == "/x*" -> c; -> block; }
"#;

fn check(name: &str, text: &str) {
    match config::parse_str(name, text, Path::new("/tmp")) {
        Ok(loaded) => {
            // Every warning renders.
            for w in &loaded.warnings {
                assert!(!w.to_string().is_empty());
            }
        }
        Err(d) => {
            assert!(!d.errors.is_empty(), "Err without errors");
            assert!(!d.to_string().is_empty());
        }
    }
}

/// An edit: (position fraction, kind, byte).
fn mutate(seed: &str, edits: &[(u16, u8, u8)]) -> String {
    let mut bytes = seed.as_bytes().to_vec();
    for &(at, kind, b) in edits {
        if bytes.is_empty() {
            bytes.push(b);
            continue;
        }
        let i = usize::from(at) * bytes.len() / usize::from(u16::MAX).max(1);
        let i = i.min(bytes.len() - 1);
        // Favour the characters that matter to the grammar.
        const SPECIAL: &[u8] = b"{};=\"#\\-!>~* \n0";
        let b = if b % 2 == 0 {
            SPECIAL[usize::from(b / 2) % SPECIAL.len()]
        } else {
            b
        };
        match kind % 3 {
            0 => bytes[i] = b,
            1 => bytes.insert(i, b),
            _ => {
                bytes.remove(i);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        check("r.conf", &text);
        check("r.toml", &text);
    }

    #[test]
    fn mutated_configs_never_panic(edits in proptest::collection::vec((any::<u16>(), any::<u8>(), any::<u8>()), 1..12)) {
        check("m.conf", &mutate(SEED_CONF, &edits));
        check("m.conf", &mutate(SEED_EXTRA, &edits));
    }

    /// Ticket key files (`tls_tickets keys=`, read at load and again whenever the file
    /// changes): any bytes give keys or an error in words, never a panic; base64-ish text
    /// reaches the decoder and the key sizes.
    #[test]
    fn ticket_key_files_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
        lines in proptest::collection::vec("[A-Za-z0-9+/=# ]{0,120}", 0..5),
    ) {
        if let Err(e) = config::ticket_keys::parse(&bytes) {
            prop_assert!(!e.is_empty());
        }
        match config::ticket_keys::parse(lines.join("\n").as_bytes()) {
            Ok(keys) => prop_assert!(keys.iter().all(|k| k.aes.len() == k.hmac.len())),
            Err(e) => prop_assert!(!e.is_empty()),
        }
    }

    #[test]
    fn mutated_toml_never_panics(edits in proptest::collection::vec((any::<u16>(), any::<u8>(), any::<u8>()), 1..8)) {
        check("m.toml", &mutate(SEED_TOML, &edits));
    }
}

#[test]
fn the_seeds_themselves_load() {
    for seed in [SEED_CONF, SEED_EXTRA] {
        if let Err(d) = config::parse_str("seed.conf", seed, Path::new("/tmp")) {
            panic!("{d}");
        }
    }
    if let Err(d) = config::parse_str("seed.toml", SEED_TOML, Path::new("/tmp")) {
        panic!("{d}");
    }
}
