//! A minimal RFC 6455 peer pair for the WebSocket tests: a client (the opening handshake,
//! masked frames) over plain TCP or TLS, and an origin that answers HTTP requests and
//! WebSocket handshakes in one of several behaviours (echo, close first, flood, silence, a
//! `101` without the WebSocket fields). Only what the tests need: no fragmentation, no
//! extensions.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openssl::ssl::{SslConnector, SslMethod, SslStream, SslVerifyMode};

pub const OP_TEXT: u8 = 1;
pub const OP_BINARY: u8 = 2;
pub const OP_CLOSE: u8 = 8;

/// The GUID of RFC 6455 §1.3.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A sample nonce (RFC 6455 §1.3's).
pub const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// `Sec-WebSocket-Accept` for `key`.
pub fn accept_for(key: &str) -> String {
    let digest = openssl::sha::sha1(format!("{key}{GUID}").as_bytes());
    openssl::base64::encode_block(&digest)
}

/// One frame, FIN set; masked with `mask` when given (a client's frames must be).
pub fn frame(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(0x80 | opcode);
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n <= 0xffff => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(key) => {
            out.extend_from_slice(&key);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// Reads one frame: (opcode, unmasked payload). Err on EOF or a timeout.
pub fn read_frame(r: &mut (impl Read + ?Sized)) -> io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    r.read_exact(&mut head)?;
    let masked = head[1] & 0x80 != 0;
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)?;
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)?;
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut key = [0u8; 4];
    if masked {
        r.read_exact(&mut key)?;
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    if masked {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= key[i % 4];
        }
    }
    Ok((head[0] & 0x0f, payload))
}

/// Reads an HTTP head (through the blank line) byte by byte, so nothing after it is taken.
pub fn read_head(r: &mut (impl Read + ?Sized)) -> io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if r.read(&mut byte)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
        if head.len() > 64 * 1024 {
            return Err(io::ErrorKind::InvalidData.into());
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// The value of field `name` in a head (case-insensitive name).
pub fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The opening handshake for `path` on `host`.
pub fn handshake_request(path: &str, host: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

/// A client's byte stream: plain TCP or TLS.
pub trait Stream: Read + Write + Send {
    fn tcp(&self) -> &TcpStream;
}

impl Stream for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Stream for SslStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref()
    }
}

/// Connects to `addr`, over TLS when `tls` (no certificate check: the tests make their own).
pub fn connect(addr: SocketAddr, tls: bool) -> Box<dyn Stream> {
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    if !tls {
        return Box::new(tcp);
    }
    let mut builder = SslConnector::builder(SslMethod::tls_client()).unwrap();
    builder.set_verify(SslVerifyMode::NONE);
    let stream = builder
        .build()
        .connect("site.test", tcp)
        .expect("TLS handshake");
    Box::new(stream)
}

/// Sends the handshake and reads the answer's head.
pub fn open(stream: &mut dyn Stream, path: &str) -> String {
    stream
        .write_all(handshake_request(path, "site.test").as_bytes())
        .expect("send handshake");
    read_head(stream).expect("handshake answer")
}

/// What the origin does after accepting a WebSocket handshake, chosen by the path:
/// `/bye`, `/flood`, `/silent`, `/bare`, anything else echoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Echoes every frame; answers Close with Close, then closes.
    Echo,
    /// Sends a text frame `bye` and a Close frame, then closes the connection.
    CloseFirst,
    /// Writes binary frames as fast as the connection takes them (256 MiB, then closes).
    Flood,
    /// Reads nothing and sends nothing (for 30 s).
    Silent,
    /// Answers `101` without Upgrade or Sec-WebSocket-Accept.
    BareSwitch,
}

impl Behaviour {
    fn of(path: &str) -> Behaviour {
        match path {
            "/bye" => Behaviour::CloseFirst,
            "/flood" => Behaviour::Flood,
            "/silent" => Behaviour::Silent,
            "/bare" => Behaviour::BareSwitch,
            _ => Behaviour::Echo,
        }
    }
}

/// What the origin saw and did, shared with the test.
#[derive(Default)]
pub struct Record {
    /// Every request head received.
    pub heads: Mutex<Vec<String>>,
    /// Bytes the origin wrote after the handshake (`Flood`).
    pub written: AtomicU64,
    /// A tunnel's connection ended on the origin's side (EOF or error).
    pub tunnel_eof: AtomicBool,
}

/// An origin on loopback: HTTP requests get `200` with the origin's name as the body (after
/// a pause for paths starting `/slow`: `/slowN` waits N seconds); WebSocket handshakes get
/// the [`Behaviour`] their path names.
pub struct WsOrigin {
    addr: SocketAddr,
    pub record: Arc<Record>,
}

impl WsOrigin {
    pub fn start(name: &'static str) -> WsOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind origin");
        let addr = listener.local_addr().unwrap();
        let record = Arc::new(Record::default());
        let shared = record.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let record = shared.clone();
                std::thread::spawn(move || serve(conn, name, &record));
            }
        });
        WsOrigin { addr, record }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn heads(&self) -> Vec<String> {
        self.record.heads.lock().unwrap().clone()
    }
}

fn serve(mut conn: TcpStream, name: &str, record: &Record) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    loop {
        let Ok(head) = read_head(&mut conn) else {
            return;
        };
        record.heads.lock().unwrap().push(head.clone());
        let path = head.split(' ').nth(1).unwrap_or("/");
        if field(&head, "upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket")) {
            return tunnel(conn, &head, Behaviour::of(path), record);
        }
        if let Some(secs) = path.strip_prefix("/slow") {
            std::thread::sleep(Duration::from_secs(secs.parse().unwrap_or(2)));
        }
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{name}",
            name.len()
        );
        if conn.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn tunnel(mut conn: TcpStream, head: &str, behaviour: Behaviour, record: &Record) {
    let key = field(head, "sec-websocket-key").unwrap_or("");
    let answer = if behaviour == Behaviour::BareSwitch {
        "HTTP/1.1 101 Switching Protocols\r\n\r\n".to_string()
    } else {
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {}\r\n\r\n",
            accept_for(key)
        )
    };
    if conn.write_all(answer.as_bytes()).is_err() {
        return;
    }
    match behaviour {
        Behaviour::Echo => echo(&mut conn),
        Behaviour::CloseFirst => {
            let _ = conn.write_all(&frame(OP_TEXT, b"bye", None));
            let _ = conn.write_all(&frame(OP_CLOSE, &1000u16.to_be_bytes(), None));
            return;
        }
        Behaviour::Flood => flood(&mut conn, record),
        // Holds the connection without reading: what the client sends piles up.
        Behaviour::Silent | Behaviour::BareSwitch => std::thread::sleep(Duration::from_secs(30)),
    }
    record.tunnel_eof.store(true, Ordering::SeqCst);
}

fn echo(conn: &mut TcpStream) {
    loop {
        let Ok((opcode, payload)) = read_frame(conn) else {
            return;
        };
        if conn.write_all(&frame(opcode, &payload, None)).is_err() || opcode == OP_CLOSE {
            return;
        }
    }
}

/// Writes as much as the connection takes, without blocking for more than 20 s in all.
fn flood(conn: &mut TcpStream, record: &Record) {
    let chunk = frame(OP_BINARY, &vec![0x5a; 60_000], None);
    let _ = conn.set_write_timeout(Some(Duration::from_millis(200)));
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut at, mut written) = (0, 0u64);
    while Instant::now() < deadline && written < 256 << 20 {
        match conn.write(&chunk[at..]) {
            Ok(n) => {
                at = (at + n) % chunk.len();
                written += n as u64;
                record.written.fetch_add(n as u64, Ordering::SeqCst);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}
