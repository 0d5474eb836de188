//! One `origin` worker: a mio loop that accepts on its own SO_REUSEPORT listener and serves
//! fixed bodies with keep-alive and pipelining, over plain TCP or TLS.
//!
//! Buffers are bounded: a connection stops parsing pipelined requests while more than
//! `OUT_HIGH_WATER` bytes wait to be written, and large bodies are streamed from a shared
//! filler instead of being copied. A connection with nothing buffered holds no buffer: the
//! worker lends it one scratch buffer per direction while an event is handled.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use openssl::ssl::{Ssl, SslContext};

use crate::request::{self, Answer, BodyFraming, ChunkedDiscard, Request};
use crate::stream::{Handshake, Stream};

/// Stop parsing pipelined requests while this much output is queued.
const OUT_HIGH_WATER: usize = 64 * 1024;
const READ_CHUNK: usize = 16 * 1024;
const FILLER: [u8; 16 * 1024] = [b'x'; 16 * 1024];
const LISTENER: Token = Token(usize::MAX);

/// What every worker of one process shares.
pub struct Shared {
    pub size: u64,
    pub cache_control: Option<String>,
    pub tls: Option<SslContext>,
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    /// TLS handshakes that resumed a session (tests check `http-perf --tickets` with it).
    pub resumed: AtomicU64,
}

enum Stage {
    Handshake,
    Serving,
    /// The last response is written and our side shut down: read and discard what the client
    /// still sends, so closing does not reset the connection before it read the response.
    Draining(u64),
}

/// Most bytes discarded while draining before the connection is closed anyway.
const DRAIN_LIMIT: u64 = 1 << 20;

enum Body {
    /// Waiting for the next request head.
    Head,
    Length(u64),
    Chunked(ChunkedDiscard),
}

struct Conn {
    stream: Stream,
    stage: Stage,
    input: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    /// Filler bytes still to write after `out` (the tail of a large body).
    filler_left: u64,
    body: Body,
    /// Close once everything queued is written (Connection: close, or a 400).
    close_after_flush: bool,
}

struct Worker {
    poll: Poll,
    listener: TcpListener,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    shared: Arc<Shared>,
    /// The pre-built answer to the common request (GET of the default body, keep-alive).
    default_response: Vec<u8>,
    /// Every read lands here first (allocated and zeroed once per worker).
    read_buf: Vec<u8>,
    scratch_out: Vec<u8>,
}

/// Runs one worker on `listener` until the process is killed.
pub fn run(listener: std::net::TcpListener, shared: Arc<Shared>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let keep_alive = Request {
        head_len: 0,
        head_only: false,
        close: false,
        keep_alive_1_0: false,
        framing: BodyFraming::None,
        answer: Answer::Bytes(shared.size),
    };
    // Only a small default body is pre-built whole; larger ones stream from the filler.
    let mut default_response = Vec::new();
    if shared.size <= FILLER.len() as u64 {
        request::write_head(
            &mut default_response,
            shared.size,
            shared.cache_control.as_deref(),
            &keep_alive,
        );
        default_response.extend(std::iter::repeat_n(b'x', shared.size as usize));
    }
    let mut worker = Worker {
        poll,
        listener,
        conns: Vec::new(),
        free: Vec::new(),
        shared,
        default_response,
        read_buf: vec![0; READ_CHUNK],
        scratch_out: Vec::new(),
    };
    let mut events = Events::with_capacity(1024);
    loop {
        if let Err(e) = worker.poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for event in events.iter() {
            if event.token() == LISTENER {
                worker.accept_all();
            } else {
                worker.serve(event.token().0);
            }
        }
    }
}

impl Worker {
    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((tcp, _)) => self.add(tcp),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // Out of descriptors or an aborted connection: drop it and keep serving.
                Err(e) => {
                    eprintln!("origin: accept: {e}");
                    return;
                }
            }
        }
    }

    fn add(&mut self, tcp: TcpStream) {
        let _ = tcp.set_nodelay(true);
        let stream = match &self.shared.tls {
            None => Stream::Plain(tcp),
            Some(ctx) => {
                let made = Ssl::new(ctx).map_err(io::Error::other).and_then(|mut ssl| {
                    ssl.set_accept_state();
                    Stream::tls(ssl, tcp)
                });
                match made {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("origin: TLS setup: {e}");
                        return;
                    }
                }
            }
        };
        let stage = match stream {
            Stream::Plain(_) => Stage::Serving,
            Stream::Tls(_) => Stage::Handshake,
        };
        let mut conn = Conn {
            stream,
            stage,
            input: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            filler_left: 0,
            body: Body::Head,
            close_after_flush: false,
        };
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        let interest = Interest::READABLE | Interest::WRITABLE;
        if self
            .poll
            .registry()
            .register(conn.stream.tcp(), Token(slot), interest)
            .is_err()
        {
            self.free.push(slot);
            return;
        }
        self.shared.connections.fetch_add(1, Ordering::Relaxed);
        self.conns[slot] = Some(conn);
        // Data may already be waiting (edge-triggered: no event would announce it again).
        self.serve(slot);
    }

    fn serve(&mut self, slot: usize) {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        // Lend the output buffer to a connection that holds none.
        if conn.out.is_empty() {
            std::mem::swap(&mut conn.out, &mut self.scratch_out);
        }
        let keep = self.drive(&mut conn).unwrap_or(false);
        if !keep {
            let _ = self.poll.registry().deregister(conn.stream.tcp());
            self.free.push(slot);
            return;
        }
        // Take the buffer back from a connection that ended with nothing queued.
        if conn.input.is_empty() {
            conn.input = Vec::new();
        }
        if conn.out_pos == conn.out.len() {
            conn.out.clear();
            conn.out_pos = 0;
            std::mem::swap(&mut conn.out, &mut self.scratch_out);
        }
        self.conns[slot] = Some(conn);
    }

    /// Makes all the progress the socket allows; `Ok(false)` means close the connection.
    fn drive(&mut self, conn: &mut Conn) -> io::Result<bool> {
        if let Stage::Handshake = conn.stage {
            match conn.stream.handshake()? {
                Handshake::Pending => return Ok(true),
                Handshake::Done => {
                    conn.stage = Stage::Serving;
                    if conn.stream.ssl().is_some_and(|s| s.session_reused()) {
                        self.shared.resumed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        if let Stage::Draining(_) = conn.stage {
            return drain(conn);
        }
        loop {
            if !flush(conn)? {
                return Ok(true); // wait for writable
            }
            if conn.close_after_flush {
                conn.stage = Stage::Draining(DRAIN_LIMIT);
                conn.stream.close_notify();
                conn.stream.tcp().shutdown(std::net::Shutdown::Write)?;
                return drain(conn);
            }
            if !conn.input.is_empty() {
                let input = std::mem::take(&mut conn.input);
                let (used, queued) = self.process_input(conn, &input);
                conn.input = input;
                conn.input.drain(..used);
                if queued {
                    continue;
                }
            }
            match conn.stream.read(&mut self.read_buf) {
                Ok(0) => return Ok(false),
                Ok(n) if conn.input.is_empty() => {
                    // The common case: whole requests, parsed where they were read.
                    let buf = std::mem::take(&mut self.read_buf);
                    let (used, _) = self.process_input(conn, &buf[..n]);
                    conn.input.extend_from_slice(&buf[used..n]);
                    self.read_buf = buf;
                }
                Ok(n) => conn.input.extend_from_slice(&self.read_buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Ok(false),
            }
        }
    }

    /// Consumes `input`: discards bodies and queues responses. Returns the bytes used and
    /// whether it queued output (so the caller flushes before reading more).
    fn process_input(&self, conn: &mut Conn, input: &[u8]) -> (usize, bool) {
        let mut pos = 0;
        let mut queued = false;
        while pos < input.len()
            && conn.filler_left == 0
            && conn.out.len() - conn.out_pos < OUT_HIGH_WATER
            && !conn.close_after_flush
        {
            let rest = &input[pos..];
            match &mut conn.body {
                Body::Length(n) => {
                    let take = (*n).min(rest.len() as u64);
                    pos += take as usize;
                    *n -= take;
                    if *n == 0 {
                        conn.body = Body::Head;
                    }
                }
                Body::Chunked(decoder) => match decoder.feed(rest) {
                    Ok((used, done)) => {
                        pos += used;
                        if done {
                            conn.body = Body::Head;
                        } else if used == 0 {
                            break;
                        }
                    }
                    Err(_) => {
                        conn.out.extend_from_slice(request::BAD_REQUEST);
                        conn.close_after_flush = true;
                        queued = true;
                    }
                },
                Body::Head => match request::parse(rest, self.shared.size) {
                    Ok(None) => break,
                    Ok(Some(req)) => {
                        pos += req.head_len;
                        conn.body = match req.framing {
                            BodyFraming::None => Body::Head,
                            BodyFraming::Length(n) => Body::Length(n),
                            BodyFraming::Chunked => Body::Chunked(ChunkedDiscard::default()),
                        };
                        self.respond(conn, &req);
                        queued = true;
                    }
                    Err(_) => {
                        conn.out.extend_from_slice(request::BAD_REQUEST);
                        conn.close_after_flush = true;
                        queued = true;
                    }
                },
            }
        }
        (pos, queued)
    }

    fn respond(&self, conn: &mut Conn, req: &Request) {
        self.shared.requests.fetch_add(1, Ordering::Relaxed);
        conn.close_after_flush = req.close;
        let cache_control = self.shared.cache_control.as_deref();
        match req.answer {
            Answer::Bytes(n)
                if n == self.shared.size
                    && !self.default_response.is_empty()
                    && !req.head_only
                    && !req.close
                    && !req.keep_alive_1_0 =>
            {
                conn.out.extend_from_slice(&self.default_response);
            }
            Answer::Bytes(n) => {
                request::write_head(&mut conn.out, n, cache_control, req);
                if !req.head_only {
                    let inline = n.min(FILLER.len() as u64);
                    conn.out.extend_from_slice(&FILLER[..inline as usize]);
                    conn.filler_left = n - inline;
                }
            }
            Answer::Stats => {
                let body = format!(
                    "{{\"connections\":{},\"requests\":{},\"tls_resumed\":{}}}\n",
                    self.shared.connections.load(Ordering::Relaxed),
                    self.shared.requests.load(Ordering::Relaxed),
                    self.shared.resumed.load(Ordering::Relaxed)
                );
                request::write_head(&mut conn.out, body.len() as u64, None, req);
                if !req.head_only {
                    conn.out.extend_from_slice(body.as_bytes());
                }
            }
        }
    }
}

/// Reads and discards until the client closes, the limit is reached, or an error.
fn drain(conn: &mut Conn) -> io::Result<bool> {
    let mut sink = [0u8; 4096];
    loop {
        let Stage::Draining(left) = &mut conn.stage else {
            return Ok(false);
        };
        match conn.stream.read(&mut sink) {
            Ok(0) => return Ok(false),
            Ok(n) if (n as u64) >= *left => return Ok(false),
            Ok(n) => *left -= n as u64,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(false),
        }
    }
}

/// Writes queued output and filler; `Ok(true)` when everything is written.
fn flush(conn: &mut Conn) -> io::Result<bool> {
    while conn.out_pos < conn.out.len() {
        match conn.stream.write(&conn.out[conn.out_pos..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => conn.out_pos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    conn.out.clear();
    conn.out_pos = 0;
    while conn.filler_left > 0 {
        let len = conn.filler_left.min(FILLER.len() as u64) as usize;
        match conn.stream.write(&FILLER[..len]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => conn.filler_left -= n as u64,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
