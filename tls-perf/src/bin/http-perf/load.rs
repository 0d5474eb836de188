//! One load thread: a mio loop over its share of the connections, sending the same request
//! again as soon as a response completes (closed loop, like wrk), or at a constant rate with
//! latency measured from the intended send time (no coordinated omission). HTTP/1.1, or
//! HTTP/2 with `--h2` (the streams of a connection driven by `h2_session`).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::h2_session::{Done, H2Session};
use crate::load_conn::{Conn, Stage};
use crate::pacer::Pacer;
use crate::report::Errors;
use crate::response::ResponseReader;
use crate::stream::{Handshake, Stream};
use crate::tls::TlsClient;

/// How often a thread samples its request rate and checks timeouts.
const TICK: Duration = Duration::from_millis(100);
/// Pause before reconnecting after a failed connection, so a dead server is not hammered.
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);
const READ_CHUNK: usize = 16 * 1024;
/// Reads one connection gets per turn: a connection whose server always has more (h2 with
/// many streams) must not starve the others, nor keep the run past its end.
const READS_PER_TURN: usize = 32;

/// What one thread does.
pub struct LoadPlan {
    pub addr: SocketAddr,
    pub tls: Option<(Option<String>, bool)>,
    pub request: Arc<Vec<u8>>,
    /// `-H "Connection: close"`: a new connection for every request.
    pub close_each: bool,
    /// HTTP/2 (`--h2`): this header block as one stream per request; `pipeline` streams
    /// per connection at most.
    pub h2: Option<Arc<Vec<u8>>>,
    /// HTTP/3 (`--h3`): run by `h3::load` instead, with `pipeline` streams per connection.
    pub h3: Option<Arc<crate::h3::H3Plan>>,
    pub connections: usize,
    pub pipeline: usize,
    /// Requests per second for this thread (`--rate` divided among threads).
    pub rate: Option<f64>,
    pub duration: Duration,
    pub timeout: Duration,
    /// Progress for the main thread, and its stop (Ctrl-C).
    pub live: Arc<crate::progress::Live>,
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
    /// Rate mode: requests due by the end that got no response (never sent, for want of a
    /// free connection, or still in flight): the tail the latency figures cannot include.
    pub unfinished: u64,
    /// `--h3`: the response bodies' bytes (DATA payloads), for the check that every
    /// response was the whole page.
    pub body_bytes: Option<u64>,
    /// `--h3`: the first error's cause, in words, for the report's stderr line.
    pub first_error: Option<String>,
}

impl ThreadResult {
    pub fn new(latency: Histogram<u64>) -> ThreadResult {
        ThreadResult {
            latency,
            rate_samples: Vec::new(),
            requests: 0,
            bytes: 0,
            errors: Errors::default(),
            non_2xx_3xx: 0,
            elapsed: Duration::ZERO,
            unfinished: 0,
            body_bytes: None,
            first_error: None,
        }
    }
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
    pacer: Option<Pacer>,
    /// Connections that used their turn with data left to read (edge-triggered: no new
    /// event will come for it), pumped again after the next poll, which does not wait.
    again: Vec<usize>,
    /// Every read lands here first (allocated and zeroed once per thread).
    scratch: Vec<u8>,
}

impl<'a> Thread<'a> {
    fn new(plan: &'a LoadPlan) -> io::Result<Thread<'a>> {
        let tls = match &plan.tls {
            Some((sni, _)) if plan.h2.is_some() => {
                Some(TlsClient::with_alpn(sni.clone(), b"\x02h2").map_err(io::Error::other)?)
            }
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
            result: ThreadResult::new(latency),
            free: VecDeque::new(),
            next_due: Duration::ZERO,
            pacer: None,
            again: Vec::new(),
            scratch: vec![0; READ_CHUNK],
        })
    }

    fn run(mut self) -> io::Result<ThreadResult> {
        if self.plan.rate.is_some() {
            self.pacer = Some(Pacer::new(self.poll.registry())?);
        }
        let now = Instant::now();
        for i in 0..self.plan.connections {
            self.conns.push(Conn::new(now));
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
            let wake = self.wake_at(now, next_tick.min(deadline))?;
            match self
                .poll
                .poll(&mut events, Some(wake.saturating_duration_since(now)))
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match (&self.pacer, event.token()) {
                    (Some(pacer), Pacer::TOKEN) => pacer.drain(),
                    _ => self.on_event(event.token().0),
                }
            }
            for i in std::mem::take(&mut self.again) {
                if matches!(self.conns[i].stage, Stage::Ready) {
                    self.pump(i);
                }
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
        self.result.unfinished = self.unfinished();
        Ok(self.result)
    }

    /// When the loop must wake: at `tick`, or (rate mode, a connection free) when the next
    /// request is due, through the pacer's timer.
    fn wake_at(&self, now: Instant, tick: Instant) -> io::Result<Instant> {
        if !self.again.is_empty() {
            return Ok(now);
        }
        if let (Some(pacer), false) = (&self.pacer, self.free.is_empty()) {
            let due = self.start + self.next_due;
            if due <= now {
                return Ok(now);
            }
            if due < tick {
                pacer.arm(due - now)?;
            }
        }
        Ok(tick)
    }

    /// Rate mode, at the end: requests due that were never sent, plus those still in flight.
    fn unfinished(&self) -> u64 {
        let Some(rate) = self.plan.rate else { return 0 };
        let elapsed = self.result.elapsed;
        let due_unsent = if self.next_due <= elapsed {
            (elapsed - self.next_due).as_secs_f64() * rate + 1.0
        } else {
            0.0
        };
        let in_flight: usize = self.conns.iter().map(Conn::outstanding).sum();
        due_unsent as u64 + in_flight as u64
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
        c.h2 = None;
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
                    if let Some(block) = &self.plan.h2 {
                        // A server that did not agree to h2 cannot serve this run.
                        let h2 = stream
                            .ssl()
                            .is_none_or(|ssl| ssl.selected_alpn_protocol() == Some(b"h2"));
                        if !h2 {
                            return self.fail_connect(i);
                        }
                        c.h2 = Some(H2Session::new(Arc::clone(block)));
                    }
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
        if c.outstanding() == 0 {
            c.busy_since = Instant::now();
        }
        if let Some(h2) = c.h2.as_mut() {
            return h2.request(start_ns);
        }
        c.in_flight.push_back(start_ns);
        c.unsent += len;
    }

    fn offer(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if !c.listed && c.has_room(self.plan.pipeline) {
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
        for _ in 0..READS_PER_TURN {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            while let Some(h2) = c.h2.as_mut().filter(|h2| !h2.output().is_empty()) {
                match stream.write(h2.output()) {
                    Ok(n) if n > 0 => h2.written(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    _ => {
                        self.result.errors.write += 1;
                        return self.connect(i);
                    }
                }
            }
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
        self.again.push(i);
    }

    /// Handles `n` bytes just read into the scratch buffer, after any partial response kept
    /// from earlier reads; false if the connection was replaced.
    fn consume(&mut self, i: usize, n: usize) -> bool {
        if self.conns[i].h2.is_some() {
            return self.consume_h2(i, n);
        }
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

    /// `--h2`: hands the bytes read to the session, and completes the streams that ended;
    /// false if the connection was replaced.
    fn consume_h2(&mut self, i: usize, n: usize) -> bool {
        let mut done: Vec<Done> = Vec::new();
        let c = &mut self.conns[i];
        let Some(h2) = c.h2.as_mut() else {
            return false;
        };
        let fed = h2.feed(&self.scratch[..n], &mut done);
        if !done.is_empty() {
            c.busy_since = Instant::now();
        }
        for d in done {
            self.complete(Some(d.start_ns), d.status);
            if self.plan.rate.is_some() {
                self.offer(i);
            } else {
                self.queue(i, self.now_ns());
            }
        }
        if fed.is_err() {
            self.result.errors.read += 1;
            self.connect(i);
            return false;
        }
        true
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
        if c.h2.is_some() {
            if c.outstanding() > 0 {
                self.result.errors.read += 1;
            }
            return self.connect(i);
        }
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
                Stage::Ready if c.outstanding() > 0 && now - c.busy_since > timeout => {
                    self.result.errors.timeout += 1;
                    self.connect(i);
                }
                _ => {}
            }
        }
    }
}
