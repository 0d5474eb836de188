//! A misbehaving origin for the security tests: each accepted connection runs the test's
//! script, which reads request heads and bodies itself and may answer whenever and however
//! it likes — before the body arrived, with a late body after a HEAD response, with thousands
//! of interim responses, closing mid-body. Every request head it reads is recorded (with the
//! connection it came on), and so is every raw byte each connection received, so that a test
//! can assert exactly what reached the origin.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::proxy::{Proxy, Setup};
use crate::rawclient::{Outcome, RawResponse};

/// A request head as the origin read it.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub method: String,
    pub target: String,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// Index of the TCP connection it came on (counts from 0 per origin).
    pub conn: usize,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body length the head announces: `Some(n)` for Content-Length, `None` for chunked,
    /// `Some(0)` for no body.
    pub fn content_length(&self) -> Option<usize> {
        if self
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
        {
            return None;
        }
        Some(
            self.header("content-length")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
        )
    }
}

/// A chunked body as read: its data and the raw trailer section (the lines after the last
/// chunk, without the final empty line).
#[derive(Clone, Debug, Default)]
pub struct ChunkedBody {
    pub data: Vec<u8>,
    pub trailer_lines: Vec<String>,
}

type Script = dyn Fn(&mut EvilConn) + Send + Sync;

struct Shared {
    script: Box<Script>,
    seen: Mutex<Vec<Seen>>,
    raw: Mutex<Vec<Vec<u8>>>,
    connections: AtomicUsize,
    stop: AtomicBool,
}

/// One accepted connection, handed to the script.
pub struct EvilConn {
    stream: TcpStream,
    buf: Vec<u8>,
    index: usize,
    shared: Arc<Shared>,
}

impl EvilConn {
    /// Index of this connection (0 for the first the origin accepted).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Reads more bytes into the buffer; false on EOF, error or `timeout`.
    fn fill(&mut self, timeout: Duration) -> bool {
        let _ = self
            .stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))));
        let mut chunk = [0u8; 16384];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                if let Some(raw) = self
                    .shared
                    .raw
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_mut(self.index)
                {
                    raw.extend_from_slice(&chunk[..n]);
                }
                true
            }
        }
    }

    /// Reads until `buf` holds `pred`'s answer, within `timeout`.
    fn read_until<T>(
        &mut self,
        timeout: Duration,
        mut pred: impl FnMut(&[u8]) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = pred(&self.buf) {
                return Some(found);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.fill(left) {
                return pred(&self.buf);
            }
        }
    }

    /// Reads one request head (its body, if any, stays unread) and records it. None when
    /// the connection ends or nothing complete comes within `timeout`.
    pub fn read_head(&mut self, timeout: Duration) -> Option<Seen> {
        let end = self.read_until(timeout, |b| {
            b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
        })?;
        let text = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end);
        let mut lines = text.split("\r\n");
        let mut start = lines.next().unwrap_or("").split(' ');
        let seen = Seen {
            method: start.next().unwrap_or("").to_string(),
            target: start.next().unwrap_or("").to_string(),
            headers: lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect(),
            conn: self.index,
        };
        self.shared
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(seen.clone());
        Some(seen)
    }

    /// Reads exactly `len` body bytes.
    pub fn read_exact_body(&mut self, len: usize, timeout: Duration) -> Option<Vec<u8>> {
        self.read_until(timeout, |b| (b.len() >= len).then_some(()))?;
        Some(self.buf.drain(..len).collect())
    }

    /// Reads a chunked body with its trailer section.
    pub fn read_chunked_body(&mut self, timeout: Duration) -> Option<ChunkedBody> {
        let (body, used) = self.read_until(timeout, parse_chunked)?;
        self.buf.drain(..used);
        Some(body)
    }

    /// Reads the body `seen` announces (Content-Length or chunked); its data.
    pub fn read_body(&mut self, seen: &Seen, timeout: Duration) -> Option<Vec<u8>> {
        match seen.content_length() {
            Some(len) => self.read_exact_body(len, timeout),
            None => self.read_chunked_body(timeout).map(|b| b.data),
        }
    }

    /// Writes raw bytes; false if the proxy is gone.
    pub fn write(&mut self, bytes: &[u8]) -> bool {
        self.stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush())
            .is_ok()
    }

    /// 200 with `origin:TARGET` as the body: the usual answer of the security tests' origins.
    pub fn echo(&mut self, target: &str) -> bool {
        self.respond(200, format!("origin:{target}").as_bytes())
    }

    /// Serves requests until the connection ends: reads each body and echoes its target,
    /// except for the requests `special` handles itself (it returns true for those).
    pub fn serve(&mut self, special: impl Fn(&mut EvilConn, &Seen) -> bool) {
        while let Some(seen) = self.read_head(Duration::from_secs(20)) {
            if special(self, &seen) {
                continue;
            }
            let body = self.read_body(&seen, Duration::from_secs(5));
            if body.is_none() || !self.echo(&seen.target) {
                return;
            }
        }
    }

    /// Closes the connection both ways now (the script may still run; reads then see EOF).
    pub fn close(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// Makes the connection end with a reset when the script returns (SO_LINGER 0, then the
    /// close): the proxy's next read fails with ECONNRESET instead of seeing an orderly end.
    pub fn reset_on_return(&mut self) {
        let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
    }

    /// Writes a complete response with `status`, `body` and Content-Length.
    pub fn respond(&mut self, status: u16, body: &[u8]) -> bool {
        let head = format!(
            "HTTP/1.1 {status} Status\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        self.write(head.as_bytes()) && self.write(body)
    }
}

/// A complete chunked body at the start of `buf`: (body, bytes used).
fn parse_chunked(buf: &[u8]) -> Option<(ChunkedBody, usize)> {
    let mut rest = buf;
    let mut body = ChunkedBody::default();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            loop {
                let end = rest.windows(2).position(|w| w == b"\r\n")?;
                let line = String::from_utf8_lossy(&rest[..end]).into_owned();
                rest = &rest[end + 2..];
                if end == 0 {
                    return Some((body, buf.len() - rest.len()));
                }
                body.trailer_lines.push(line);
            }
        }
        body.data.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// A running misbehaving origin; stops accepting when dropped.
pub struct EvilOrigin {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl EvilOrigin {
    /// Starts an origin on an ephemeral loopback port; every accepted connection runs
    /// `script` on its own thread (the connection closes when the script returns).
    pub fn start(script: impl Fn(&mut EvilConn) + Send + Sync + 'static) -> EvilOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind evil origin");
        let addr = listener.local_addr().expect("evil origin addr");
        let shared = Arc::new(Shared {
            script: Box::new(script),
            seen: Mutex::new(Vec::new()),
            raw: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let accept_shared = shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let _ = stream.set_nodelay(true);
                let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
                let index = {
                    let mut raw = accept_shared.raw.lock().unwrap_or_else(|e| e.into_inner());
                    raw.push(Vec::new());
                    raw.len() - 1
                };
                accept_shared.connections.fetch_add(1, Ordering::Relaxed);
                let shared = accept_shared.clone();
                thread::spawn(move || {
                    let mut conn = EvilConn {
                        stream,
                        buf: Vec::new(),
                        index,
                        shared: shared.clone(),
                    };
                    (shared.script)(&mut conn);
                });
            }
        });
        EvilOrigin { addr, shared }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request head read so far, in the order read.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Request targets read so far, as `METHOD target`.
    pub fn seen_lines(&self) -> Vec<String> {
        self.seen()
            .iter()
            .map(|s| format!("{} {}", s.method, s.target))
            .collect()
    }

    /// Raw bytes connection `index` received so far.
    pub fn raw(&self, index: usize) -> Vec<u8> {
        self.shared
            .raw
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(index)
            .cloned()
            .unwrap_or_default()
    }

    /// Everything every connection received, for assertion messages.
    pub fn raw_text(&self) -> String {
        let raw = self.shared.raw.lock().unwrap_or_else(|e| e.into_inner());
        raw.iter()
            .enumerate()
            .map(|(i, r)| format!("--- conn {i} ---\n{}\n", String::from_utf8_lossy(r)))
            .collect()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }
}

impl Drop for EvilOrigin {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// Starts the proxy of `setup` in front of `origin` with one worker thread (upstream pools are
/// per worker: with one, which connection a later request gets is deterministic),
/// `group_extra` in the server group and `extra` at top level. Returns it and its plain HTTP
/// address.
pub fn one_worker_proxy(
    setup: Setup,
    origin: SocketAddr,
    group_extra: &str,
    extra: &str,
) -> (Proxy, SocketAddr) {
    let conf = setup.config(origin, group_extra, &format!("worker_threads 1;\n{extra}"));
    let addr = setup.http;
    (setup.start(&conf), addr)
}

/// The response of `outcome` if its status is `status`; otherwise panics with what the origin
/// received and the proxy's logs.
pub fn expect_status(
    outcome: Outcome,
    status: u16,
    what: &str,
    proxy: &Proxy,
    origin: &EvilOrigin,
) -> RawResponse {
    match outcome {
        Outcome::Response(r) if r.status == status => r,
        other => panic!(
            "{what}: expected {status}, got {other}\norigin saw {:?}\n{}\n{}",
            origin.seen_lines(),
            origin.raw_text(),
            proxy.proc.logs()
        ),
    }
}
