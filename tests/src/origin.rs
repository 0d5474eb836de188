//! A real HTTP/1.1 origin for end-to-end tests, on its own threads over std::net: it parses
//! what the proxy sends (Content-Length and chunked bodies, keep-alive), records every
//! request, counts hits, and answers as the test's handler says.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// A request as the origin received it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub method: String,
    pub target: String,
    pub version: String,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Whether the body came chunked.
    pub chunked: bool,
    /// Index of the TCP connection it arrived on (counts from 0 per origin).
    pub conn_index: usize,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// What the origin sends back.
#[derive(Clone, Debug)]
pub enum Body {
    Bytes(Vec<u8>),
    /// `len` bytes of [`pattern_byte`], generated while writing (for large downloads).
    Pattern(u64),
}

#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
    /// Send the body chunked instead of with Content-Length.
    pub chunked: bool,
    /// Wait this long before answering.
    pub delay: Duration,
    /// Close the connection without answering (a dead upstream connection).
    pub drop_connection: bool,
    /// Close the connection after answering.
    pub close: bool,
}

impl Response {
    pub fn ok(body: impl Into<Vec<u8>>) -> Response {
        Response {
            status: 200,
            headers: Vec::new(),
            body: Body::Bytes(body.into()),
            chunked: false,
            delay: Duration::ZERO,
            drop_connection: false,
            close: false,
        }
    }
    pub fn status(mut self, status: u16) -> Response {
        self.status = status;
        self
    }
    pub fn header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
    pub fn pattern(len: u64) -> Response {
        Response {
            body: Body::Pattern(len),
            ..Response::ok(Vec::new())
        }
    }
    pub fn chunked(mut self) -> Response {
        self.chunked = true;
        self
    }
    pub fn delay(mut self, delay: Duration) -> Response {
        self.delay = delay;
        self
    }
    pub fn dropped() -> Response {
        Response {
            drop_connection: true,
            ..Response::ok(Vec::new())
        }
    }
}

/// Byte `i` of the deterministic download pattern (not periodic at powers of two, so a
/// misplaced chunk shows).
pub fn pattern_byte(i: u64) -> u8 {
    ((i.wrapping_mul(31).wrapping_add(i / 251)) % 251) as u8
}

/// The first `len` pattern bytes.
pub fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(pattern_byte).collect()
}

type Handler = dyn Fn(&Request) -> Response + Send + Sync;

struct Shared {
    handler: Box<Handler>,
    requests: Mutex<Vec<Request>>,
    hits: Mutex<HashMap<String, usize>>,
    connections: Mutex<usize>,
    stop: AtomicBool,
}

/// A running origin; stops accepting when dropped.
pub struct Origin {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Origin {
    /// Starts an origin on an ephemeral loopback port.
    pub fn start(handler: impl Fn(&Request) -> Response + Send + Sync + 'static) -> Origin {
        Origin::start_at(SocketAddr::from(([127, 0, 0, 1], 0)), handler)
    }

    /// Starts an origin on `addr` (a server the proxy's config names before it runs).
    pub fn start_at(
        addr: SocketAddr,
        handler: impl Fn(&Request) -> Response + Send + Sync + 'static,
    ) -> Origin {
        let listener = TcpListener::bind(addr).expect("bind origin");
        let addr = listener.local_addr().expect("origin addr");
        let shared = Arc::new(Shared {
            handler: Box::new(handler),
            requests: Mutex::new(Vec::new()),
            hits: Mutex::new(HashMap::new()),
            connections: Mutex::new(0),
            stop: AtomicBool::new(false),
        });
        let accept_shared = shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let conn_index = {
                    let mut n = accept_shared
                        .connections
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    *n += 1;
                    *n - 1
                };
                let shared = accept_shared.clone();
                thread::spawn(move || {
                    let _ = serve(stream, &shared, conn_index);
                });
            }
        });
        Origin { addr, shared }
    }

    /// An origin answering every request with 200 and `body`.
    pub fn fixed(body: &'static [u8]) -> Origin {
        Origin::start(move |_| Response::ok(body))
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests received for `path` (query ignored).
    pub fn hits(&self, path: &str) -> usize {
        self.shared
            .hits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    pub fn total_requests(&self) -> usize {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        *self
            .shared
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn serve(stream: TcpStream, shared: &Shared, conn_index: usize) -> io::Result<()> {
    // Heads and bodies are separate writes: without this, each response waits on a delayed ACK.
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        let Some(mut request) = read_request(&mut reader)? else {
            return Ok(());
        };
        request.conn_index = conn_index;
        shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(request.clone());
        *shared
            .hits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(request.path().to_string())
            .or_insert(0) += 1;
        let response = (shared.handler)(&request);
        if !response.delay.is_zero() {
            thread::sleep(response.delay);
        }
        if response.drop_connection {
            return Ok(());
        }
        write_response(&mut writer, &request, &response)?;
        let client_closes = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        if response.close || client_closes || request.version == "HTTP/1.0" {
            return Ok(());
        }
    }
}

fn read_line(reader: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim_end_matches(['\r', '\n']).to_string()))
}

fn read_request(reader: &mut impl BufRead) -> io::Result<Option<Request>> {
    let Some(start) = read_line(reader)? else {
        return Ok(None);
    };
    let mut parts = start.split(' ');
    let mut request = Request {
        method: parts.next().unwrap_or("").to_string(),
        target: parts.next().unwrap_or("").to_string(),
        version: parts.next().unwrap_or("").to_string(),
        ..Request::default()
    };
    loop {
        let Some(line) = read_line(reader)? else {
            return Ok(None);
        };
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            request
                .headers
                .push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    if request
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        request.chunked = true;
        loop {
            let size_line = read_line(reader)?.unwrap_or_default();
            let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
            if size == 0 {
                while read_line(reader)?.is_some_and(|l| !l.is_empty()) {}
                break;
            }
            let start = request.body.len();
            request.body.resize(start + size, 0);
            reader.read_exact(&mut request.body[start..])?;
            read_line(reader)?;
        }
    } else if let Some(len) = request
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        request.body.resize(len, 0);
        reader.read_exact(&mut request.body)?;
    }
    Ok(Some(request))
}

fn write_response(
    writer: &mut TcpStream,
    request: &Request,
    response: &Response,
) -> io::Result<()> {
    let len = match &response.body {
        Body::Bytes(b) => b.len() as u64,
        Body::Pattern(n) => *n,
    };
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        response.status,
        reason(response.status)
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let bodiless = request.method == "HEAD" || response.status == 204 || response.status == 304;
    if response.chunked {
        head.push_str("Transfer-Encoding: chunked\r\n");
    } else if !(response.status == 204 || response.status == 304) {
        head.push_str(&format!("Content-Length: {len}\r\n"));
    }
    if response.close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes())?;
    if bodiless {
        return writer.flush();
    }
    let mut offset = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    while offset < len {
        let n = (len - offset).min(buf.len() as u64) as usize;
        match &response.body {
            Body::Bytes(b) => buf[..n].copy_from_slice(&b[offset as usize..offset as usize + n]),
            Body::Pattern(_) => {
                for (i, byte) in buf[..n].iter_mut().enumerate() {
                    *byte = pattern_byte(offset + i as u64);
                }
            }
        }
        if response.chunked {
            writer.write_all(format!("{n:x}\r\n").as_bytes())?;
            writer.write_all(&buf[..n])?;
            writer.write_all(b"\r\n")?;
        } else {
            writer.write_all(&buf[..n])?;
        }
        offset += n as u64;
    }
    if response.chunked {
        writer.write_all(b"0\r\n\r\n")?;
    }
    writer.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
