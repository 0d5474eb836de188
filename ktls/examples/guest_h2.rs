//! The kTLS guest's HTTP/2 client (tests/ktls-vm/guest.sh, stage 2): user-space OpenSSL
//! (ALPN h2) and frames written and read with the project's sans-IO `h2` crate's frame and
//! HPACK parts, against the real proxy in front of `guest_origin`, every body byte checked.
//!
//!     guest_h2 ADDR 1.2|1.3 CIPHER [--big N] [--streams N]
//!
//! One connection; concurrent streams for /bytes/10, /bytes/26000, /bytes/BIG and N more
//! small ones alternating 10 B and 26 KB; each must answer 200 with exactly its body. Then
//! the client sends GOAWAY and close_notify. Prints `case h2 VERSION CIPHER NAME PASS|FAIL`
//! lines and ends with `client: cases=N failed=M`; exit status 1 if any failed.

#[path = "guest_common/pattern.rs"]
mod pattern;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use h2::frame::{parse_frame, Frame, FrameHeader, HEADER_LEN};
use h2::{write, ErrorCode, HpackDecoder, HpackEncoder, SettingId};
use openssl::ssl::{Ssl, SslContextBuilder, SslMethod, SslStream, SslVerifyMode, SslVersion};

const IO_TIMEOUT: Duration = Duration::from_secs(20);
const SNI: &str = "localhost";
/// Our receive windows: large enough that the client never needs to send WINDOW_UPDATE.
const WINDOW: u32 = 0x7fff_ffff;

struct Args {
    addr: String,
    version: SslVersion,
    cipher: String,
    big: u64,
    streams: usize,
}

fn parse_args() -> Option<Args> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let version = match args.get(1)?.as_str() {
        "1.2" => SslVersion::TLS1_2,
        "1.3" => SslVersion::TLS1_3,
        _ => return None,
    };
    let mut a = Args {
        addr: args.first()?.clone(),
        version,
        cipher: args.get(2)?.clone(),
        big: 5_000_000,
        streams: 50,
    };
    let mut it = args[3..].iter();
    while let Some(flag) = it.next() {
        let value = it.next()?;
        match flag.as_str() {
            "--big" => a.big = value.parse().ok()?,
            "--streams" => a.streams = value.parse().ok()?,
            _ => return None,
        }
    }
    Some(a)
}

fn connect(a: &Args) -> Result<SslStream<TcpStream>, String> {
    let e = |e: openssl::error::ErrorStack| e.to_string();
    let mut b = SslContextBuilder::new(SslMethod::tls_client()).map_err(e)?;
    b.set_verify(SslVerifyMode::NONE);
    ktls::settings::set_protocol_versions(&mut b, a.version, a.version).map_err(e)?;
    if a.version == SslVersion::TLS1_3 {
        ktls::settings::set_tls13_ciphersuites(&mut b, &a.cipher).map_err(e)?;
    } else {
        b.set_cipher_list(&a.cipher).map_err(e)?;
    }
    b.set_alpn_protos(b"\x02h2").map_err(e)?;
    let tcp = TcpStream::connect(&a.addr).map_err(|e| format!("connect {}: {e}", a.addr))?;
    tcp.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut ssl = Ssl::new(&b.build()).map_err(e)?;
    ssl.set_hostname(SNI).map_err(e)?;
    let stream = ssl.connect(tcp).map_err(|e| format!("handshake: {e}"))?;
    match stream.ssl().selected_alpn_protocol() {
        Some(b"h2") => Ok(stream),
        other => Err(format!("ALPN chose {other:?}, not h2")),
    }
}

/// One response being received.
#[derive(Default)]
struct Response {
    want: u64,
    status: Option<String>,
    body: Vec<u8>,
    done: bool,
}

/// Sends the preface, our SETTINGS and the requests: stream `2k+1` asks for `sizes[k]`.
fn send_requests(tls: &mut SslStream<TcpStream>, sizes: &[u64]) -> Result<(), String> {
    let mut out = Vec::new();
    write::client_preface(&mut out);
    write::settings(
        &mut out,
        &[
            (SettingId::InitialWindowSize, WINDOW),
            (SettingId::EnablePush, 0),
        ],
    );
    write::window_update(&mut out, 0, WINDOW - 65_535);
    let mut enc = HpackEncoder::default();
    for (k, size) in sizes.iter().enumerate() {
        let path = format!("/bytes/{size}");
        let fields: [(&[u8], &[u8]); 4] = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", SNI.as_bytes()),
            (b":path", path.as_bytes()),
        ];
        let mut block = Vec::new();
        enc.encode(fields, &mut block);
        write::headers(&mut out, 2 * k as u32 + 1, &block, true, 16_384);
    }
    tls.write_all(&out)
        .map_err(|e| format!("write requests: {e}"))
}

/// Reads frames until every stream has ended (or something fails).
fn receive(
    tls: &mut SslStream<TcpStream>,
    responses: &mut HashMap<u32, Response>,
) -> Result<(), String> {
    let mut dec = HpackDecoder::new(4096);
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + Duration::from_secs(120);
    while responses.values().any(|r| !r.done) {
        if Instant::now() > deadline {
            return Err("responses not complete within 120 s".into());
        }
        let n = tls.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("the proxy closed the connection early".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut at = 0;
        while let Some(h) = FrameHeader::parse(&buf[at..]) {
            let end = at + HEADER_LEN + h.length as usize;
            if end > buf.len() {
                break;
            }
            let payload = &buf[at + HEADER_LEN..end];
            let frame = parse_frame(&h, payload).map_err(|e| format!("bad frame: {e:?}"))?;
            let mut reply = Vec::new();
            on_frame(frame, &mut dec, responses, &mut reply)?;
            if !reply.is_empty() {
                tls.write_all(&reply).map_err(|e| format!("write: {e}"))?;
            }
            at = end;
        }
        buf.drain(..at);
    }
    Ok(())
}

fn on_frame(
    frame: Frame<'_>,
    dec: &mut HpackDecoder,
    responses: &mut HashMap<u32, Response>,
    reply: &mut Vec<u8>,
) -> Result<(), String> {
    match frame {
        Frame::Settings { ack: false, .. } => write::settings_ack(reply),
        Frame::Ping {
            ack: false,
            payload,
        } => write::ping(reply, true, payload),
        Frame::Headers {
            stream,
            block,
            end_stream,
            end_headers,
            ..
        } => {
            if !end_headers {
                return Err(format!(
                    "stream {stream}: header block split (not expected)"
                ));
            }
            let fields = dec
                .decode(block, 1 << 20, 1000)
                .map_err(|e| format!("HPACK: {e:?}"))?;
            let r = responses
                .get_mut(&stream)
                .ok_or(format!("HEADERS on unknown stream {stream}"))?;
            if let Some(f) = fields.iter().find(|f| f.name == b":status") {
                r.status = Some(String::from_utf8_lossy(&f.value).into_owned());
            }
            r.done |= end_stream;
        }
        Frame::Data {
            stream,
            data,
            end_stream,
            ..
        } => {
            let r = responses
                .get_mut(&stream)
                .ok_or(format!("DATA on unknown stream {stream}"))?;
            r.body.extend_from_slice(data);
            r.done |= end_stream;
        }
        Frame::RstStream { stream, code } => {
            return Err(format!("stream {stream} reset: {code:?}"))
        }
        Frame::GoAway { code, .. } => return Err(format!("GOAWAY {code:?} before the end")),
        _ => {}
    }
    Ok(())
}

fn check(r: &Response) -> Result<String, String> {
    if r.status.as_deref() != Some("200") {
        return Err(format!("status {:?}", r.status));
    }
    if r.body.len() as u64 != r.want {
        return Err(format!("{} bytes, expected {}", r.body.len(), r.want));
    }
    if let Some(at) = pattern::first_mismatch(&r.body, 0) {
        return Err(format!("byte {at} differs from the origin's"));
    }
    Ok(format!("{} bytes exact", r.want))
}

fn main() -> ExitCode {
    let Some(a) = parse_args() else {
        eprintln!("usage: guest_h2 ADDR 1.2|1.3 CIPHER [--big N] [--streams N]");
        return ExitCode::from(2);
    };
    let v = if a.version == SslVersion::TLS1_3 {
        "TLSv1.3"
    } else {
        "TLSv1.2"
    };
    let label = format!("h2 {v} {}", a.cipher);
    let mut sizes = vec![10, 26_000, a.big];
    sizes.extend((0..a.streams).map(|i| if i % 2 == 0 { 10 } else { 26_000 }));
    let mut failed = 0;
    let mut cases = 0;
    let mut case = |name: &str, result: Result<String, String>| {
        cases += 1;
        match result {
            Ok(note) => println!("case {label} {name} PASS {note}"),
            Err(why) => {
                failed += 1;
                println!("case {label} {name} FAIL :: {why}");
            }
        }
    };
    let mut tls = match connect(&a) {
        Ok(t) => t,
        Err(e) => {
            case("connect", Err(e));
            println!("client: cases={cases} failed={failed}");
            return ExitCode::FAILURE;
        }
    };
    let mut responses: HashMap<u32, Response> = sizes
        .iter()
        .enumerate()
        .map(|(k, &want)| {
            (
                2 * k as u32 + 1,
                Response {
                    want,
                    ..Response::default()
                },
            )
        })
        .collect();
    let exchange = send_requests(&mut tls, &sizes).and_then(|()| receive(&mut tls, &mut responses));
    case(
        "streams",
        exchange.map(|()| format!("{} concurrent streams ended", sizes.len())),
    );
    for (name, stream) in [("10B", 1), ("26KB", 3), ("big", 5)] {
        case(name, check(&responses[&stream]));
    }
    let rest: Result<Vec<String>, String> = (3..sizes.len())
        .map(|k| check(&responses[&(2 * k as u32 + 1)]))
        .collect();
    case("more streams", rest.map(|r| format!("{} exact", r.len())));
    let mut bye = Vec::new();
    write::goaway(&mut bye, 0, ErrorCode::NO_ERROR, b"");
    let closed = tls
        .write_all(&bye)
        .map_err(|e| e.to_string())
        .and_then(|()| tls.shutdown().map(|_| ()).map_err(|e| e.to_string()));
    case(
        "goaway",
        closed.map(|()| "GOAWAY and close_notify sent".to_string()),
    );
    println!("client: cases={cases} failed={failed}");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
