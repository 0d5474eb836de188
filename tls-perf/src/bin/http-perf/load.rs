//! One load thread: a mio loop over its share of the connections, sending the same request
//! again as soon as a response completes (closed loop, like wrk), or at a constant rate with
//! latency measured from the intended send time (no coordinated omission).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::response::ResponseReader;
use crate::stream::{Handshake, Stream};
use crate::tls::TlsClient;

/// How often a thread samples its request rate and checks timeouts.
const TICK: Duration = Duration::from_millis(100);
/// Pause before reconnecting after a failed connection, so a dead server is not hammered.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
const READ_CHUNK: usize = 16 * 1024;

/// What one thread does.
pub struct LoadPlan {
    pub addr: SocketAddr,
    pub tls: Option<(Option<String>, bool)>,
    pub request: Arc<Vec<u8>>,
    /// `-H "Connection: close"`: a new connection for every request.
    pub close_each: bool,
    pub connections: usize,
    pub pipeline: usize,
    /// Requests per second for this thread (`--rate` divided among threads).
    pub rate: Option<f64>,
    pub duration: Duration,
    pub timeout: Duration,
    /// Progress for the main thread, and its stop (Ctrl-C).
    pub live: Arc<crate::progress::Live>,
}

/// Socket errors, counted as wrk counts them.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Errors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
}

impl Errors {
    pub fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
    }
    pub fn any(&self) -> bool {
        self.total() > 0
    }
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout
    }
}

/// What one thread measured.
pub struct ThreadResult {
    /// Microseconds from send (or intended send) to the last byte of the response.
    pub latency: Histogram<u64>,
    /// This thread's requests per second, sampled every 100 ms.
    pub rate_samples: Vec<f64>,
    pub requests: u64,
    pub bytes: u64,
    pub errors: Errors,
    pub non_2xx_3xx: u64,
    pub elapsed: Duration,
}

enum Stage {
    Connecting,
    Handshaking,
    Ready,
    /// Waiting to reconnect after an error.
    Paused(Instant),
}

struct Conn {
    stream: Option<Stream>,
    stage: Stage,
    since: Instant,
    reader: ResponseReader,
    input: Vec<u8>,
    /// Start times (ns since the thread started) of requests queued or sent, oldest first.
    in_flight: VecDeque<u64>,
    /// Bytes at the tail of the queued requests not written yet.
    unsent: usize,
    /// When the oldest outstanding request last saw progress (for `--timeout`).
    busy_since: Instant,
    /// Listed as able to take a request (rate mode).
    listed: bool,
}

pub fn run(plan: &LoadPlan) -> io::Result<ThreadResult> {
    Thread::new(plan)?.run()
}

struct Thread<'a> {
    plan: &'a LoadPlan,
    poll: Poll,
    tls: Option<TlsClient>,
    conns: Vec<Conn>,
    /// The request repeated `pipeline` times: any unsent tail is a suffix of it.
    batch: Vec<u8>,
    start: Instant,
    result: ThreadResult,
    /// Rate mode: connections that can take one more request, and when the next is due.
    free: VecDeque<usize>,
    next_due: Duration,
    /// Every read lands here first (allocated and zeroed once per thread).
    scratch: Vec<u8>,
}

impl<'a> Thread<'a> {
    fn new(plan: &'a LoadPlan) -> io::Result<Thread<'a>> {
        let tls = match &plan.tls {
            Some((sni, tickets)) => {
                Some(TlsClient::new(sni.clone(), *tickets).map_err(io::Error::other)?)
            }
            None => None,
        };
        let latency = Histogram::new_with_bounds(1, 3_600_000_000, 3).map_err(io::Error::other)?;
        let now = Instant::now();
        Ok(Thread {
            plan,
            poll: Poll::new()?,
            tls,
            conns: Vec::new(),
            batch: plan.request.repeat(plan.pipeline.max(1)),
            start: now,
            result: ThreadResult {
                latency,
                rate_samples: Vec::new(),
                requests: 0,
                bytes: 0,
                errors: Errors::default(),
                non_2xx_3xx: 0,
                elapsed: Duration::ZERO,
            },
            free: VecDeque::new(),
            next_due: Duration::ZERO,
            scratch: vec![0; READ_CHUNK],
        })
    }

    fn run(mut self) -> io::Result<ThreadResult> {
        let now = Instant::now();
        for i in 0..self.plan.connections {
            self.conns.push(Conn {
                stream: None,
                stage: Stage::Paused(now),
                since: now,
                reader: ResponseReader::default(),
                input: Vec::new(),
                in_flight: VecDeque::new(),
                unsent: 0,
                busy_since: now,
                listed: false,
            });
            self.connect(i);
        }
        self.start = Instant::now();
        let deadline = self.start + self.plan.duration;
        let mut next_tick = self.start + TICK;
        let mut last_sample = (self.start, 0u64);
        let mut published = (0u64, 0u64);
        let mut events = Events::with_capacity(1024);
        loop {
            let now = Instant::now();
            if now >= deadline || self.plan.live.stopped() {
                break;
            }
            let mut wake = next_tick.min(deadline);
            if self.plan.rate.is_some() && !self.free.is_empty() {
                wake = wake.min(self.start + self.next_due);
            }
            match self
                .poll
                .poll(&mut events, Some(wake.saturating_duration_since(now)))
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                self.on_event(event.token().0);
            }
            if self.plan.rate.is_some() {
                self.dispatch_due();
            }
            let now = Instant::now();
            if now >= next_tick {
                let secs = now.duration_since(last_sample.0).as_secs_f64();
                let done = self.result.requests - last_sample.1;
                self.result.rate_samples.push(done as f64 / secs);
                last_sample = (now, self.result.requests);
                next_tick += TICK;
                self.check_timers(now);
                let errors = self.result.errors.total();
                self.plan
                    .live
                    .add(self.result.requests - published.0, errors - published.1);
                published = (self.result.requests, errors);
            }
        }
        self.result.elapsed = self.start.elapsed();
        Ok(self.result)
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// (Re)opens connection `i`; failures are connect errors followed by a pause.
    fn connect(&mut self, i: usize) {
        let now = Instant::now();
        let c = &mut self.conns[i];
        if let Some(mut old) = c.stream.take() {
            old.close_notify();
            let _ = self.poll.registry().deregister(old.tcp());
        }
        c.reader = ResponseReader::default();
        c.input = Vec::new();
        c.in_flight.clear();
        c.unsent = 0;
        c.since = now;
        let opened = TcpStream::connect(self.plan.addr).and_then(|tcp| {
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                None => Ok(Stream::Plain(tcp)),
                Some(client) => Stream::tls(client.ssl().map_err(io::Error::other)?, tcp),
            }
        });
        let registered = opened.and_then(|mut s| {
            self.poll.registry().register(
                s.tcp(),
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            Ok(s)
        });
        match registered {
            Ok(s) => {
                c.stream = Some(s);
                c.stage = Stage::Connecting;
            }
            Err(_) => {
                self.result.errors.connect += 1;
                c.stage = Stage::Paused(now + RECONNECT_PAUSE);
            }
        }
    }

    fn fail_connect(&mut self, i: usize) {
        self.result.errors.connect += 1;
        let c = &mut self.conns[i];
        if let Some(mut old) = c.stream.take() {
            let _ = self.poll.registry().deregister(old.tcp());
        }
        c.stage = Stage::Paused(Instant::now() + RECONNECT_PAUSE);
    }

    fn on_event(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i) else {
            return;
        };
        let Some(stream) = c.stream.as_mut() else {
            return;
        };
        if let Stage::Connecting = c.stage {
            let tcp = stream.tcp();
            match (tcp.take_error(), tcp.peer_addr()) {
                (Ok(None), Ok(_)) => c.stage = Stage::Handshaking,
                (Ok(None), Err(e)) if e.kind() == io::ErrorKind::NotConnected => return,
                _ => return self.fail_connect(i),
            }
        }
        if let Stage::Handshaking = c.stage {
            match stream.handshake() {
                Ok(Handshake::Pending) => return,
                Ok(Handshake::Done) => {
                    c.stage = Stage::Ready;
                    self.on_ready(i);
                }
                Err(_) => return self.fail_connect(i),
            }
        }
        if let Stage::Ready = self.conns[i].stage {
            self.pump(i);
        }
    }

    /// A connection finished its handshake: fill its pipeline, or offer it to the scheduler.
    fn on_ready(&mut self, i: usize) {
        if self.plan.rate.is_some() {
            self.offer(i);
        } else {
            for _ in 0..self.plan.pipeline.max(1) {
                self.queue(i, self.now_ns());
            }
        }
    }

    fn queue(&mut self, i: usize, start_ns: u64) {
        let len = self.plan.request.len();
        let c = &mut self.conns[i];
        if c.in_flight.is_empty() {
            c.busy_since = Instant::now();
        }
        c.in_flight.push_back(start_ns);
        c.unsent += len;
    }

    fn offer(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if !c.listed && c.in_flight.len() < self.plan.pipeline.max(1) {
            c.listed = true;
            self.free.push_back(i);
        }
    }

    /// Rate mode: hands every request that is due to a connection that can take it.
    fn dispatch_due(&mut self) {
        let Some(rate) = self.plan.rate else { return };
        let interval = Duration::from_secs_f64(1.0 / rate.max(1e-9));
        let elapsed = self.start.elapsed();
        while self.next_due <= elapsed {
            let Some(i) = self.free.pop_front() else {
                break;
            };
            self.conns[i].listed = false;
            if !matches!(self.conns[i].stage, Stage::Ready) {
                continue;
            }
            self.queue(i, self.next_due.as_nanos() as u64);
            self.next_due += interval;
            self.offer(i);
            self.pump(i);
        }
    }

    /// Writes what is queued and reads what arrived, until the socket would block.
    fn pump(&mut self, i: usize) {
        loop {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            while c.unsent > 0 {
                let from = self.batch.len() - c.unsent;
                match stream.write(&self.batch[from..]) {
                    Ok(n) if n > 0 => c.unsent -= n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    _ => {
                        self.result.errors.write += 1;
                        return self.connect(i);
                    }
                }
            }
            match stream.read(&mut self.scratch) {
                Ok(0) => return self.on_eof(i),
                Ok(n) => {
                    self.result.bytes += n as u64;
                    if !self.consume(i, n) {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.result.errors.read += 1;
                    return self.connect(i);
                }
            }
        }
    }

    /// Handles `n` bytes just read into the scratch buffer, after any partial response kept
    /// from earlier reads; false if the connection was replaced.
    fn consume(&mut self, i: usize, n: usize) -> bool {
        let scratch = std::mem::take(&mut self.scratch);
        let mut pending = std::mem::take(&mut self.conns[i].input);
        let alive = if pending.is_empty() {
            // The common case: whole responses, parsed where they were read, never copied.
            let (used, alive) = self.parse(i, &scratch[..n]);
            if alive {
                pending.extend_from_slice(&scratch[used..n]);
            }
            alive
        } else {
            pending.extend_from_slice(&scratch[..n]);
            let (used, alive) = self.parse(i, &pending);
            pending.drain(..used);
            alive
        };
        if alive {
            self.conns[i].input = pending;
        }
        self.scratch = scratch;
        alive
    }

    /// Handles the responses in `data`; returns the bytes used, and false if the connection
    /// was replaced.
    fn parse(&mut self, i: usize, data: &[u8]) -> (usize, bool) {
        let mut pos = 0;
        loop {
            let c = &mut self.conns[i];
            let (used, done) = match c.reader.feed(&data[pos..], false) {
                Ok(x) => x,
                Err(_) => {
                    self.result.errors.read += 1;
                    self.connect(i);
                    return (pos, false);
                }
            };
            pos += used;
            let Some(done) = done else {
                if used == 0 || pos == data.len() {
                    return (pos, true);
                }
                continue;
            };
            let start = c.in_flight.pop_front();
            c.busy_since = Instant::now();
            self.complete(start, done.status);
            if done.close || self.plan.close_each {
                self.connect(i);
                return (pos, false);
            }
            if self.plan.rate.is_some() {
                self.offer(i);
            } else {
                self.queue(i, self.now_ns());
            }
        }
    }

    fn complete(&mut self, start_ns: Option<u64>, status: u16) {
        // A response nobody asked for (a server speaking first) is not a latency sample.
        let Some(start_ns) = start_ns else { return };
        let us = self.now_ns().saturating_sub(start_ns) / 1000;
        self.result.latency.saturating_record(us.max(1));
        self.result.requests += 1;
        if !(200..400).contains(&status) {
            self.result.non_2xx_3xx += 1;
        }
    }

    fn on_eof(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if let Some(done) = c.reader.eof() {
            let start = c.in_flight.pop_front();
            self.complete(start, done.status);
        } else if !self.conns[i].in_flight.is_empty() {
            self.result.errors.read += 1;
        }
        self.connect(i);
    }

    /// Every tick: reconnect paused connections, and time out stuck ones.
    fn check_timers(&mut self, now: Instant) {
        let timeout = self.plan.timeout;
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            match c.stage {
                Stage::Paused(until) if now >= until => self.connect(i),
                Stage::Connecting | Stage::Handshaking if now - c.since > timeout => {
                    self.result.errors.timeout += 1;
                    self.connect(i);
                }
                Stage::Ready if !c.in_flight.is_empty() && now - c.busy_since > timeout => {
                    self.result.errors.timeout += 1;
                    self.connect(i);
                }
                _ => {}
            }
        }
    }
}
