//! HTTP/2 message parts beyond a head and a body, through the real proxy in front of an
//! origin that writes its responses byte by byte (tests/src/evil_origin.rs): response
//! trailers (relayed as the final HEADERS, forbidden fields dropped, after the last DATA
//! even when the window holds the body back; not stored by the cache), request trailers
//! (forwarded as a chunked trailer, dropped with a Content-Length, frang's split rule),
//! interim responses (`Expect: 100-continue` answered when the request goes upstream, 103
//! relayed, 101 never sent, too many interim responses reset the stream), and `cookie`
//! crumbs joined into one upstream field. Frame-level cases with the Python `h2` package
//! (tests/py/h2_message_cases.py); nghttp and curl as real clients.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use e2e::evil_origin::{EvilConn, EvilOrigin, Seen};
use e2e::origin::pattern;
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, python_h2_cases, wait_for_port};

const T: Duration = Duration::from_secs(10);

/// The trailer section every trailer response ends with: two end-to-end fields and fields
/// an HTTP/2 client must not get (framing, connection-specific, response control, cookies).
const TRAILER: &str = "X-Checksum: abc123\r\nGrpc-Status: 0\r\nContent-Type: text/evil\r\n\
    Set-Cookie: s=1\r\nConnection: close\r\nContent-Length: 99\r\nKeep-Alive: 5\r\n";

/// Writes a chunked 200 of `body` (in chunks of at most 16 KiB) ending with [`TRAILER`].
fn chunked_with_trailer(conn: &mut EvilConn, body: &[u8], extra_head: &str) -> bool {
    let head = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n{extra_head}\r\n"
    );
    let mut out = head.into_bytes();
    for chunk in body.chunks(16384) {
        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("0\r\n{TRAILER}\r\n").as_bytes());
    conn.write(&out)
}

/// What the origin got: the request's fields, one line each, as it read them.
fn fields_seen(seen: &Seen) -> String {
    seen.headers
        .iter()
        .map(|(n, v)| format!("{n}: {v}\n"))
        .collect()
}

/// The origin's answers by target; anything else is echoed (`origin:TARGET`).
fn answer(conn: &mut EvilConn, seen: &Seen) -> bool {
    let target = seen.target.as_str();
    match target {
        "/trailers" => chunked_with_trailer(conn, b"hello world", ""),
        "/trailers-big" => chunked_with_trailer(conn, &pattern(300_000), ""),
        "/cached-trailers" => {
            chunked_with_trailer(conn, b"stored body", "Cache-Control: max-age=600\r\n")
        }
        "/headers" => {
            conn.read_body(seen, T);
            conn.respond(200, fields_seen(seen).as_bytes())
        }
        "/upload" => {
            // The body and the trailer lines the origin read: `DATA|TRAILER,TRAILER`.
            let (data, trailer) = match seen.content_length() {
                None => conn
                    .read_chunked_body(T)
                    .map(|b| (b.data, b.trailer_lines.join(","))),
                Some(_) => conn.read_body(seen, T).map(|d| (d, String::new())),
            }
            .unwrap_or_default();
            let text = format!("{}|{trailer}", String::from_utf8_lossy(&data));
            conn.respond(200, text.as_bytes())
        }
        "/continue" => {
            // Asked for it: the origin's own 100, which the proxy, having answered the
            // client already, must not relay a second time.
            conn.write(b"HTTP/1.1 100 Continue\r\n\r\n");
            let body = conn.read_body(seen, T).unwrap_or_default();
            conn.respond(200, &body)
        }
        "/early" => conn.write(
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\
              Connection: x-hop\r\nX-Hop: 1\r\n\r\n\
              HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ),
        "/switch" => conn.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: upgrade\r\n\r\n",
        ),
        "/many-interim" => {
            let hints = "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n".repeat(20);
            conn.write(hints.as_bytes());
            conn.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            // The proxy gave up on this connection: nothing more comes on it.
            conn.close();
            true
        }
        _ => return false,
    };
    true
}

struct Site {
    proxy: Proxy,
    origin: EvilOrigin,
    http: SocketAddr,
    h2c: SocketAddr,
}

fn start(tag: &str) -> Site {
    let origin = EvilOrigin::start(|conn| conn.serve(answer));
    let setup = Setup::new(tag);
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = format!(
        "listen {http};\nlisten {h2c} proto=h2c;\n\
         srv_group default {{ server {origin}; }}\n\
         server_forward_timeout 5;\n\
         cache 1;\ncache_fulfill eq /cached-trailers;\n\
         block_action attack reply;\n\
         frang_limits {{ http_methods get head post; }}\n\
         vhost site {{ proxy_pass default; }}\n\
         http_chain {{ uri == \"/old\" -> 301 = https://$host/new; -> site; }}\n",
        http = setup.http,
        origin = origin.addr(),
    );
    let http = setup.http;
    let proxy = setup.start(&conf);
    assert!(wait_for_port(h2c, T), "{h2c} listens");
    Site {
        proxy,
        origin,
        http,
        h2c,
    }
}

#[test]
fn frame_level_message_cases_with_python_h2() {
    let site = start("h2-messages");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h2_message_cases.py");
    let cases = [
        "trailers",
        "trailers_after_the_window",
        "cached_trailers",
        "request_trailers_chunked",
        "request_trailers_with_length",
        "request_trailer_split_blocked",
        "continue_before_the_body",
        "continue_from_the_proxy",
        "no_continue_for_a_redirect",
        "early_hints",
        "switch_is_refused",
        "too_many_interim",
        "cookie_crumbs",
    ];
    python_h2_cases(script, site.h2c.port(), &cases, 120, || {
        format!(
            "origin saw {:?}\n{}",
            site.origin.seen_lines(),
            site.proxy.proc.logs()
        )
    });
    let fetched = |target: &str| {
        site.origin
            .seen()
            .iter()
            .filter(|s| s.target == target)
            .count()
    };
    assert_eq!(
        fetched("/cached-trailers"),
        1,
        "the second request was a hit"
    );
    assert_eq!(fetched("/old"), 0, "a redirect never reaches the origin");
}

/// curl waits for the 100 before it sends the body (at most --expect100-timeout); the origin
/// of /upload sends none: it is the proxy's.
fn curl_waits_for_the_proxys_100_continue(site: &Site) {
    let body = site.proxy.dir.join("upload");
    std::fs::write(&body, "u".repeat(200_000)).expect("write the upload");
    let url = format!("http://site.test:{}/upload", site.h2c.port());
    let resolve = format!("site.test:{}:127.0.0.1", site.h2c.port());
    let out = Command::new("timeout")
        .args([
            "20",
            "curl",
            "-sv",
            "--http2-prior-knowledge",
            "--resolve",
            &resolve,
        ])
        .args(["-H", "Expect: 100-continue", "--expect100-timeout", "10"])
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg(&url)
        .output()
        .expect("curl");
    let verbose = String::from_utf8_lossy(&out.stderr);
    let statuses: Vec<&str> = verbose
        .lines()
        .filter(|l| l.starts_with("< HTTP/2"))
        .map(str::trim)
        .collect();
    assert_eq!(statuses, ["< HTTP/2 100", "< HTTP/2 200"], "{verbose}");
    assert!(
        out.stdout == format!("{}|", "u".repeat(200_000)).into_bytes(),
        "the origin read the upload"
    );
}

/// nghttp prints every frame it receives: the trailers are a HEADERS frame with END_STREAM
/// (flags 0x05) after the DATA, without the forbidden fields; a 103 arrives before the 200;
/// two `cookie` crumbs reach the origin as one field; curl's upload with `Expect:
/// 100-continue` gets `HTTP/2 100`, then the 200. An HTTP/1.1 client gets the chunked body
/// with its trailer section as the origin sent it.
#[test]
fn real_clients_get_trailers_early_hints_and_joined_cookies() {
    let site = start("h2-messages-clients");
    let nghttp = |path: &str, extra: &[&str]| {
        let url = format!("http://127.0.0.1:{}{path}", site.h2c.port());
        let out = Command::new("timeout")
            .args(["20", "nghttp", "-H", ":authority: site.test"])
            .args(extra)
            .arg(&url)
            .output()
            .expect("nghttp (nghttp2-client) is installed by tests/run.sh");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // `-v` prints a frame's fields as they are decoded, then the frame's line.
    let text = nghttp("/trailers", &["-v"]);
    let after_data = text
        .find("recv DATA frame")
        .map(|at| &text[at..])
        .unwrap_or_else(|| panic!("no DATA:\n{text}"));
    assert!(
        after_data.contains("recv (stream_id=13) x-checksum: abc123")
            && after_data.contains("recv (stream_id=13) grpc-status: 0"),
        "trailers after the DATA:\n{text}"
    );
    assert!(
        after_data.contains("recv HEADERS frame <length=")
            && after_data.contains("flags=0x05, stream_id=13>"),
        "the trailers' HEADERS ends the stream (END_STREAM | END_HEADERS):\n{text}"
    );
    for refused in [
        "text/evil",
        "set-cookie",
        "content-length: 99",
        "keep-alive",
    ] {
        assert!(!after_data.contains(refused), "{refused} relayed:\n{text}");
    }

    let text = nghttp("/early", &["-v"]);
    let hints = text
        .find(":status: 103")
        .unwrap_or_else(|| panic!("{text}"));
    let ok = text
        .find(":status: 200")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(hints < ok, "103 before the final response:\n{text}");
    assert!(text.contains("link: </style.css>; rel=preload"), "{text}");
    assert!(
        !text.contains("x-hop"),
        "a field Connection names is dropped:\n{text}"
    );

    // nghttp sends each `-H cookie` as its own field; the origin echoes what it read.
    let text = nghttp("/headers", &["-H", "cookie: a=1", "-H", "cookie: b=2"]);
    let cookies: Vec<&str> = text.lines().filter(|l| l.starts_with("cookie:")).collect();
    assert_eq!(cookies, ["cookie: a=1; b=2"], "{text}");

    curl_waits_for_the_proxys_100_continue(&site);

    // HTTP/1.1: the trailer section passes as the origin framed it (the proxy relays a
    // chunked body byte for byte to an HTTP/1.1 client).
    let raw = e2e::raw_exchange(
        site.http,
        b"GET /trailers HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
        T,
    )
    .expect("HTTP/1.1 exchange");
    let raw = String::from_utf8_lossy(&raw);
    assert!(
        raw.contains(&format!("0\r\n{TRAILER}\r\n")),
        "HTTP/1.1 trailer section:\n{raw}"
    );
}
