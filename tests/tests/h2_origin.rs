//! HTTP/2 to origins (`server_proto h2`, issue 34) through the real binary: nginx 1.22 as a
//! cleartext prior-knowledge HTTP/2 origin (`listen ... http2;`), and the misbehaving origin
//! `tests/py/h2_bad_origin.py`.
//!
//! What is shown: many exchanges from many clients share ONE upstream connection (nginx's
//! access log: one `$connection`, every request `HTTP/2.0`), more at once than nginx's
//! `http2_max_concurrent_streams` wait for a stream instead of failing; bodies arrive intact
//! both ways (a 2 MiB download, a 1 MiB upload through nginx to an HTTP/1.1 origin that
//! checksums it); an HTTP/2 client gets the origin's answer over HTTP/2; streams the origin
//! refuses (REFUSED_STREAM) are retried; a PING flood is cut and answered 502, never a hang;
//! `server_proto h2` loads over TLS and cleartext, with a health monitor too.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{
    free_port, metric_sum, output_text, proxy_cmd, wait_for_port, workspace_root, write_file,
};
use e2e::{Proc, TempDir};

const T: Duration = Duration::from_secs(10);

fn fnv(data: &[u8]) -> String {
    let h = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{h:016x}")
}

/// nginx serving h2c: `/small` answered by itself, `/big` a file, `/echo` passed to
/// `origin` over HTTP/1.1; its access log names each request's connection and protocol.
struct Nginx {
    _proc: Proc,
    addr: SocketAddr,
    log: std::path::PathBuf,
}

fn nginx(dir: &Path, directives: &str, big: &[u8], origin: SocketAddr) -> Nginx {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let d = dir.join(format!("nginx-{}", addr.port()));
    std::fs::create_dir_all(d.join("www")).expect("nginx dir");
    std::fs::write(d.join("www/big"), big).expect("big file");
    let log = d.join("access.log");
    write_file(
        &d.join("nginx.conf"),
        &format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log info;\nevents {{ worker_connections 256; }}\n\
             http {{\n log_format conn '$connection $server_protocol $request_uri $status';\n\
             access_log {log} conn;\n\
             client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
             server {{\n  listen {addr} http2;\n  {directives}\n\
             location = /small {{ return 200 \"small $request_uri\\n\"; }}\n\
             location = /big {{ root {d}/www; }}\n\
             location / {{ proxy_pass http://{origin}; proxy_http_version 1.1; \
             proxy_request_buffering off; }}\n }}\n}}\n",
            d = d.display(),
            log = log.display(),
        ),
    );
    let mut cmd = Command::new("/usr/sbin/nginx");
    cmd.arg("-c").arg(d.join("nginx.conf")).arg("-p").arg(&d);
    let proc = Proc::spawn("nginx", cmd, &d);
    assert!(wait_for_port(addr, T), "nginx did not start");
    Nginx {
        _proc: proc,
        addr,
        log,
    }
}

/// The proxy (one worker) with one HTTP/2 group of one server and at most one connection to
/// it; its
/// HTTP/1.1 listener and its h2c one.
fn proxy(tag: &str, server: SocketAddr, group_extra: &str) -> (Proxy, SocketAddr, SocketAddr) {
    proxy_with(tag, server, group_extra, "")
}

/// [`proxy`] with a stats listener: (the proxy, its HTTP/1.1 listener, its stats listener).
fn proxy_with_stats(
    tag: &str,
    server: SocketAddr,
    group_extra: &str,
) -> (Proxy, SocketAddr, SocketAddr) {
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let stats_listen = format!("stats_listen {stats};");
    let (proxy, http, _) = proxy_with(tag, server, group_extra, &stats_listen);
    (proxy, http, stats)
}

fn proxy_with(
    tag: &str,
    server: SocketAddr,
    group_extra: &str,
    extra: &str,
) -> (Proxy, SocketAddr, SocketAddr) {
    let setup = Setup::new(tag);
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let http = setup.http;
    let conf = setup
        .config(
            server,
            &format!("server_proto h2; {group_extra}"),
            &format!("listen {h2c} proto=h2c;\nworker_threads 1;\n{extra}"),
        )
        .replace(
            &format!("server {server};"),
            &format!("server {server} conns_n=1;"),
        );
    let proxy = setup.start(&conf);
    assert!(wait_for_port(h2c, T), "{}", proxy.proc.logs());
    (proxy, http, h2c)
}

/// nginx's server directives of most cases: at most 8 streams per connection.
const STREAMS_8: &str = "http2_max_concurrent_streams 8;";

/// curl with `args`: (status lines, stdout).
fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn access_log(n: &Nginx) -> Vec<(String, String, String, String)> {
    let text = std::fs::read_to_string(&n.log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 4).then(|| (f[0].into(), f[1].into(), f[2].into(), f[3].into()))
        })
        .collect()
}

/// 40 GETs of `/small?n=I` through the proxy's `http` listener, `parallel` at once (curl
/// `--parallel`): each answered 200 with its own body.
fn small_in_parallel(proxy: &Proxy, http: SocketAddr, parallel: &str) {
    let urls: Vec<String> = (0..40)
        .map(|i| format!("http://{http}/small?n={i}"))
        .collect();
    let mut args = vec![
        "--parallel",
        "--parallel-max",
        parallel,
        "-H",
        "Host: site.test",
        "-w",
        "%{http_code}\\n",
    ];
    args.extend(urls.iter().map(String::as_str));
    let out = curl(&args);
    for i in 0..40 {
        assert!(
            out.contains(&format!("small /small?n={i}\n")),
            "request {i} missing:\n{out}\n{}",
            proxy.proc.logs()
        );
    }
    assert_eq!(out.matches("200\n").count(), 40, "{out}");
}

/// nginx ends an HTTP/2 connection after `keepalive_requests` with GOAWAY (NO_ERROR): the
/// streams it did not take are retried and later exchanges open new connections, every
/// request is answered, and the routine GOAWAY is no warning in the proxy's log.
#[test]
fn an_origin_going_away_every_three_requests_loses_none() {
    let dir = TempDir::new("h2-origin-goaway");
    let origin = Origin::start(|_| Response::ok("x"));
    let ng = nginx(dir.path(), "keepalive_requests 3;", b"", origin.addr());
    let (proxy, http, _) = proxy("h2-origin-goaway", ng.addr, "");
    small_in_parallel(&proxy, http, "10");
    let connections: std::collections::HashSet<String> =
        access_log(&ng).into_iter().map(|(c, ..)| c).collect();
    assert!(
        connections.len() >= 14,
        "40 requests, 3 per connection: {connections:?}"
    );
    assert!(
        !proxy.proc.logs().contains("GOAWAY"),
        "{}",
        proxy.proc.logs()
    );
}

#[test]
fn many_exchanges_share_one_h2c_connection_to_nginx() {
    let dir = TempDir::new("h2-origin-nginx");
    let big: Vec<u8> = (0..2 << 20).map(|i: u32| (i % 251) as u8).collect();
    let origin = Origin::start(|r| Response::ok(format!("{} {}", r.body.len(), fnv(&r.body))));
    let ng = nginx(dir.path(), STREAMS_8, &big, origin.addr());
    let (proxy, http, h2c) = proxy("h2-origin-nginx", ng.addr, "");
    // 40 requests over 20 client connections at once: more than nginx's 8 streams.
    small_in_parallel(&proxy, http, "20");
    // A 2 MiB body down, a 1 MiB body up (nginx passes it to the HTTP/1.1 origin).
    let down = Command::new("curl")
        .args(["-s", "--max-time", "20", "-H", "Host: site.test"])
        .arg(format!("http://{http}/big"))
        .output()
        .expect("curl");
    assert_eq!(down.stdout.len(), big.len(), "{}", proxy.proc.logs());
    assert!(down.stdout == big, "the 2 MiB body differs");
    let up: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 253) as u8).collect();
    let up_file = dir.join("up");
    std::fs::write(&up_file, &up).expect("write");
    let posted = curl(&[
        "-H",
        "Host: site.test",
        "--data-binary",
        &format!("@{}", up_file.display()),
        &format!("http://{http}/echo"),
    ]);
    assert_eq!(
        posted,
        format!("{} {}", up.len(), fnv(&up)),
        "{}",
        proxy.proc.logs()
    );
    // An HTTP/2 client (h2c by prior knowledge) through to the HTTP/2 origin.
    let h2 = curl(&[
        "--http2-prior-knowledge",
        "-H",
        "Host: site.test",
        "-w",
        " %{http_version}",
        &format!("http://{h2c}/small?h2"),
    ]);
    assert_eq!(h2, "small /small?h2\n 2", "{}", proxy.proc.logs());
    let log = access_log(&ng);
    assert_eq!(log.len(), 43, "{log:?}");
    assert!(log.iter().all(|l| l.1 == "HTTP/2.0"), "{log:?}");
    let conns: std::collections::BTreeSet<&str> = log.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(conns.len(), 1, "one upstream connection expected: {log:?}");
}

/// A request's `grpc-timeout` (and a second of grace for the ends to act on it first), when
/// shorter than `server_forward_timeout`, is its quiet limit: a slow answer (3 s, nginx
/// passing `/slow` to a delaying origin) is cut at 1.5 s with 504; the same request without
/// it waits for the answer.
#[test]
fn grpc_timeout_bounds_the_wait_for_the_origin() {
    let dir = TempDir::new("h2-origin-grpc-timeout");
    let origin =
        Origin::start(|r| Response::ok(format!("late {}", r.path())).delay(Duration::from_secs(3)));
    let ng = nginx(dir.path(), STREAMS_8, b"", origin.addr());
    let (proxy, http, _) = proxy("h2-origin-grpc-timeout", ng.addr, "");
    let url = format!("http://{http}/slow");
    let started = std::time::Instant::now();
    let cut = curl(&[
        "-H",
        "Host: site.test",
        "-H",
        "grpc-timeout: 500m",
        "-w",
        "%{http_code}",
        &url,
    ]);
    let took = started.elapsed();
    assert!(cut.ends_with("504"), "{cut}\n{}", proxy.proc.logs());
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_millis(2800),
        "{took:?}"
    );
    let waited = curl(&["-H", "Host: site.test", "-w", " %{http_code}", &url]);
    assert_eq!(waited, "late /slow 200", "{}", proxy.proc.logs());
}

/// The misbehaving origin in `mode`.
fn bad_origin(dir: &TempDir, mode: &[&str]) -> (Proc, SocketAddr) {
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.arg(workspace_root().join("tests/py/h2_bad_origin.py"))
        .arg(port.to_string())
        .args(mode);
    let proc = Proc::spawn("h2_bad_origin", cmd, dir.path());
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        wait_for_port(addr, T),
        "h2_bad_origin did not start\n{}",
        proc.logs()
    );
    (proc, addr)
}

fn get(http: SocketAddr, path: &str) -> String {
    let req = e2e::rawclient::get_with(path, "site.test", "Connection: close\r\n");
    let raw = e2e::raw_exchange(http, &req, Duration::from_secs(15)).unwrap_or_default();
    String::from_utf8_lossy(&raw).into_owned()
}

/// An HTTP/1.1 client of an HTTP/2 origin gets the response in HTTP/1.1's form: the
/// origin's interim 103 before the final head; a body without a Content-Length as chunks,
/// its trailers as the chunked trailer section; an empty one ended by HEADERS with a
/// `content-length: 0`.
#[test]
fn an_http1_client_gets_interim_heads_chunks_trailers_and_empty_bodies_in_its_form() {
    let dir = TempDir::new("h2-origin-shapes");
    let (origin, addr) = bad_origin(&dir, &["shapes"]);
    let (proxy, http, _) = proxy_with_stats("h2-origin-shapes", addr, "");
    let logs = || format!("{}\n{}", proxy.proc.logs(), origin.logs());
    let answer = get(http, "/interim").to_ascii_lowercase();
    let (interim, last) = answer
        .split_once("\r\n\r\nhttp/1.1 200")
        .unwrap_or_default();
    assert!(interim.starts_with("http/1.1 103"), "{answer}\n{}", logs());
    assert!(
        interim.contains("\r\nlink: </a.css>; rel=preload"),
        "{answer}"
    );
    let (head, body) = last.split_once("\r\n\r\n").unwrap_or_default();
    assert!(head.contains("\r\ntransfer-encoding: chunked"), "{answer}");
    assert!(!head.contains("content-length"), "{answer}");
    assert_eq!(
        body, "6\r\nhello \r\n5\r\nworld\r\n0\r\nx-checksum: abc\r\n\r\n",
        "{answer}"
    );
    let empty = get(http, "/empty").to_ascii_lowercase();
    let (head, body) = empty.split_once("\r\n\r\n").unwrap_or_default();
    assert!(head.starts_with("http/1.1 200"), "{empty}\n{}", logs());
    assert!(head.contains("\r\nx-empty: 1\r\n"), "{empty}");
    assert!(head.contains("\r\ncontent-length: 0\r\n"), "{empty}");
    assert!(!head.contains("transfer-encoding"), "{empty}");
    assert_eq!(body, "", "{empty}");
}

#[test]
fn streams_refused_by_the_origin_are_retried() {
    let dir = TempDir::new("h2-origin-refused");
    let (origin, addr) = bad_origin(&dir, &["refuse", "2"]);
    let (proxy, http, stats) =
        proxy_with_stats("h2-origin-refused", addr, "server_forward_retries 3;");
    let answer = get(http, "/a");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok"),
        "{answer}\n{}\n{}",
        proxy.proc.logs(),
        origin.logs()
    );
    assert_eq!(
        origin.stdout().matches("refused").count(),
        2,
        "{}",
        origin.logs()
    );
    // The client role's counters: the two refusals, no flood.
    let counter = |name: &str| metric_sum(stats, &format!("ktls_proxy_upstream_h2_{name}_total"));
    assert_eq!(counter("refused_streams"), 2);
    assert_eq!(counter("floods"), 0);
}

#[test]
fn a_ping_flood_from_the_origin_is_cut_and_answered_502() {
    let dir = TempDir::new("h2-origin-flood");
    let (mut origin, addr) = bad_origin(&dir, &["ping_flood"]);
    let (proxy, http, stats) = proxy_with_stats("h2-origin-flood", addr, "");
    let started = std::time::Instant::now();
    let answer = get(http, "/");
    assert!(
        answer.starts_with("HTTP/1.1 502"),
        "{answer}\n{}",
        proxy.proc.logs()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        origin.wait_for_output("goaway code 11", T),
        "no GOAWAY ENHANCE_YOUR_CALM\n{}",
        origin.logs()
    );
    // Counted: the flood cut (`ktls_proxy_upstream_h2_floods_total`).
    let floods = metric_sum(stats, "ktls_proxy_upstream_h2_floods_total");
    assert!(floods >= 1, "{floods}\n{}", proxy.proc.logs());
    assert_eq!(
        metric_sum(stats, "ktls_proxy_upstream_h2_refused_streams_total"),
        0
    );
}

/// An origin that never acknowledges the proxy's SETTINGS (nor answers) loses the connection
/// at the codec's SETTINGS deadline (5 s), GOAWAY SETTINGS_TIMEOUT (4): the request gets
/// 502 then, not at `server_forward_timeout` (60 s).
#[test]
fn an_origin_that_never_acknowledges_settings_is_cut_at_the_deadline() {
    let dir = TempDir::new("h2-origin-silent");
    let (mut origin, addr) = bad_origin(&dir, &["silent"]);
    let (proxy, http, _) = proxy("h2-origin-silent", addr, "");
    let started = std::time::Instant::now();
    let answer = get(http, "/");
    let took = started.elapsed();
    assert!(
        answer.starts_with("HTTP/1.1 502"),
        "{answer}\n{}",
        proxy.proc.logs()
    );
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(12),
        "{took:?}"
    );
    assert!(
        origin.wait_for_output("goaway code 4", T),
        "no GOAWAY SETTINGS_TIMEOUT\n{}",
        origin.logs()
    );
}

/// Sends `requests` on a new connection to `http` and reads up to 1 KiB, which must start
/// a 200; the client reads nothing more until the caller does.
fn send_and_read_a_head(
    http: SocketAddr,
    requests: &[u8],
    proxy: &Proxy,
) -> (std::net::TcpStream, Vec<u8>) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(http).expect("connect");
    conn.set_read_timeout(Some(T)).expect("timeout");
    conn.write_all(requests).expect("send");
    let mut first = vec![0u8; 1024];
    let n = conn.read(&mut first).expect("the head");
    first.truncate(n);
    assert!(first.starts_with(b"HTTP/1.1 200"), "{}", proxy.proc.logs());
    (conn, first)
}

/// Flow control to the origin follows the client: while a client reads nothing, the origin
/// of a 16 MiB answer is held by the windows the proxy does not give back (what it got out
/// stays below half the body: the socket buffers to the client, 3 MB here, and a stream
/// window), and once the client reads, the whole body arrives byte-exact.
#[test]
fn a_client_that_does_not_read_holds_the_origin_back() {
    use std::io::Read;
    const SIZE: usize = 16 << 20;
    let dir = TempDir::new("h2-origin-backpressure");
    let (origin, addr) = bad_origin(&dir, &["big", &SIZE.to_string()]);
    let (proxy, http, _) = proxy("h2-origin-backpressure", addr, "");
    let (mut conn, first) = send_and_read_a_head(
        http,
        b"GET /big HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
        &proxy,
    );
    std::thread::sleep(Duration::from_secs(2));
    let sent: Vec<usize> = origin
        .stdout()
        .lines()
        .filter_map(|l| l.strip_prefix("sent ")?.parse().ok())
        .collect();
    let held = sent.iter().max().copied().unwrap_or(0);
    eprintln!("held at {held} of {SIZE}");
    assert!(
        !origin.stdout().contains("done") && held < SIZE / 2,
        "the origin got {held} of {SIZE} bytes out to a client that reads nothing"
    );
    let mut rest = Vec::with_capacity(SIZE + 1024);
    rest.extend_from_slice(&first);
    conn.read_to_end(&mut rest).expect("the rest");
    let body_at = rest
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |p| p + 4);
    let body = &rest[body_at..];
    assert_eq!(body.len(), SIZE, "{}", proxy.proc.logs());
    assert!(
        body.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
        "body differs"
    );
}

/// 1xx heads have no flow control. An h2 client asks for an answer and then for 16 MiB,
/// and reads nothing; once the big answer fills what the proxy queues for the client, the
/// origin sends 100 000 interim heads (each with a 200-byte field) for the first. The
/// proxy's memory must not follow the flood, and the answer is refused as an interim flood.
/// (The relay takes interim heads as they come even then, so the binary before the queue's
/// own bound, `h2_pieces::INTERIM_KEPT`, passes too: this guards the bound, it did not find
/// a hole.)
#[test]
fn interim_heads_flooded_by_the_origin_do_not_grow_the_proxy() {
    use e2e::h2frames::*;
    use std::io::{Read, Write};
    const FLOOD: usize = 100_000;
    let dir = TempDir::new("h2-origin-interim-flood");
    let (origin, addr) = bad_origin(&dir, &["interim_flood", &FLOOD.to_string()]);
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (proxy, _, h2c) = proxy_with(
        "h2-origin-interim-flood",
        addr,
        "",
        &format!("stats_listen {stats};"),
    );
    let mut conn = std::net::TcpStream::connect(h2c).expect("connect");
    // The largest windows, so that only the client's not reading holds the first answer.
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
    out.extend(frame(
        WINDOW_UPDATE,
        0,
        0,
        &(0x7fff_ffff - 65_535u32).to_be_bytes(),
    ));
    out.extend(frame(
        HEADERS,
        END_STREAM_AND_HEADERS,
        1,
        &get_block("/flood", "site.test"),
    ));
    out.extend(frame(
        HEADERS,
        END_STREAM_AND_HEADERS,
        3,
        &get_block("/big", "site.test"),
    ));
    conn.write_all(&out).expect("send");
    let (before, _) = e2e::rss_kib(proxy.proc.pid());
    let waited = std::time::Instant::now();
    while !origin.stdout().contains("flooded") && waited.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(origin.stdout().contains("flooded"), "{}", origin.logs());
    std::thread::sleep(Duration::from_millis(500));
    let (_, peak) = e2e::rss_kib(proxy.proc.pid());
    let grown_mib = peak.saturating_sub(before) / 1024;
    eprintln!("peak RSS grew by {grown_mib} MiB during the flood");
    assert!(
        grown_mib < 16,
        "{FLOOD} interim heads grew the proxy by {grown_mib} MiB"
    );
    // The client reads: the relay meets the ninth interim head and refuses the answer.
    let metric = "ktls_proxy_upstream_errors_total{kind=\"interim_flood\"}";
    conn.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let mut sink = vec![0u8; 1 << 16];
    while metric_sum(stats, metric) == 0 && waited.elapsed() < Duration::from_secs(90) {
        let _ = conn.read(&mut sink);
    }
    assert_eq!(metric_sum(stats, metric), 1, "{}", proxy.proc.logs());
}

#[test]
fn server_proto_h2_is_accepted_over_tls_and_cleartext_and_with_a_health_monitor() {
    let dir = TempDir::new("h2-origin-check");
    let conf = dir.join("proxy.conf");
    for tls in ["", " server_tls on;"] {
        write_file(
            &conf,
            &format!(
                "listen 127.0.0.1:9;\nsrv_group up {{ server 127.0.0.1:9; server_proto h2;{tls} }}\n\
                 vhost a {{ proxy_pass up; }}\n"
            ),
        );
        let out = proxy_cmd(&conf, &["-t"]);
        assert!(out.status.success(), "{tls}: {}", output_text(&out));
    }
    // The monitor's request goes as an HTTP/2 stream (h2_origin_health.rs).
    write_file(
        &conf,
        "listen 127.0.0.1:9;\nhealth_check h { request \"GET / HTTP/1.1\\r\\nHost: o\\r\\n\\r\\n\"; \
         resp_code 200; timeout 1; }\n\
         srv_group up { server 127.0.0.1:9; server_proto h2; health h; }\nvhost a { proxy_pass up; }\n",
    );
    let out = proxy_cmd(&conf, &["-t"]);
    assert!(out.status.success(), "{}", output_text(&out));
}
