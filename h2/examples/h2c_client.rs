//! A small blocking cleartext HTTP/2 (h2c, prior knowledge) client on top
//! of `h2::ClientConnection`, for tests against real origins (nginx, the
//! `h2c_server` example, grpcio): it sends its requests over one
//! connection, as many at once as the origin's MAX_CONCURRENT_STREAMS
//! allows (the rest wait), retries a request the origin refused, and
//! prints one line per response and a summary.
//!
//! `h2c_client ADDR [--authority HOST] [--header NAME:VALUE]...
//!   [--get PATH]... [--gets N PATH] [--post PATH SIZE] [--post-hex PATH HEX]
//!   [--grpc-pingpong PATH N] [--print-bodies] [--hold-ms N]`
//!
//! Output: `response I METHOD PATH status S bytes N fnv HASH [interim A,B] [body TEXT]`,
//! `header I NAME: VALUE` (the head's `grpc-*` fields), `trailer I NAME: VALUE`, then
//! `summary responses R failed F max_open M peer_max_streams P window_updates W retried T
//! held_peak H` (H: the most body bytes received but not yet consumed, with `--hold-ms`).
//! Exit status 1 when any request failed.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use h2::frame::{kind, FrameHeader, HEADER_LEN, PREFACE};
use h2::{ClientConnection, ClientEvent, ErrorCode, Field, Limits, Request};

/// One request to make.
struct Job {
    method: &'static str,
    path: String,
    body: Vec<u8>,
    /// gRPC ping-pong: this many messages, each sent only once the answer
    /// to the previous one came (a bidirectional stream); 0: a plain body.
    turns: usize,
}

/// What came back for one job.
#[derive(Default)]
struct Exchange {
    status: Option<u16>,
    interim: Vec<u16>,
    bytes: u64,
    fnv: u64,
    body: Vec<u8>,
    trailers: Vec<Field>,
    /// `grpc-*` fields of the head (a trailers-only gRPC answer has its status there).
    grpc_head: Vec<Field>,
    sent: usize,
    /// Ping-pong: messages sent, and the bytes of a message not yet whole.
    turns_sent: usize,
    rx: Vec<u8>,
    done: bool,
    failed: Option<String>,
}

struct Options {
    addr: String,
    authority: String,
    headers: Vec<Field>,
    jobs: Vec<Job>,
    print_bodies: bool,
    /// Milliseconds during which received body bytes are not reported
    /// consumed (a slow reader downstream): the origin must stop at our
    /// windows.
    hold_ms: u64,
}

fn usage(why: &str) -> ! {
    eprintln!("h2c_client: {why}");
    std::process::exit(2);
}

fn parse_args() -> Options {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| usage("no address"));
    let mut o = Options {
        authority: addr.clone(),
        addr,
        headers: Vec::new(),
        jobs: Vec::new(),
        print_bodies: false,
        hold_ms: 0,
    };
    while let Some(flag) = args.next() {
        let mut next = |what: &str| args.next().unwrap_or_else(|| usage(what));
        match flag.as_str() {
            "--authority" => o.authority = next("--authority HOST"),
            "--header" => {
                let h = next("--header NAME:VALUE");
                let (n, v) = h
                    .split_once(':')
                    .unwrap_or_else(|| usage("--header NAME:VALUE"));
                o.headers
                    .push(Field::new(n.as_bytes(), v.trim().as_bytes()));
            }
            "--get" => o.jobs.push(job("GET", next("--get PATH"), Vec::new())),
            "--gets" => {
                let n: usize = next("--gets N PATH").parse().unwrap_or_else(|_| usage("N"));
                let path = next("--gets N PATH");
                o.jobs
                    .extend((0..n).map(|_| job("GET", path.clone(), Vec::new())));
            }
            "--post" => {
                let path = next("--post PATH SIZE");
                let size: usize = next("SIZE").parse().unwrap_or_else(|_| usage("SIZE"));
                let body = (0..size).map(|i| (i % 251) as u8).collect();
                o.jobs.push(job("POST", path, body));
            }
            "--post-hex" => {
                let path = next("--post-hex PATH HEX");
                let body = hex(&next("HEX")).unwrap_or_else(|| usage("HEX"));
                o.jobs.push(job("POST", path, body));
            }
            "--grpc-pingpong" => {
                let path = next("--grpc-pingpong PATH N");
                let n: usize = next("N").parse().unwrap_or_else(|_| usage("N"));
                o.jobs.push(Job {
                    turns: n.max(1),
                    ..job("POST", path, Vec::new())
                });
            }
            "--print-bodies" => o.print_bodies = true,
            "--hold-ms" => o.hold_ms = next("--hold-ms N").parse().unwrap_or_else(|_| usage("N")),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    o
}

fn job(method: &'static str, path: String, body: Vec<u8>) -> Job {
    let turns = 0;
    Job {
        method,
        path,
        body,
        turns,
    }
}

/// gRPC's length-prefixed (uncompressed) message.
fn grpc_message(msg: &[u8]) -> Vec<u8> {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(msg);
    framed
}

fn hex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn fnv(h: u64, data: &[u8]) -> u64 {
    data.iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// The client and its bookkeeping over one socket.
struct Run {
    conn: ClientConnection,
    sock: TcpStream,
    opts: Options,
    exchanges: Vec<Exchange>,
    waiting: VecDeque<usize>,
    by_stream: HashMap<u32, usize>,
    max_open: usize,
    /// Body bytes received and not yet reported consumed, per stream, until `hold_until`.
    held: Vec<(u32, usize)>,
    held_peak: usize,
    hold_until: Instant,
    window_updates: u64,
    retried: u64,
    /// Bytes of our output already parsed for frame counting.
    out_scan: Vec<u8>,
    preface_skipped: bool,
}

impl Run {
    fn request(&self, i: usize) -> Request {
        let j = &self.opts.jobs[i];
        let mut fields = self.opts.headers.clone();
        if !j.body.is_empty() {
            fields.push(Field::new(
                b"content-length",
                j.body.len().to_string().as_bytes(),
            ));
        }
        Request {
            method: j.method.as_bytes().to_vec(),
            scheme: Some(b"http".to_vec()),
            authority: Some(self.opts.authority.as_bytes().to_vec()),
            path: Some(j.path.as_bytes().to_vec()),
            fields,
            content_length: None,
            field_count: 0,
        }
    }

    /// Opens what the origin allows, then sends request bodies.
    fn start_requests(&mut self) {
        while self.conn.can_open() {
            let Some(i) = self.waiting.pop_front() else {
                break;
            };
            let has_body = !self.opts.jobs[i].body.is_empty() || self.opts.jobs[i].turns > 0;
            match self.conn.open(&self.request(i), !has_body) {
                Ok(stream) => {
                    self.by_stream.insert(stream, i);
                    self.exchanges[i] = Exchange {
                        fnv: FNV_START,
                        ..Exchange::default()
                    };
                    if self.opts.jobs[i].turns > 0 {
                        self.next_turn(stream, i);
                    }
                }
                Err(e) => self.exchanges[i].failed = Some(e.to_string()),
            }
        }
        self.max_open = self.max_open.max(self.conn.open_streams());
        let streams: Vec<(u32, usize)> = self.by_stream.iter().map(|(s, i)| (*s, *i)).collect();
        for (stream, i) in streams {
            let body = &self.opts.jobs[i].body;
            let sent = self.exchanges[i].sent;
            if body.is_empty() || sent == body.len() {
                continue;
            }
            if let Ok(n) = self.conn.send_data(stream, &body[sent..], true) {
                self.exchanges[i].sent += n;
            }
        }
    }

    /// Ping-pong: the next message, or the end of the request after the last.
    fn next_turn(&mut self, stream: u32, i: usize) {
        let x = &mut self.exchanges[i];
        let msg = if x.turns_sent < self.opts.jobs[i].turns {
            grpc_message(format!("msg{}", x.turns_sent).as_bytes())
        } else {
            Vec::new()
        };
        // Small messages: the windows always take them whole.
        let _ = self.conn.send_data(stream, &msg, msg.is_empty());
        x.turns_sent += 1;
    }

    fn on_data(&mut self, stream: u32, i: usize, data: &[u8]) {
        let x = &mut self.exchanges[i];
        x.bytes += data.len() as u64;
        x.fnv = fnv(x.fnv, data);
        if self.opts.print_bodies {
            x.body.extend_from_slice(data);
        }
        if Instant::now() < self.hold_until {
            self.held.push((stream, data.len()));
            let total = self.held.iter().map(|(_, n)| n).sum();
            self.held_peak = self.held_peak.max(total);
        } else {
            self.conn.consumed(stream, data.len());
        }
        if self.opts.jobs[i].turns > 0 {
            self.on_pingpong_data(stream, i, data);
        }
    }

    /// Ping-pong: each whole message received answers one sent.
    fn on_pingpong_data(&mut self, stream: u32, i: usize, data: &[u8]) {
        self.exchanges[i].rx.extend_from_slice(data);
        loop {
            let rx = &mut self.exchanges[i].rx;
            let Some(len) = rx
                .get(1..5)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            else {
                return;
            };
            if rx.len() < 5 + len as usize {
                return;
            }
            rx.drain(..5 + len as usize);
            if self.exchanges[i].turns_sent <= self.opts.jobs[i].turns {
                self.next_turn(stream, i);
            }
        }
    }

    /// Writes the output, counting the WINDOW_UPDATE frames in it.
    fn flush(&mut self) -> std::io::Result<()> {
        let out = self.conn.output().to_vec();
        if out.is_empty() {
            return Ok(());
        }
        self.sock.write_all(&out)?;
        self.conn.advance_output(out.len());
        self.out_scan.extend_from_slice(&out);
        if !self.preface_skipped && self.out_scan.len() >= PREFACE.len() {
            self.out_scan.drain(..PREFACE.len());
            self.preface_skipped = true;
        }
        let mut at = 0;
        while let Some(h) = FrameHeader::parse(&self.out_scan[at..]) {
            let end = at + HEADER_LEN + h.length as usize;
            if end > self.out_scan.len() {
                break;
            }
            self.window_updates += u64::from(h.kind == kind::WINDOW_UPDATE);
            at = end;
        }
        self.out_scan.drain(..at);
        Ok(())
    }

    fn on_event(&mut self, ev: ClientEvent) {
        let stream = match &ev {
            ClientEvent::Interim { stream, .. }
            | ClientEvent::Response { stream, .. }
            | ClientEvent::Data { stream, .. }
            | ClientEvent::Trailers { stream, .. }
            | ClientEvent::Reset { stream, .. }
            | ClientEvent::WindowOpened { stream } => *stream,
            ClientEvent::GoAway { .. } => return,
            ClientEvent::Closed { error } => {
                eprintln!("connection closed: {error}");
                return;
            }
        };
        let Some(&i) = self.by_stream.get(&stream) else {
            return;
        };
        let x = &mut self.exchanges[i];
        let finished = match ev {
            ClientEvent::Interim { response, .. } => {
                x.interim.push(response.status);
                false
            }
            ClientEvent::Response {
                response,
                end_stream,
                ..
            } => {
                x.status = Some(response.status);
                let grpc = response
                    .fields
                    .into_iter()
                    .filter(|f| f.name.starts_with(b"grpc-"));
                x.grpc_head = grpc.collect();
                end_stream
            }
            ClientEvent::Data {
                data, end_stream, ..
            } => {
                self.on_data(stream, i, &data);
                end_stream
            }
            ClientEvent::Trailers { fields, .. } => {
                x.trailers = fields;
                true
            }
            ClientEvent::Reset {
                code, retryable, ..
            } => {
                self.on_reset(i, code, retryable);
                true
            }
            _ => false,
        };
        if finished {
            self.exchanges[i].done |= self.exchanges[i].status.is_some();
            self.by_stream.remove(&stream);
        }
    }

    fn on_reset(&mut self, i: usize, code: ErrorCode, retryable: bool) {
        let x = &mut self.exchanges[i];
        if x.done || (code == ErrorCode::NO_ERROR && x.status.is_some()) {
            // The response was complete; the origin only stops our upload.
            return;
        }
        if retryable && self.opts.jobs[i].method == "GET" {
            self.retried += 1;
            x.status = None;
            self.waiting.push_back(i);
        } else {
            x.failed = Some(format!("reset {code}"));
        }
    }

    fn finished(&self) -> bool {
        self.waiting.is_empty() && self.by_stream.is_empty()
    }
}

fn run(opts: Options) -> std::io::Result<Run> {
    let sock = TcpStream::connect(&opts.addr)?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_millis(20)))?;
    let conn = ClientConnection::new(Limits::default(), Instant::now())
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
    let n = opts.jobs.len();
    let hold_ms = opts.hold_ms;
    let mut r = Run {
        conn,
        sock,
        exchanges: (0..n).map(|_| Exchange::default()).collect(),
        waiting: (0..n).collect(),
        by_stream: HashMap::new(),
        opts,
        max_open: 0,
        held: Vec::new(),
        held_peak: 0,
        hold_until: Instant::now() + Duration::from_millis(hold_ms),
        window_updates: 0,
        retried: 0,
        out_scan: Vec::new(),
        preface_skipped: false,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < deadline {
        r.start_requests();
        r.flush()?;
        if r.finished() || r.conn.is_done() {
            break;
        }
        match r.sock.read(&mut buf) {
            Ok(0) => r.conn.peer_closed(),
            Ok(n) => r.conn.recv(&buf[..n], Instant::now()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
        if r.conn.next_deadline().is_some_and(|d| d <= Instant::now()) {
            r.conn.on_timeout(Instant::now());
        }
        while let Some(ev) = r.conn.poll_event() {
            r.on_event(ev);
        }
        if Instant::now() >= r.hold_until {
            for (stream, n) in std::mem::take(&mut r.held) {
                r.conn.consumed(stream, n);
            }
        }
    }
    r.conn.close();
    r.flush()?;
    Ok(r)
}

fn report(r: &Run) -> bool {
    let mut ok = true;
    for (i, (j, x)) in r.opts.jobs.iter().zip(&r.exchanges).enumerate() {
        let status = x.status.map_or("none".to_string(), |s| s.to_string());
        let mut line = format!(
            "response {i} {} {} status {status} bytes {} fnv {:016x}",
            j.method, j.path, x.bytes, x.fnv
        );
        if !x.interim.is_empty() {
            let v: Vec<String> = x.interim.iter().map(u16::to_string).collect();
            line += &format!(" interim {}", v.join(","));
        }
        if let Some(why) = &x.failed {
            line += &format!(" failed {why}");
        }
        if r.opts.print_bodies {
            line += &format!(" body {}", String::from_utf8_lossy(&x.body).trim_end());
        }
        println!("{line}");
        for (what, list) in [("header", &x.grpc_head), ("trailer", &x.trailers)] {
            for t in list {
                let n = String::from_utf8_lossy(&t.name);
                let v = String::from_utf8_lossy(&t.value);
                println!("{what} {i} {n}: {v}");
            }
        }
        ok &= x.done && x.failed.is_none();
    }
    let failed = r
        .exchanges
        .iter()
        .filter(|x| !x.done || x.failed.is_some())
        .count();
    let peer = r
        .conn
        .peer_max_concurrent_streams()
        .map_or("none".into(), |p| p.to_string());
    println!(
        "summary responses {} failed {failed} max_open {} peer_max_streams {peer} window_updates {} retried {} held_peak {}",
        r.exchanges.len() - failed,
        r.max_open,
        r.window_updates,
        r.retried,
        r.held_peak
    );
    ok
}

fn main() {
    let opts = parse_args();
    if opts.jobs.is_empty() {
        usage("nothing to request (--get PATH, --post PATH SIZE...)");
    }
    match run(opts) {
        Ok(r) => std::process::exit(if report(&r) { 0 } else { 1 }),
        Err(e) => {
            eprintln!("h2c_client: {e}");
            std::process::exit(1);
        }
    }
}
