//! The client role of the `h2` crate (`h2::ClientConnection`, issue 34) against real
//! origins, through the example binary `h2/examples/h2c_client.rs` (one connection, a blocking
//! loop over the sans-IO core): nginx 1.22 as a cleartext prior-knowledge HTTP/2 origin
//! (`listen ... http2;`), and the crate's own `h2c_server` example. Build the examples first:
//! `cargo build --release -p h2 --examples`.
//!
//! What is shown: responses and bodies arrive intact (FNV-1a of each body compared), a POST
//! body goes up under the origin's flow control, more requests than nginx's
//! `http2_max_concurrent_streams` wait for a stream instead of being refused, and a 2 MiB
//! response flows only as the client gives its windows back (WINDOW_UPDATE frames counted),
//! and while the client reports nothing consumed nginx sends no more than the stream window.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::{free_port, wait_for_port, workspace_root, write_file, Proc, TempDir};

const T: Duration = Duration::from_secs(5);

fn example(name: &str) -> PathBuf {
    let dirs: Vec<PathBuf> = match std::env::var_os("KTLS_PROXY_BIN_DIR") {
        Some(d) => vec![PathBuf::from(d).join("examples")],
        None => ["release", "debug"]
            .iter()
            .map(|p| workspace_root().join("target").join(p).join("examples"))
            .collect(),
    };
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not in {dirs:?}: run `cargo build --release -p h2 --examples`")
        })
}

fn fnv(data: &[u8]) -> String {
    let h = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{h:016x}")
}

/// The body `--post PATH SIZE` sends.
fn post_body(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

/// nginx serving h2c on a loopback port: `/small` answered by nginx itself, `/big` a file of
/// `big` bytes, `/echo` and `/slow` passed to `origin`.
struct Nginx {
    _proc: Proc,
    addr: SocketAddr,
}

fn nginx(dir: &Path, max_streams: u32, big: &[u8], origin: SocketAddr) -> Nginx {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let d = dir.join(format!("nginx-{}", addr.port()));
    std::fs::create_dir_all(d.join("www")).expect("nginx dir");
    std::fs::write(d.join("www/big"), big).expect("big file");
    let conf = d.join("nginx.conf");
    write_file(
        &conf,
        &format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log info;\nevents {{ worker_connections 256; }}\n\
             http {{\n access_log off;\n client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
             server {{\n  listen {addr} http2;\n  http2_max_concurrent_streams {max_streams};\n\
             location = /small {{ return 200 \"small $request_uri\\n\"; }}\n\
             location = /big {{ root {d}/www; }}\n\
             location / {{ proxy_pass http://{origin}; proxy_http_version 1.1; }}\n }}\n}}\n",
            d = d.display(),
        ),
    );
    let mut cmd = Command::new("/usr/sbin/nginx");
    cmd.arg("-c").arg(&conf).arg("-p").arg(&d);
    let proc = Proc::spawn("nginx", cmd, &d);
    assert!(
        wait_for_port(addr, T),
        "nginx did not start\n{}",
        proc.logs()
    );
    Nginx { _proc: proc, addr }
}

/// An origin that echoes POST bodies and answers `/slow` after 300 ms.
fn echo_origin() -> Origin {
    Origin::start(|req| {
        if req.method == "POST" {
            Response::ok(req.body.clone())
        } else if req.path() == "/slow" {
            Response::ok("slow\n").delay(Duration::from_millis(300))
        } else {
            Response::ok("origin\n")
        }
    })
}

/// Runs the example client (bounded by `wait_exit`; the Proc's drop kills it), returns its
/// stdout; it must succeed.
fn client(addr: SocketAddr, args: &[&str], dir: &Path) -> String {
    let mut cmd = Command::new(example("h2c_client"));
    cmd.arg(addr.to_string()).args(args);
    let mut proc = Proc::spawn("h2c_client", cmd, dir);
    let status = proc
        .wait_exit(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("h2c_client {} hangs", proc.pid()));
    assert!(
        status.success(),
        "h2c_client {args:?}: {status:?}\n{}",
        proc.logs()
    );
    proc.stdout()
}

/// `summary` line fields by name.
fn summary(out: &str, key: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("summary "))
        .expect("summary line");
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == key).expect("summary key");
    words[at + 1].parse().expect("a number")
}

fn responses(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with("response ")).collect()
}

#[test]
fn nginx_h2c_gets_and_a_post_with_a_body() {
    let dir = TempDir::new("h2client-basic");
    let origin = echo_origin();
    let n = nginx(dir.path(), 128, b"", origin.addr());
    let out = client(
        n.addr,
        &["--gets", "3", "/small", "--print-bodies"],
        dir.path(),
    );
    let lines = responses(&out);
    assert_eq!(lines.len(), 3, "{out}");
    for l in &lines {
        assert!(
            l.contains("status 200") && l.ends_with("body small /small"),
            "{l}"
        );
    }
    let body = post_body(300_000);
    let out = client(
        n.addr,
        &["--get", "/small", "--post", "/echo", "300000"],
        dir.path(),
    );
    let post = responses(&out)[1];
    let want = format!("POST /echo status 200 bytes 300000 fnv {}", fnv(&body));
    assert!(post.contains(&want), "{out}");
    let seen = origin.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].body, body,
        "nginx passed on the body the client sent"
    );
    assert_eq!(summary(&out, "failed"), 0);
}

#[test]
fn more_requests_than_nginx_max_concurrent_streams_wait_for_a_stream() {
    let dir = TempDir::new("h2client-streams");
    let origin = echo_origin();
    let n = nginx(dir.path(), 4, b"", origin.addr());
    let started = Instant::now();
    let out = client(n.addr, &["--gets", "12", "/slow"], dir.path());
    let took = started.elapsed();
    assert_eq!(summary(&out, "responses"), 12, "{out}");
    assert_eq!(summary(&out, "peer_max_streams"), 4, "{out}");
    assert_eq!(
        summary(&out, "max_open"),
        4,
        "never more open than nginx allows: {out}"
    );
    assert_eq!(summary(&out, "retried"), 0, "nothing refused: {out}");
    assert_eq!(origin.requests().len(), 12);
    // Three waves of four 300 ms exchanges.
    assert!(took >= Duration::from_millis(900), "{took:?}");
}

#[test]
fn large_response_flows_with_window_updates() {
    let dir = TempDir::new("h2client-big");
    let origin = echo_origin();
    let big: Vec<u8> = (0..2u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let n = nginx(dir.path(), 128, &big, origin.addr());
    let out = client(n.addr, &["--get", "/big"], dir.path());
    let want = format!("GET /big status 200 bytes {} fnv {}", big.len(), fnv(&big));
    assert!(responses(&out)[0].contains(&want), "{out}");
    // 2 MiB through a 64 KiB stream window and a 1 MiB connection window: the stream's
    // window is given back every 32 KiB consumed, the connection's every 512 KiB.
    let updates = summary(&out, "window_updates");
    assert!(updates >= 60, "{updates} WINDOW_UPDATEs for 2 MiB: {out}");
}

#[test]
fn a_reader_that_consumes_nothing_stops_nginx_at_the_stream_window() {
    let dir = TempDir::new("h2client-hold");
    let origin = echo_origin();
    let big: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let n = nginx(dir.path(), 128, &big, origin.addr());
    // For 700 ms nothing received is reported consumed: nginx may send what our 64 KiB
    // stream window allows and no more; then the rest flows.
    let out = client(n.addr, &["--get", "/big", "--hold-ms", "700"], dir.path());
    let held = summary(&out, "held_peak");
    assert!(
        (32_768..=65_536).contains(&held),
        "held {held} bytes: {out}"
    );
    let want = format!("bytes {} fnv {}", big.len(), fnv(&big));
    assert!(responses(&out)[0].contains(&want), "{out}");
}

#[test]
fn the_crates_own_h2c_server_answers_the_client() {
    let dir = TempDir::new("h2client-own");
    let port = free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut cmd = Command::new(example("h2c_server"));
    cmd.arg(addr.to_string());
    let _server = Proc::spawn("h2c_server", cmd, dir.path());
    assert!(wait_for_port(addr, T), "h2c_server did not start");
    let out = client(
        addr,
        &["--gets", "20", "/", "--post", "/", "1000000"],
        dir.path(),
    );
    assert_eq!(summary(&out, "responses"), 21, "{out}");
    let want = format!("bytes 1000000 fnv {}", fnv(&post_body(1_000_000)));
    assert!(responses(&out)[20].contains(&want), "{out}");
}

/// A gRPC server (Python `grpcio`, raw bytes, no protobuf): `pkg.Echo/Call` answers
/// `echo:` + the message with `x-trailer: t1` in its trailing metadata, and the message
/// `fail` with NOT_FOUND; `pkg.Chat/Talk`, a bidirectional stream, answers each message as
/// it comes.
const GRPC_SERVER: &str = r#"
import sys, grpc
from concurrent import futures
def call(req, ctx):
    if req == b"fail":
        ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
    ctx.set_trailing_metadata((("x-trailer", "t1"),))
    return b"echo:" + req
def talk(it, ctx):
    for m in it:
        yield b"echo:" + m
    ctx.set_trailing_metadata((("x-turns", "done"),))
h = grpc.method_handlers_generic_handler(
    "pkg.Echo", {"Call": grpc.unary_unary_rpc_method_handler(call)})
chat = grpc.method_handlers_generic_handler(
    "pkg.Chat", {"Talk": grpc.stream_stream_rpc_method_handler(talk)})
s = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
s.add_generic_rpc_handlers((h, chat))
port = s.add_insecure_port("127.0.0.1:0")
s.start()
print("listening on 127.0.0.1:%d" % port, flush=True)
s.wait_for_termination(timeout=60)
"#;

/// gRPC's length-prefixed message (uncompressed).
fn grpc_message(msg: &[u8]) -> Vec<u8> {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(msg);
    framed
}

fn grpc_message_hex(msg: &[u8]) -> String {
    grpc_message(msg)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn grpcio_unary_calls_and_a_bidirectional_stream() {
    let has_grpc = Command::new("python3")
        .args(["-c", "import grpc"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_grpc {
        assert!(
            std::env::var_os("KTLS_PROXY_REQUIRE_GRPC").is_none(),
            "python3 grpcio missing"
        );
        eprintln!("skipped: python3 has no grpcio (pip install grpcio)");
        return;
    }
    let dir = TempDir::new("h2client-grpc");
    // Python is the Proc itself, not behind `timeout`: the Proc's SIGKILL on drop (a failed
    // or killed test) reaches the server; the script stops itself after 60 s.
    let mut cmd = Command::new("python3");
    cmd.args(["-c", GRPC_SERVER]);
    let server = Proc::spawn("grpc_server", cmd, dir.path());
    let deadline = Instant::now() + Duration::from_secs(10);
    let addr: SocketAddr = loop {
        let out = server.stdout();
        if let Some(a) = out.lines().find_map(|l| l.strip_prefix("listening on ")) {
            break a.parse().expect("grpc server address");
        }
        assert!(Instant::now() < deadline, "grpc server: {}", server.logs());
        std::thread::sleep(Duration::from_millis(50));
    };
    let (hello, fail) = (grpc_message_hex(b"hello"), grpc_message_hex(b"fail"));
    let args = [
        "--header",
        "content-type:application/grpc",
        "--header",
        "te:trailers",
        "--post-hex",
        "/pkg.Echo/Call",
        &hello,
        "--post-hex",
        "/pkg.Echo/Call",
        &fail,
    ];
    let out = client(addr, &args, dir.path());
    let want = format!(
        "bytes 15 fnv {}",
        fnv(&[&[0, 0, 0, 0, 10][..], b"echo:hello"].concat())
    );
    assert!(responses(&out)[0].contains(&want), "{out}");
    assert!(out.contains("trailer 0 grpc-status: 0\n"), "{out}");
    assert!(out.contains("trailer 0 x-trailer: t1\n"), "{out}");
    // NOT_FOUND is 5, in the trailers or in a trailers-only head.
    assert!(
        out.contains("trailer 1 grpc-status: 5\n") || out.contains("header 1 grpc-status: 5\n"),
        "{out}"
    );
    // Bidirectional streaming: each of 5 messages goes only once the answer to the previous
    // one came back on the same stream (neither side waits for the other's end).
    let ping = ["--grpc-pingpong", "/pkg.Chat/Talk", "5"];
    let out = client(addr, &[&args[..4], &ping[..]].concat(), dir.path());
    let answers: Vec<u8> = (0..5)
        .flat_map(|k| grpc_message(format!("echo:msg{k}").as_bytes()))
        .collect();
    let want = format!("bytes 70 fnv {}", fnv(&answers));
    assert!(responses(&out)[0].contains(&want), "{out}");
    assert!(out.contains("trailer 0 grpc-status: 0\n"), "{out}");
    assert!(out.contains("trailer 0 x-turns: done\n"), "{out}");
}
