//! Health monitors in a `server_proto h2` group (issue 34: "Health checks over TLS and
//! HTTP/2 too"): the monitor's request goes as an HTTP/2 stream (nginx's access log says
//! `HTTP/2.0` for it) and its answer is judged as the HTTP/1 monitor judges one. Real nginx
//! origins, h2c (`listen ... http2`) and TLS with ALPN h2 (`listen ... ssl http2`): a
//! stopped server is taken out and traffic goes to the other, it is back once it answers
//! again; a server answering the monitor a wrong status, or a body whose CRC32 differs from
//! `resp_crc32`, is out; over TLS a server that does not choose h2 is out.

// Shared with upstream_tls.rs, which uses the rest of it.
#[allow(dead_code)]
mod upstream_tls_common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::proxy::Setup;
use e2e::{free_port, metric_sum, wait_for_port, write_file, Proc, TempDir};
use upstream_tls_common::*;

const T: Duration = Duration::from_secs(10);

/// A monitor whose expected body is "Hello" (0x31f37e9f is its CRC32 as Tempesta computes it).
const MONITOR: &str =
    "health_check h { request \"GET /health HTTP/1.1\\r\\nHost: o\\r\\n\\r\\n\"; \
                       resp_code 200; resp_crc32 0x31f37e9f; timeout 1; }\nsrv_group default";

/// nginx serving h2c on `addr`: `/health` answered `status` with `health_body`, anything else
/// `name`; its access log has each request's protocol, URI and status.
fn nginx_h2c(dir: &Path, addr: SocketAddr, name: &str, (status, health_body): (u16, &str)) -> Proc {
    let d = dir.join(format!("nginx-{}", addr.port()));
    std::fs::create_dir_all(&d).expect("nginx dir");
    write_file(
        &d.join("nginx.conf"),
        &format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log info;\nevents {{ worker_connections 64; }}\n\
             http {{\n log_format p '$server_protocol $request_uri $status';\n\
             access_log {d}/access.log p;\n\
             client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
             server {{\n  listen {addr} http2;\n\
             location = /health {{ return {status} \"{health_body}\"; }}\n\
             location / {{ return 200 \"{name}\"; }}\n }}\n}}\n",
            d = d.display(),
        ),
    );
    let mut cmd = Command::new("/usr/sbin/nginx");
    cmd.arg("-c").arg(d.join("nginx.conf")).arg("-p").arg(&d);
    let proc = Proc::spawn("nginx", cmd, &d);
    assert!(
        wait_for_port(addr, T),
        "nginx did not start\n{}",
        proc.logs()
    );
    proc
}

fn access_log(dir: &Path, addr: SocketAddr) -> String {
    std::fs::read_to_string(dir.join(format!("nginx-{}/access.log", addr.port())))
        .unwrap_or_default()
}

fn up(addr: SocketAddr) -> String {
    format!("ktls_proxy_upstream_server_up{{group=\"default\",server=\"{addr}\"}}")
}

#[test]
fn h2c_monitor_takes_out_stopped_and_wrong_servers_and_brings_one_back() {
    let dir = TempDir::new("h2-health");
    let addr = || SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (a, b, status, body) = (addr(), addr(), addr(), addr());
    let _a = nginx_h2c(dir.path(), a, "A", (200, "Hello"));
    let b_proc = nginx_h2c(dir.path(), b, "B", (200, "Hello"));
    let _status = nginx_h2c(dir.path(), status, "S", (503, "Hello"));
    let _body = nginx_h2c(dir.path(), body, "W", (200, "Hellp"));
    let setup = Setup::new("h2-health");
    let stats = addr();
    let http = setup.http;
    let conf = setup
        .config(
            a,
            &format!("server {b}; server {status}; server {body}; server_proto h2; health h;"),
            &format!("worker_threads 1;\nstats_listen {stats};"),
        )
        .replace("srv_group default", MONITOR);
    let proxy = setup.start(&conf);
    let logs = || proxy.proc.logs();
    for wrong in [status, body] {
        assert!(
            wait_metric(stats, &up(wrong), 0),
            "{wrong} is up\n{}",
            logs()
        );
        assert!(
            logs().contains(&format!("health check of {wrong} failed")),
            "{}",
            logs()
        );
    }
    assert_eq!(metric_sum(stats, &up(a)), 1, "{}", logs());
    assert_eq!(metric_sum(stats, &up(b)), 1, "{}", logs());
    // The checks went as HTTP/2 and were answered.
    for (server, line) in [
        (a, "HTTP/2.0 /health 200"),
        (status, "HTTP/2.0 /health 503"),
    ] {
        let log = access_log(dir.path(), server);
        assert!(log.contains(line), "{server}: {log}");
    }
    // Traffic reaches both good servers, and only them.
    let seen: Vec<String> = (0..12).map(|_| exchange(http, "GET", "").body).collect();
    assert!(
        seen.iter().all(|s| s == "A" || s == "B"),
        "{seen:?}\n{}",
        logs()
    );
    assert!(seen.iter().any(|s| s == "B"), "{seen:?}\n{}", logs());
    // B's origin stops: it is taken out, every request is A's.
    drop(b_proc);
    assert!(
        wait_metric(stats, &up(b), 0),
        "B stopped, still up\n{}",
        logs()
    );
    for _ in 0..10 {
        let answer = exchange(http, "GET", "");
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (200, "A"),
            "{}",
            logs()
        );
    }
    // B comes back on its port: its monitor brings it back and it gets traffic again.
    let _b = nginx_h2c(dir.path(), b, "B", (200, "Hello"));
    assert!(
        wait_metric(stats, &up(b), 1),
        "B back, still out\n{}",
        logs()
    );
    let deadline = Instant::now() + T;
    let mut back = false;
    while !back && Instant::now() < deadline {
        back = exchange(http, "GET", "").body == "B";
    }
    assert!(back, "B never got traffic again\n{}", logs());
}

#[test]
fn tls_monitor_goes_over_alpn_h2_and_a_server_without_h2_is_out() {
    let dir = TempDir::new("h2-health-tls-pki");
    let pki = Pki::new(dir.path());
    let origin = echo();
    let h2 = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let extra = format!("listen {h2} ssl http2;\nlocation = /health {{ return 200 \"Hello\"; }}");
    let nginx = Nginx::start(dir.path(), &pki.server, &extra, origin.addr());
    let over_h2 = Nginx {
        proc: nginx.proc,
        addr: h2,
    };
    // nginx's plain `ssl` port of the same server: it does not choose h2.
    let no_h2 = nginx.addr;
    let ca = pki.ca.display().to_string();
    let setup = Setup::new("h2-health-tls");
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup
        .config(
            h2,
            &format!(
                "server {no_h2}; server_proto h2; server_tls on; server_tls_ca {ca}; health h;"
            ),
            &format!("worker_threads 1;\nstats_listen {stats};"),
        )
        .replace("srv_group default", MONITOR);
    let http = setup.http;
    let proxy = setup.start(&conf);
    let logs = || format!("{}\n{}", proxy.proc.logs(), over_h2.proc.logs());
    assert!(wait_metric(stats, &up(no_h2), 0), "{}", logs());
    // The h2 server's checks did the handshake (the other one's ends in an alert).
    assert!(handshakes(stats, "full") >= 1, "{}", logs());
    assert_eq!(metric_sum(stats, &up(h2)), 1, "{}", logs());
    // Checks keep passing (one every second); requests go to the h2 server only.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(metric_sum(stats, &up(h2)), 1, "{}", logs());
    for _ in 0..6 {
        let answer = exchange(http, "GET", "");
        assert_eq!(answer.status, 200, "{}\n{}", answer.head, logs());
        assert_eq!(answer.header("x-alpn"), Some("h2"), "{}", answer.head);
    }
}
