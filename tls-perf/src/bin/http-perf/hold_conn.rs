//! One hold-mode thread: ramp its connections (a bounded number of TCP+TLS handshakes in
//! flight), keep them idle while watching for drops, then run request rounds that write one
//! request on every connection before reading any response.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::{Deserialize, Serialize};

use crate::response::ResponseReader;
use crate::stream::{Handshake, Stream};
use crate::tls::TlsClient;

/// What one thread does.
pub struct HoldPlan {
    pub addrs: Vec<SocketAddr>,
    /// Index of this thread's first destination in `addrs` (spreads threads and processes).
    pub addr_offset: usize,
    pub tls: Option<(Option<String>, bool)>,
    pub request: Arc<Vec<u8>>,
    pub connections: usize,
    pub handshakes: usize,
    /// The ramp stops here; connections not established by then count as failed (there is
    /// no shorter per-handshake timeout: one may wait behind many in the server's backlog).
    pub ramp_deadline: Instant,
    /// `--h3`: a QUIC handshake not done this long after it began failed (a datagram lost
    /// for good, and QUIC would retransmit until the idle timeout, longer than the ramp).
    pub quic_handshake_timeout: Duration,
    pub idle: Duration,
    pub rounds: usize,
    pub round_timeout: Duration,
    /// `--h3`: QUIC connections (`h3::hold`) instead of TCP ones.
    pub h3: Option<Arc<crate::h3::H3Plan>>,
}

#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub struct RampReport {
    pub established: u64,
    pub failed: u64,
    /// Of the failed: QUIC handshakes cut at `quic_handshake_timeout`.
    #[serde(default)]
    pub timed_out: u64,
    pub secs: f64,
}

impl RampReport {
    /// Adds another thread's or process's ramp to this one.
    pub fn add(&mut self, r: &RampReport) {
        self.established += r.established;
        self.failed += r.failed;
        self.timed_out += r.timed_out;
        self.secs = self.secs.max(r.secs);
    }
}

#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub struct RoundReport {
    /// 2xx responses.
    pub answered: u64,
    /// Requests that got no 2xx response within the round's timeout.
    pub failed: u64,
    /// Wall-clock bounds of the round (µs since the Unix epoch), to merge processes.
    pub start_us: u64,
    pub end_us: u64,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct HoldReport {
    pub ramp: RampReport,
    /// Connections the server closed (or wrote to) while they were idle.
    pub dropped: u64,
    pub rounds: Vec<RoundReport>,
}

enum State {
    Connecting,
    Handshaking,
    Open,
    Dead,
}

struct Conn {
    stream: Option<Stream>,
    state: State,
    /// Request bytes not yet written in this round.
    unsent: usize,
    /// Waiting for this round's response.
    waiting: bool,
    reader: ResponseReader,
    input: Vec<u8>,
}

struct Thread<'a> {
    plan: &'a HoldPlan,
    poll: Poll,
    tls: Option<TlsClient>,
    conns: Vec<Conn>,
    report: HoldReport,
    in_flight: usize,
    scratch: Vec<u8>,
    /// This round: responses answered, and connections still waiting.
    answered: u64,
    outstanding: u64,
}

/// Runs the thread; sends the ramp result on `ramped`, then waits for `go` before the idle
/// hold (so every thread and process holds and runs rounds at the same time).
pub fn run(plan: &HoldPlan, ramped: Sender<RampReport>, go: &AtomicBool) -> io::Result<HoldReport> {
    let tls = match &plan.tls {
        Some((sni, tickets)) => {
            Some(TlsClient::new(sni.clone(), *tickets).map_err(io::Error::other)?)
        }
        None => None,
    };
    let mut t = Thread {
        plan,
        poll: Poll::new()?,
        tls,
        conns: Vec::with_capacity(plan.connections),
        report: HoldReport::default(),
        in_flight: 0,
        scratch: vec![0; 16 * 1024],
        answered: 0,
        outstanding: 0,
    };
    t.ramp()?;
    let _ = ramped.send(t.report.ramp);
    while !go.load(Ordering::Acquire) {
        t.watch(Duration::from_millis(50))?;
    }
    let idle_end = Instant::now() + plan.idle;
    while Instant::now() < idle_end {
        t.watch(idle_end.saturating_duration_since(Instant::now()))?;
    }
    for _ in 0..plan.rounds {
        let r = t.round()?;
        t.report.rounds.push(r);
    }
    t.close_all();
    Ok(t.report)
}

impl Thread<'_> {
    fn ramp(&mut self) -> io::Result<()> {
        let started = Instant::now();
        let mut events = Events::with_capacity(1024);
        loop {
            while self.in_flight < self.plan.handshakes.max(1)
                && self.conns.len() < self.plan.connections
                && Instant::now() < self.plan.ramp_deadline
            {
                self.open();
            }
            let all_tried = self.conns.len() >= self.plan.connections
                || Instant::now() >= self.plan.ramp_deadline;
            if all_tried && (self.in_flight == 0 || Instant::now() >= self.plan.ramp_deadline) {
                break;
            }
            self.poll_once(&mut events, Duration::from_millis(100))?;
        }
        self.report.ramp.secs = started.elapsed().as_secs_f64();
        // Whatever is still handshaking at the deadline failed.
        for i in 0..self.conns.len() {
            if matches!(self.conns[i].state, State::Connecting | State::Handshaking) {
                self.kill(i);
                self.report.ramp.failed += 1;
            }
        }
        self.report.ramp.failed += (self.plan.connections - self.conns.len()) as u64;
        Ok(())
    }

    fn open(&mut self) {
        let i = self.conns.len();
        let addr = self.plan.addrs[(self.plan.addr_offset + i) % self.plan.addrs.len()];
        let opened = TcpStream::connect(addr).and_then(|tcp| {
            let _ = tcp.set_nodelay(true);
            let mut s = match &self.tls {
                None => Stream::Plain(tcp),
                Some(c) => Stream::tls(c.ssl().map_err(io::Error::other)?, tcp)?,
            };
            self.poll.registry().register(
                s.tcp(),
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            Ok(s)
        });
        let (stream, state) = match opened {
            Ok(s) => {
                self.in_flight += 1;
                (Some(s), State::Connecting)
            }
            Err(_) => {
                self.report.ramp.failed += 1;
                (None, State::Dead)
            }
        };
        self.conns.push(Conn {
            stream,
            state,
            unsent: 0,
            waiting: false,
            reader: ResponseReader::default(),
            input: Vec::new(),
        });
    }

    fn poll_once(&mut self, events: &mut Events, timeout: Duration) -> io::Result<()> {
        match self.poll.poll(events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        for event in events.iter() {
            self.on_event(event.token().0);
        }
        Ok(())
    }

    /// Idle phase: only watches for connections the server drops.
    fn watch(&mut self, timeout: Duration) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        self.poll_once(&mut events, timeout.min(Duration::from_millis(100)))
    }

    fn on_event(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i) else {
            return;
        };
        let Some(stream) = c.stream.as_mut() else {
            return;
        };
        if let State::Connecting = c.state {
            let tcp = stream.tcp();
            match (tcp.take_error(), tcp.peer_addr()) {
                (Ok(None), Ok(_)) => c.state = State::Handshaking,
                (Ok(None), Err(e)) if e.kind() == io::ErrorKind::NotConnected => return,
                _ => return self.fail_handshake(i),
            }
        }
        if let State::Handshaking = c.state {
            match stream.handshake() {
                Ok(Handshake::Pending) => return,
                Ok(Handshake::Done) => {
                    c.state = State::Open;
                    self.in_flight -= 1;
                    self.report.ramp.established += 1;
                }
                Err(_) => return self.fail_handshake(i),
            }
        }
        if let State::Open = self.conns[i].state {
            if self.conns[i].waiting {
                self.pump(i);
            } else {
                self.check_idle(i);
            }
        }
    }

    fn fail_handshake(&mut self, i: usize) {
        self.in_flight -= 1;
        self.report.ramp.failed += 1;
        self.kill(i);
    }

    fn kill(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if let Some(mut s) = c.stream.take() {
            let _ = self.poll.registry().deregister(s.tcp());
            linger_zero(&mut s);
        }
        c.state = State::Dead;
        c.waiting = false;
        c.input = Vec::new();
    }

    /// An idle connection became readable: fine if it was only TLS session tickets (the read
    /// yields no data), a drop if the server closed it, reset it, or sent data unasked.
    fn check_idle(&mut self, i: usize) {
        let Some(stream) = self.conns[i].stream.as_mut() else {
            return;
        };
        loop {
            match stream.read(&mut self.scratch) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => {
                    self.report.dropped += 1;
                    return self.kill(i);
                }
            }
        }
    }

    fn round(&mut self) -> io::Result<RoundReport> {
        let start_us = unix_us();
        let len = self.plan.request.len();
        self.answered = 0;
        self.outstanding = 0;
        // Write on every connection first; responses are read afterwards.
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            if !matches!(c.state, State::Open) {
                continue;
            }
            c.unsent = len;
            c.waiting = true;
            c.reader = ResponseReader::default();
            self.outstanding += 1;
            self.flush(i);
        }
        let deadline = Instant::now() + self.plan.round_timeout;
        let mut events = Events::with_capacity(1024);
        while self.outstanding > 0 && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            self.poll_once(&mut events, left)?;
        }
        for c in self.conns.iter_mut() {
            c.waiting = false;
        }
        Ok(RoundReport {
            answered: self.answered,
            failed: self.plan.connections as u64 - self.answered,
            start_us,
            end_us: unix_us(),
        })
    }

    /// Writes the rest of this round's request; false if the connection died.
    fn flush(&mut self, i: usize) -> bool {
        let req = Arc::clone(&self.plan.request);
        let c = &mut self.conns[i];
        let Some(stream) = c.stream.as_mut() else {
            return false;
        };
        while c.unsent > 0 {
            match stream.write(&req[req.len() - c.unsent..]) {
                Ok(n) if n > 0 => c.unsent -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => {
                    self.resolve(i, false);
                    self.kill(i);
                    return false;
                }
            }
        }
        true
    }

    /// Ends connection `i`'s wait for this round's response.
    fn resolve(&mut self, i: usize, answered: bool) {
        if std::mem::replace(&mut self.conns[i].waiting, false) {
            self.outstanding -= 1;
            self.answered += u64::from(answered);
        }
    }

    /// Round phase: writes what is left and reads this round's response.
    fn pump(&mut self, i: usize) {
        if !self.flush(i) {
            return;
        }
        loop {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            let n = match stream.read(&mut self.scratch) {
                Ok(0) => {
                    let done = c.reader.eof();
                    self.resolve(i, done.is_some_and(|d| (200..300).contains(&d.status)));
                    return self.kill(i);
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.resolve(i, false);
                    return self.kill(i);
                }
            };
            c.input.extend_from_slice(&self.scratch[..n]);
            let mut pos = 0;
            loop {
                match c.reader.feed(&c.input[pos..], false) {
                    Ok((used, None)) => {
                        pos += used;
                        if used == 0 || pos == c.input.len() {
                            break;
                        }
                    }
                    Ok((_, Some(done))) => {
                        // One request per round: nothing can follow this response.
                        c.input = Vec::new();
                        let ok = (200..300).contains(&done.status);
                        let close = done.close;
                        self.resolve(i, ok);
                        if close {
                            self.kill(i);
                        }
                        return;
                    }
                    Err(_) => {
                        self.resolve(i, false);
                        return self.kill(i);
                    }
                }
            }
            c.input.drain(..pos);
        }
    }

    /// Closes everything with a reset, so no TIME_WAIT state keeps ports busy for the next run.
    fn close_all(&mut self) {
        for i in 0..self.conns.len() {
            self.kill(i);
        }
    }
}

fn linger_zero(stream: &mut Stream) {
    let _ = socket2::SockRef::from(&*stream.tcp()).set_linger(Some(Duration::ZERO));
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}
