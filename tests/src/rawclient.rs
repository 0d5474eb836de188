//! A raw HTTP/1.1 client for rule and frang tests: connect (optionally from a chosen loopback
//! source address), send bytes whole or in pieces with pauses, and report what came back — a
//! parsed response, or that the connection was closed or reset with no response.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

/// One parsed response.
#[derive(Clone, Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What a client saw.
#[derive(Clone, Debug)]
pub enum Outcome {
    Response(RawResponse),
    /// The peer closed (FIN) with no (complete) response.
    Closed,
    /// The peer reset the connection (ECONNRESET, EPIPE) with no (complete) response.
    Reset,
    /// Nothing conclusive within the time bound.
    Timeout,
    /// Any other error (e.g. a TLS error).
    Error(String),
}

impl Outcome {
    /// The response status, if there was a response.
    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Response(r) => Some(r.status),
            _ => None,
        }
    }

    /// The connection ended without a response: closed, reset or broken.
    pub fn is_dropped(&self) -> bool {
        matches!(self, Outcome::Closed | Outcome::Reset | Outcome::Error(_))
    }

    pub fn response(&self) -> Option<&RawResponse> {
        match self {
            Outcome::Response(r) => Some(r),
            _ => None,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Response(r) => write!(f, "response {}", r.status),
            Outcome::Closed => f.write_str("closed"),
            Outcome::Reset => f.write_str("reset"),
            Outcome::Timeout => f.write_str("timeout"),
            Outcome::Error(e) => write!(f, "error: {e}"),
        }
    }
}

/// A byte stream over TCP (plain or TLS) whose read timeout can be set.
pub trait RawStream: Read + Write {
    fn tcp(&self) -> &TcpStream;
}

impl RawStream for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl RawStream for openssl::ssl::SslStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref()
    }
}

/// Connects a TCP socket bound to `src` (any 127.x.y.z works on Linux loopback) to `dst`,
/// bounded by `timeout`.
pub fn connect_from(src: Ipv4Addr, dst: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let SocketAddr::V4(dst) = dst else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "IPv4 only"));
    };
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.bind(&SocketAddrV4::new(src, 0).into())?;
    // A blocking connect bounded by SO_SNDTIMEO (Linux), not socket2's poll-based
    // connect_timeout: that one reads SO_ERROR after the poll, and a proxy that resets the
    // connection right after accepting it (a frang block) would turn a completed connect
    // into ECONNRESET; the tests expect to see that reset on the first read instead.
    socket.set_write_timeout(Some(timeout))?;
    socket.connect(&dst.into())?;
    let stream = TcpStream::from(socket);
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A client connection that parses responses as they come.
pub struct RawClient<S: RawStream = TcpStream> {
    stream: S,
    buf: Vec<u8>,
}

impl RawClient<TcpStream> {
    /// Connects from 127.0.0.1.
    pub fn connect(addr: SocketAddr) -> io::Result<RawClient> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        Ok(RawClient::new(stream))
    }

    /// Connects from the loopback address `src`.
    pub fn connect_from(src: Ipv4Addr, addr: SocketAddr) -> io::Result<RawClient> {
        Ok(RawClient::new(connect_from(
            src,
            addr,
            Duration::from_secs(5),
        )?))
    }
}

impl<S: RawStream> RawClient<S> {
    pub fn new(stream: S) -> RawClient<S> {
        RawClient {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn stream(&self) -> &S {
        &self.stream
    }

    pub fn into_stream(self) -> S {
        self.stream
    }

    /// Writes all of `bytes`; an error means the peer is gone.
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), Outcome> {
        self.stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush())
            .map_err(|e| classify(&e))
    }

    /// Sends `request` and reads one response.
    pub fn request(&mut self, request: &[u8], timeout: Duration) -> Outcome {
        if let Err(outcome) = self.send(request) {
            // The peer may have answered before it went away.
            return match self.read_response(Duration::from_millis(500)) {
                Outcome::Response(r) => Outcome::Response(r),
                _ => outcome,
            };
        }
        self.read_response(timeout)
    }

    /// Sends `pieces` one by one, waiting `pause` before each piece after the first while
    /// watching for an answer; stops early when the peer answers, closes or resets. Returns
    /// the outcome and how many pieces were sent.
    pub fn trickle(&mut self, pieces: &[&[u8]], pause: Duration, timeout: Duration) -> Trickle {
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0 {
                match self.read_response(pause) {
                    Outcome::Timeout => {}
                    outcome => {
                        return Trickle {
                            outcome,
                            sent: i,
                            at: Instant::now(),
                        }
                    }
                }
            }
            if let Err(outcome) = self.send(piece) {
                let outcome = match self.read_response(Duration::from_millis(500)) {
                    Outcome::Response(r) => Outcome::Response(r),
                    _ => outcome,
                };
                return Trickle {
                    outcome,
                    sent: i,
                    at: Instant::now(),
                };
            }
        }
        Trickle {
            outcome: self.read_response(timeout),
            sent: pieces.len(),
            at: Instant::now(),
        }
    }

    /// Reads one response within `timeout`. Bytes after it stay buffered for the next call.
    pub fn read_response(&mut self, timeout: Duration) -> Outcome {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((response, used)) = parse_response(&self.buf) {
                self.buf.drain(..used);
                return Outcome::Response(response);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Outcome::Timeout;
            }
            let _ = self
                .stream
                .tcp()
                .set_read_timeout(Some(left.max(Duration::from_millis(1))));
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    // A response without Content-Length ends at close.
                    return match parse_head(&self.buf) {
                        Some((status, headers, head_len)) => {
                            let body = self.buf.split_off(head_len);
                            self.buf.clear();
                            Outcome::Response(RawResponse {
                                status,
                                headers,
                                body,
                            })
                        }
                        None => Outcome::Closed,
                    };
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    return Outcome::Timeout
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return classify(&e),
            }
        }
    }

    /// After a response that closes the connection: waits for the close (Closed or Reset;
    /// Timeout if it stays open, a Response if more came).
    pub fn wait_closed(&mut self, timeout: Duration) -> Outcome {
        self.read_response(timeout)
    }
}

/// How a trickle ended.
#[derive(Debug)]
pub struct Trickle {
    pub outcome: Outcome,
    /// Pieces written before the end.
    pub sent: usize,
    /// When the outcome was seen.
    pub at: Instant,
}

fn classify(e: &io::Error) -> Outcome {
    match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionAborted => Outcome::Reset,
        io::ErrorKind::UnexpectedEof => Outcome::Closed,
        _ => Outcome::Error(e.to_string()),
    }
}

type Head = (u16, Vec<(String, String)>, usize);

fn parse_head(buf: &[u8]) -> Option<Head> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let text = String::from_utf8_lossy(&buf[..end]);
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let status = status_line.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some((status, headers, end + 4))
}

/// A complete response at the start of `buf` and its length. Bodies: Content-Length, chunked,
/// none for 1xx/204/304; otherwise the body runs to close (`None` until then).
fn parse_response(buf: &[u8]) -> Option<(RawResponse, usize)> {
    let (status, headers, head_len) = parse_head(buf)?;
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let rest = &buf[head_len..];
    let (body, used) = if (100..200).contains(&status) || status == 204 || status == 304 {
        (Vec::new(), 0)
    } else if find("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        dechunk(rest)?
    } else {
        let len: usize = find("content-length")?.parse().ok()?;
        (rest.get(..len)?.to_vec(), len)
    };
    Some((
        RawResponse {
            status,
            headers,
            body,
        },
        head_len + used,
    ))
}

fn dechunk(mut rest: &[u8]) -> Option<(Vec<u8>, usize)> {
    let start_len = rest.len();
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            // Trailer fields, then an empty line.
            loop {
                let end = rest.windows(2).position(|w| w == b"\r\n")?;
                rest = &rest[end + 2..];
                if end == 0 {
                    return Some((body, start_len - rest.len()));
                }
            }
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// A GET request for `path` with `host`, keep-alive.
pub fn get(path: &str, host: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

/// A GET request for `path` with `host` and extra header lines (each ending in CRLF).
pub fn get_with(path: &str, host: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n").into_bytes()
}
