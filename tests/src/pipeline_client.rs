//! Seeded clients for the exchange invariant test: each plans a list of tagged requests (every
//! body framing, `Expect: 100-continue`, origin plans that answer early or close), sends them
//! pipelined on one connection, and reads back what it gets, in order, with the proxy's own
//! HTTP/1 parser.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use http1::{BodyDecoder, Limits};

use crate::tagged_origin::Plan;

/// splitmix64: small, seedable, and the same on every machine.
pub struct SeededRng(u64);

impl SeededRng {
    pub fn new(seed: u64) -> SeededRng {
        SeededRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// How a request body is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    None,
    Length,
    Chunked { trailers: bool },
}

/// Bytes that look like a request of their own: a body that outlives its exchange and is
/// parsed as the next request gets this to the origin, which records it with no tag.
pub const SMUGGLED: &[u8] = b"GET /smuggled HTTP/1.1\r\nHost: site.test\r\nX-Ignore: ";

/// One planned request.
#[derive(Clone, Debug)]
pub struct PlannedRequest {
    pub tag: String,
    pub method: &'static str,
    pub plan: Plan,
    pub framing: Framing,
    pub expect: bool,
    /// The body as the origin should record it (decoded).
    pub body: Vec<u8>,
    /// The head on the wire.
    pub head: Vec<u8>,
    /// The encoded body, sent in these pieces with a pause between them.
    pub body_pieces: Vec<Vec<u8>>,
}

impl PlannedRequest {
    pub fn target(&self) -> String {
        format!("/inv/{}/{}", self.tag, self.plan.name())
    }

    pub fn is_head(&self) -> bool {
        self.method == "HEAD"
    }
}

/// The requests of client `client` in run `seed`; `early`: whether the origin may answer
/// before reading a body (otherwise those requests get the `full` plan).
pub fn plan_requests(
    rng: &mut SeededRng,
    seed: u64,
    client: usize,
    early: bool,
) -> Vec<PlannedRequest> {
    let count = 1 + rng.below(5) as usize;
    (0..count)
        .map(|i| plan_one(rng, format!("s{seed}c{client}r{i}"), early))
        .collect()
}

fn plan_one(rng: &mut SeededRng, tag: String, early: bool) -> PlannedRequest {
    let method = ["GET", "HEAD", "POST", "PUT", "POST"][rng.below(5) as usize];
    let has_body = matches!(method, "POST" | "PUT");
    let framing = if !has_body {
        Framing::None
    } else {
        match rng.below(3) {
            0 => Framing::Length,
            1 => Framing::Chunked { trailers: false },
            _ => Framing::Chunked { trailers: true },
        }
    };
    let plan = match rng.below(10) {
        0..=3 => Plan::Full,
        4 => Plan::Chunked,
        5 => Plan::Close,
        _ if !has_body || !early => Plan::Full,
        6 => Plan::Early([403, 302, 200][rng.below(3) as usize]),
        7 => Plan::Early(413),
        8 => Plan::EarlyClose([400, 200][rng.below(2) as usize]),
        _ => Plan::Full,
    };
    let expect = has_body && rng.chance(25);
    let body = if has_body { make_body(rng) } else { Vec::new() };
    let mut request = PlannedRequest {
        tag,
        method,
        plan,
        framing,
        expect,
        body,
        head: Vec::new(),
        body_pieces: Vec::new(),
    };
    request.head = encode_head(&request);
    request.body_pieces = encode_body(rng, &request);
    request
}

/// Random bytes with [`SMUGGLED`] in the middle, sometimes large enough to outlast an early
/// answer.
fn make_body(rng: &mut SeededRng) -> Vec<u8> {
    let len = match rng.below(10) {
        0 => 0,
        1..=6 => rng.below(600) as usize,
        _ => 4096 + rng.below(40_000) as usize,
    };
    let mut body: Vec<u8> = (0..len).map(|_| b'a' + rng.below(26) as u8).collect();
    if len > SMUGGLED.len() * 2 {
        let at = len / 2;
        body[at..at + SMUGGLED.len()].copy_from_slice(SMUGGLED);
    }
    body
}

fn encode_head(request: &PlannedRequest) -> Vec<u8> {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: site.test\r\n",
        request.method,
        request.target()
    );
    match request.framing {
        Framing::None => {}
        Framing::Length => head.push_str(&format!("Content-Length: {}\r\n", request.body.len())),
        Framing::Chunked { .. } => head.push_str("Transfer-Encoding: chunked\r\n"),
    }
    if request.expect {
        head.push_str("Expect: 100-continue\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// The body on the wire, in one piece or two (split where [`SMUGGLED`] starts, so that the
/// second piece begins like a request when the framing allows).
fn encode_body(rng: &mut SeededRng, request: &PlannedRequest) -> Vec<Vec<u8>> {
    let body = &request.body;
    let cut = if rng.chance(50) || request.plan.is_early() {
        body.len() / 2
    } else {
        body.len()
    };
    match request.framing {
        Framing::None => Vec::new(),
        Framing::Length => [&body[..cut], &body[cut..]]
            .into_iter()
            .filter(|p| !p.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
        Framing::Chunked { trailers } => {
            let mut first = Vec::new();
            let mut offset = 0;
            let mut pieces = Vec::new();
            while offset < body.len() {
                let end = if offset < cut { cut } else { body.len() };
                let size = (1 + rng.below(3000) as usize).min(end - offset);
                let ext = if rng.chance(20) { ";ext=1" } else { "" };
                first.extend_from_slice(format!("{size:x}{ext}\r\n").as_bytes());
                first.extend_from_slice(&body[offset..offset + size]);
                first.extend_from_slice(b"\r\n");
                offset += size;
                if offset == cut && cut < body.len() {
                    pieces.push(std::mem::take(&mut first));
                }
            }
            first.extend_from_slice(b"0\r\n");
            if trailers {
                first.extend_from_slice(b"X-Trailer: end\r\n");
            }
            first.extend_from_slice(b"\r\n");
            pieces.push(first);
            pieces
        }
    }
}

/// A final response as a client read it.
#[derive(Clone, Debug)]
pub struct SeenResponse {
    pub status: u16,
    /// `X-Tag`: set when the origin made this response.
    pub tag: Option<String>,
    pub body: Vec<u8>,
}

/// How a client's connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Every request sent got a final response.
    Answered,
    /// The proxy closed the connection (FIN); the next request had no response.
    Closed,
    /// The connection was reset: answers sent before it may have been destroyed.
    Reset,
    /// Nothing within the time bound: something is waiting for bytes that never come.
    Stalled,
    /// A response the client could not parse.
    Garbled(String),
}

/// What one client saw: final responses in order, and how the connection ended.
#[derive(Clone, Debug)]
pub struct ClientOutcome {
    pub responses: Vec<SeenResponse>,
    /// How many requests had their head sent (each is due an answer unless the connection
    /// ends).
    pub sent: usize,
    pub end: End,
}

/// Reads responses from the proxy with the proxy's own parser.
struct ResponseReader {
    stream: TcpStream,
    buf: Vec<u8>,
    deadline: Instant,
}

enum Read1 {
    Interim,
    Final(SeenResponse, bool),
}

impl ResponseReader {
    fn fill(&mut self) -> Result<usize, End> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(End::Stalled);
        }
        let _ = self.stream.set_read_timeout(Some(left));
        let mut chunk = [0u8; 32 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(End::Stalled)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(self.buf.len()),
            Err(_) => Err(End::Reset),
        }
    }

    /// The next response (interim or final) for a request that was or was not HEAD.
    fn next(&mut self, is_head: bool) -> Result<Read1, End> {
        let limits = Limits::default();
        let (head, head_len) = loop {
            match http1::parse_response(&self.buf, &limits, is_head) {
                Ok(Some(parsed)) => break parsed,
                Ok(None) => {}
                Err(e) => return Err(End::Garbled(format!("{e}: {:?}", self.text()))),
            }
            if self.fill()? == 0 {
                return Err(if self.buf.is_empty() {
                    End::Closed
                } else {
                    End::Garbled(format!("cut short: {:?}", self.text()))
                });
            }
        };
        if head.is_interim() {
            self.buf.drain(..head_len);
            return Ok(Read1::Interim);
        }
        let status = head.status();
        let tag = head
            .header(&self.buf, "x-tag")
            .map(|t| String::from_utf8_lossy(t).into_owned());
        let close = !head.keep_alive();
        let mut decoder = BodyDecoder::new(head.framing(), &limits);
        self.buf.drain(..head_len);
        let mut body = Vec::new();
        while !decoder.is_done() {
            let step = decoder
                .decode(&self.buf)
                .map_err(|e| End::Garbled(format!("body: {e}")))?;
            body.extend_from_slice(&self.buf[step.data.clone()]);
            self.buf.drain(..step.consumed);
            if step.done {
                break;
            }
            // The decoder goes a piece at a time: read more only when it needs more.
            if step.consumed > 0 && !self.buf.is_empty() {
                continue;
            }
            if self.fill()? == 0 {
                if decoder.finish_at_eof().is_ok() {
                    break;
                }
                return Err(End::Garbled("body cut short".into()));
            }
        }
        Ok(Read1::Final(SeenResponse { status, tag, body }, close))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf[..self.buf.len().min(200)]).into_owned()
    }
}

/// Sends `requests` pipelined on one connection to `proxy` and reads every answer, within
/// `patience` overall.
pub fn run_client(
    proxy: SocketAddr,
    requests: &[PlannedRequest],
    patience: Duration,
) -> ClientOutcome {
    let mut outcome = ClientOutcome {
        responses: Vec::new(),
        sent: 0,
        end: End::Answered,
    };
    let stream = match TcpStream::connect(proxy) {
        Ok(s) => s,
        Err(e) => {
            outcome.end = End::Garbled(format!("connect: {e}"));
            return outcome;
        }
    };
    let _ = stream.set_nodelay(true);
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            outcome.end = End::Garbled(format!("clone: {e}"));
            return outcome;
        }
    };
    let mut reader = ResponseReader {
        stream,
        buf: Vec::new(),
        deadline: Instant::now() + patience,
    };
    if let Err(end) = send_all(&mut writer, &mut reader, requests, &mut outcome) {
        outcome.end = end;
        return outcome;
    }
    // Every request is out (or the connection refused more): read the answers still due.
    while outcome.responses.len() < outcome.sent {
        let index = outcome.responses.len();
        match reader.next(requests[index].is_head()) {
            Ok(Read1::Interim) => {}
            Ok(Read1::Final(response, close)) => {
                outcome.responses.push(response);
                if close && outcome.responses.len() < outcome.sent {
                    outcome.end = End::Closed;
                    return outcome;
                }
            }
            Err(end) => {
                outcome.end = end;
                return outcome;
            }
        }
    }
    outcome
}

/// Writes each request; for `Expect: 100-continue`, reads answers until the 100 (or the final
/// answer) for it. Stops sending when the connection takes no more (the proxy may close it
/// after an early answer) and leaves the answers already due to be read.
fn send_all(
    writer: &mut TcpStream,
    reader: &mut ResponseReader,
    requests: &[PlannedRequest],
    outcome: &mut ClientOutcome,
) -> Result<(), End> {
    for (i, request) in requests.iter().enumerate() {
        if writer.write_all(&request.head).is_err() {
            return Ok(());
        }
        outcome.sent = i + 1;
        if request.expect && !wait_for_continue(reader, requests, i, outcome)? {
            // A final answer without 100: the body is not sent and the connection is done.
            return Ok(());
        }
        for (n, piece) in request.body_pieces.iter().enumerate() {
            if n > 0 {
                // Let the origin's early answer overtake the rest of the body.
                thread::sleep(Duration::from_millis(15));
            }
            if writer.write_all(piece).is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Reads answers due before request `i`, then its 100 Continue (true) or its final answer
/// (false).
fn wait_for_continue(
    reader: &mut ResponseReader,
    requests: &[PlannedRequest],
    i: usize,
    outcome: &mut ClientOutcome,
) -> Result<bool, End> {
    loop {
        let index = outcome.responses.len();
        match reader.next(requests.get(index).is_some_and(PlannedRequest::is_head))? {
            Read1::Interim if index == i => return Ok(true),
            Read1::Interim => {}
            Read1::Final(response, close) => {
                outcome.responses.push(response);
                if index == i {
                    return Ok(false);
                }
                if close {
                    return Err(End::Closed);
                }
            }
        }
    }
}
