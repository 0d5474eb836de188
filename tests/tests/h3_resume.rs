//! Issue 33, "session tickets resume": QUIC handshakes take a session ticket and resume with
//! it, under the start vhost's `tls_tickets` as TCP's handshakes do (proxy/src/tls_quic.rs,
//! tls_quic_tickets.rs); aioquic is the client (tests/py/h3_resume.py).

mod h3_common;

use std::process::Command;

use h3_common::{origin, start, Site};

/// What h3_resume.py saw: a ticket, then on `to` (another proxy, or the same) whether the
/// session resumed and the GET's status.
fn resume(from: &Site, to: &Site) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_resume.py");
    let (a, b) = (from.h3.port().to_string(), to.h3.port().to_string());
    let out = Command::new("timeout")
        .args(["40", "python3", script, &a, &b])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "h3_resume.py: {stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        from.proxy.proc.logs()
    );
    stdout
}

/// The `tft` of access log line `line` (hex).
fn tft(line: &str) -> u64 {
    let value = line
        .split("\"tft=")
        .nth(1)
        .and_then(|r| r.split('"').next());
    u64::from_str_radix(value.unwrap_or(""), 16).unwrap_or(0)
}

/// The resumed handshake is one to the fingerprints too (`tft` bit 5, as on TCP).
#[test]
fn a_quic_session_resumes_with_its_ticket() {
    let origin = origin();
    let log = std::env::temp_dir().join(format!("h3-resume-{}.log", std::process::id()));
    let extra = format!("access_log_file {};", log.display());
    let site = start(&origin, "h3-resume", &extra);
    let seen = resume(&site, &site);
    assert!(
        seen.contains("ticket yes") && seen.contains("resumed True") && seen.contains("status 200"),
        "{seen}"
    );
    let lines = e2e::lines_once(&log, 2, std::time::Duration::from_secs(5));
    let _ = std::fs::remove_file(&log);
    assert_eq!(
        lines.len(),
        2,
        "one access log line per connection: {lines:?}"
    );
    let (full, resumed) = (tft(&lines[0]), tft(&lines[1]));
    assert!(full & 0x20 == 0 && resumed & 0x20 == 0x20, "{lines:?}");
}

#[test]
fn tls_tickets_disable_sends_no_ticket_over_quic() {
    let origin = origin();
    let site = start(&origin, "h3-no-tickets", "tls_tickets disable;");
    let seen = resume(&site, &site);
    assert!(seen.contains("ticket no"), "{seen}");
}

/// Several instances with the same `tls_tickets secret=` or key ring file resume each
/// other's QUIC sessions (one fleet behind an L4 balancer); another secret does not, and
/// its client gets a full handshake instead.
#[test]
fn instances_sharing_ticket_keys_resume_each_others_quic_sessions() {
    let origin = origin();
    let a = start(&origin, "h3-resume-a", "tls_tickets secret=fleet-one;");
    let b = start(&origin, "h3-resume-b", "tls_tickets secret=fleet-one;");
    let other = start(&origin, "h3-resume-c", "tls_tickets secret=fleet-two;");
    let seen = resume(&a, &b);
    assert!(
        seen.contains("resumed True") && seen.contains("status 200"),
        "{seen}"
    );
    let seen = resume(&a, &other);
    assert!(
        seen.contains("resumed False") && seen.contains("status 200"),
        "{seen}"
    );

    let keys = a.proxy.dir.join("ticket.keys");
    let key = openssl::base64::encode_block(&[42u8; 80]);
    e2e::write_file(&keys, &format!("{key}\n"));
    let extra = format!("tls_tickets keys={};", keys.display());
    let (c, d) = (
        start(&origin, "h3-resume-d", &extra),
        start(&origin, "h3-resume-e", &extra),
    );
    let seen = resume(&c, &d);
    assert!(
        seen.contains("resumed True") && seen.contains("status 200"),
        "{seen}"
    );
    // The key file's tickets do not open where a secret's keys are in force.
    let seen = resume(&c, &a);
    assert!(seen.contains("resumed False"), "{seen}");
}
