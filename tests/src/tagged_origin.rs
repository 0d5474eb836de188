//! A recording origin for the exchange invariant test: every request carries a tag and a plan
//! in its target (`/inv/TAG/PLAN`); the origin records what it received (method, target, the
//! whole body even when it answered before reading it) and answers as the plan says, echoing
//! the tag so that a client can tell its own responses from anyone else's.
//!
//! Plans: `full` (read the body, answer 200 with its length and checksum), `chunked` (the same
//! answer, chunked), `close` (the same, then `Connection: close`), `early<STATUS>` (answer
//! before reading the body, then read and discard it and stay open, as nginx does),
//! `earlyclose<STATUS>` (answer before reading the body with `Connection: close`, then close
//! without recording the body, lingering so the answer is not lost to a reset).
//! A request whose target is not of this shape (a smuggled one) is recorded with an empty tag
//! and answered 404.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How much of a recorded request's body the origin has read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyState {
    /// Still reading (or waiting for bytes that never come).
    Reading,
    /// Read to the end of its framing.
    Complete,
    /// The connection ended (or broke the framing) before the body did; `body` holds what
    /// had arrived.
    Cut,
    /// Deliberately not read (`earlyclose` plans).
    Unread,
}

/// One request as the origin received it.
#[derive(Clone, Debug)]
pub struct TaggedRequest {
    /// The tag from the target; empty when the target was not `/inv/TAG/PLAN`.
    pub tag: String,
    pub method: String,
    pub target: String,
    pub body: Vec<u8>,
    pub body_state: BodyState,
    /// Index of the upstream connection it came on.
    pub conn: usize,
}

/// What the origin answers a request with, from the target's last segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    Full,
    Chunked,
    Close,
    Early(u16),
    EarlyClose(u16),
}

impl Plan {
    pub fn name(&self) -> String {
        match self {
            Plan::Full => "full".into(),
            Plan::Chunked => "chunked".into(),
            Plan::Close => "close".into(),
            Plan::Early(status) => format!("early{status}"),
            Plan::EarlyClose(status) => format!("earlyclose{status}"),
        }
    }

    fn parse(name: &str) -> Option<Plan> {
        if let Some(status) = name.strip_prefix("earlyclose") {
            return status.parse().ok().map(Plan::EarlyClose);
        }
        if let Some(status) = name.strip_prefix("early") {
            return status.parse().ok().map(Plan::Early);
        }
        match name {
            "full" => Some(Plan::Full),
            "chunked" => Some(Plan::Chunked),
            "close" => Some(Plan::Close),
            _ => None,
        }
    }

    /// Whether the origin answers before reading the body.
    pub fn is_early(&self) -> bool {
        matches!(self, Plan::Early(_) | Plan::EarlyClose(_))
    }
}

/// FNV-1a, 64 bits: a checksum both sides compute for a body.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The body of the origin's answer to a request that was read whole.
pub fn full_answer(tag: &str, body: &[u8]) -> String {
    format!("tag={tag} len={} sum={:016x}", body.len(), checksum(body))
}

/// The body of an early answer.
pub fn early_answer(tag: &str) -> String {
    format!("tag={tag} early")
}

struct Shared {
    records: Mutex<Vec<TaggedRequest>>,
    connections: AtomicUsize,
    stop: AtomicBool,
}

/// A running tagged origin; stops accepting when dropped.
pub struct TaggedOrigin {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl TaggedOrigin {
    pub fn start() -> TaggedOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind tagged origin");
        let addr = listener.local_addr().expect("tagged origin address");
        let shared = Arc::new(Shared {
            records: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let accept_shared = shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                if accept_shared.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let conn = accept_shared.connections.fetch_add(1, Ordering::Relaxed);
                let shared = accept_shared.clone();
                thread::spawn(move || {
                    let _ = serve(stream, &shared, conn);
                });
            }
        });
        TaggedOrigin { addr, shared }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Records whose tag starts with `prefix`, and those with no tag (smuggled requests),
    /// once none of them is still reading its body or `patience` has passed.
    pub fn records_settled(&self, prefix: &str, patience: Duration) -> Vec<TaggedRequest> {
        let deadline = Instant::now() + patience;
        loop {
            let records: Vec<TaggedRequest> = self
                .lock()
                .iter()
                .filter(|r| r.tag.is_empty() || r.tag.starts_with(prefix))
                .cloned()
                .collect();
            let reading = records.iter().any(|r| r.body_state == BodyState::Reading);
            if !reading || Instant::now() >= deadline {
                return records;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<TaggedRequest>> {
        self.shared
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for TaggedOrigin {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// A parsed request head.
struct Head {
    method: String,
    target: String,
    fields: Vec<(String, String)>,
}

impl Head {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn serve(stream: TcpStream, shared: &Shared, conn: usize) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    while let Some(head) = read_head(&mut reader)? {
        let (tag, plan) = tag_and_plan(&head.target);
        let exchange = Exchange::record(shared, conn, head, tag);
        let close = match plan {
            Some(plan) => exchange.follow(plan, &mut reader, &mut writer)?,
            None => {
                exchange.take_body(&mut reader)?;
                let is_head = exchange.head.method == "HEAD";
                answer(
                    &mut writer,
                    404,
                    "",
                    "not an invariant request",
                    is_head,
                    false,
                )?;
                false
            }
        };
        if close {
            return linger(reader.into_inner());
        }
    }
    Ok(())
}

/// One request being served, and where its record is.
struct Exchange<'a> {
    shared: &'a Shared,
    index: usize,
    head: Head,
    tag: String,
}

impl<'a> Exchange<'a> {
    /// Records the request, its body still being read.
    fn record(shared: &'a Shared, conn: usize, head: Head, tag: String) -> Self {
        let index = {
            let mut records = shared.records.lock().unwrap_or_else(|e| e.into_inner());
            records.push(TaggedRequest {
                tag: tag.clone(),
                method: head.method.clone(),
                target: head.target.clone(),
                body: Vec::new(),
                body_state: BodyState::Reading,
                conn,
            });
            records.len() - 1
        };
        Exchange {
            shared,
            index,
            head,
            tag,
        }
    }

    fn set_body(&self, body: Vec<u8>, state: BodyState) {
        let mut records = self
            .shared
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(r) = records.get_mut(self.index) {
            r.body = body;
            r.body_state = state;
        }
    }

    /// Reads the body into the record, whole or cut short.
    fn take_body(&self, reader: &mut BufReader<TcpStream>) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        let read = read_body(reader, &self.head, &mut body);
        let state = match read {
            Ok(()) => BodyState::Complete,
            Err(_) => BodyState::Cut,
        };
        self.set_body(body.clone(), state);
        read.map(|()| body)
    }

    /// Reads and answers as the plan says; true when the connection is to close.
    fn follow(
        &self,
        plan: Plan,
        reader: &mut BufReader<TcpStream>,
        writer: &mut TcpStream,
    ) -> io::Result<bool> {
        let (tag, is_head) = (&self.tag, self.head.method == "HEAD");
        match plan {
            Plan::Early(status) => {
                answer(writer, status, tag, &early_answer(tag), is_head, false)?;
                self.take_body(reader)?;
                Ok(false)
            }
            Plan::EarlyClose(status) => {
                self.set_body(Vec::new(), BodyState::Unread);
                answer(writer, status, tag, &early_answer(tag), is_head, true)?;
                Ok(true)
            }
            Plan::Full | Plan::Chunked | Plan::Close => {
                if self
                    .head
                    .field("expect")
                    .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
                {
                    // An origin may send its own 100 even though the proxy sent one already.
                    writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
                }
                let body = self.take_body(reader)?;
                let text = full_answer(tag, &body);
                let close = plan == Plan::Close;
                if plan == Plan::Chunked {
                    answer_chunked(writer, tag, &text, is_head)?;
                } else {
                    answer(writer, 200, tag, &text, is_head, close)?;
                }
                Ok(close)
            }
        }
    }
}

/// `/inv/TAG/PLAN` -> (TAG, PLAN); anything else has no tag.
fn tag_and_plan(target: &str) -> (String, Option<Plan>) {
    let mut parts = target.trim_start_matches('/').split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("inv"), Some(tag), Some(plan), None) => match Plan::parse(plan) {
            Some(plan) => (tag.to_string(), Some(plan)),
            None => (String::new(), None),
        },
        _ => (String::new(), None),
    }
}

/// Half-closes, then reads until the peer closes (bounded), so that unread bytes do not turn
/// the close into a reset that could destroy the answer in flight.
fn linger(stream: TcpStream) -> io::Result<()> {
    stream.shutdown(Shutdown::Write)?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut sink = [0u8; 16384];
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut stream = stream;
    while Instant::now() < deadline {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    Ok(())
}

fn answer(
    writer: &mut TcpStream,
    status: u16,
    tag: &str,
    body: &str,
    is_head: bool,
    close: bool,
) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status} Status\r\nX-Tag: {tag}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if status == 302 {
        out.push_str("Location: /elsewhere\r\n");
    }
    if close {
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    if !is_head {
        out.push_str(body);
    }
    writer.write_all(out.as_bytes())
}

fn answer_chunked(writer: &mut TcpStream, tag: &str, body: &str, is_head: bool) -> io::Result<()> {
    let mut out = format!("HTTP/1.1 200 OK\r\nX-Tag: {tag}\r\nTransfer-Encoding: chunked\r\n\r\n");
    if !is_head {
        let (a, b) = body.split_at(body.len() / 2);
        for piece in [a, b].into_iter().filter(|p| !p.is_empty()) {
            out.push_str(&format!("{:x}\r\n{piece}\r\n", piece.len()));
        }
        out.push_str("0\r\n\r\n");
    }
    writer.write_all(out.as_bytes())
}

fn read_line(reader: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line)? == 0 {
        return Ok(None);
    }
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "line without CRLF",
        ));
    }
    line.truncate(line.len() - 2);
    Ok(Some(String::from_utf8_lossy(&line).into_owned()))
}

fn read_head(reader: &mut impl BufRead) -> io::Result<Option<Head>> {
    let Some(start) = read_line(reader)? else {
        return Ok(None);
    };
    let mut parts = start.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let mut fields = Vec::new();
    loop {
        let line = read_line(reader)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "head cut short"))?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "field without colon"))?;
        fields.push((name.to_string(), value.trim().to_string()));
    }
    Ok(Some(Head {
        method,
        target,
        fields,
    }))
}

/// The body by the head's framing into `body`: chunked (extensions and trailers skipped),
/// Content-Length, or none. On an error `body` holds what arrived.
fn read_body(reader: &mut impl BufRead, head: &Head, body: &mut Vec<u8>) -> io::Result<()> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    if head
        .field("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let line = read_line(reader)?.ok_or_else(|| bad("chunk size cut short"))?;
            let size = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16).map_err(|_| bad("chunk size"))?;
            if size == 0 {
                while read_line(reader)?.is_some_and(|l| !l.is_empty()) {}
                return Ok(());
            }
            let got = reader.by_ref().take(size as u64).read_to_end(body)?;
            if got < size {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "chunk cut short",
                ));
            }
            if read_line(reader)?.is_none_or(|l| !l.is_empty()) {
                return Err(bad("chunk data not followed by CRLF"));
            }
        }
    }
    if let Some(length) = head.field("content-length") {
        let length: u64 = length.parse().map_err(|_| bad("content-length"))?;
        // `take` keeps what arrived when the connection ends early.
        let got = reader.by_ref().take(length).read_to_end(body)?;
        if (got as u64) < length {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "body cut short",
            ));
        }
    }
    Ok(())
}
