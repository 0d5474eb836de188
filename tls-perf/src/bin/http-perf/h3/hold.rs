//! `--hold N --h3`: one hold-mode thread over QUIC, as `hold_conn` is over TCP: ramp its
//! connections (a bounded number of QUIC handshakes in flight, each cut as failed after
//! `--handshake-timeout`, so that the ramp goes on), keep them idle while
//! serving their QUIC timers and watching for connections the server ends, then run
//! rounds of one request on every connection. The report is the TCP hold's, so the gate,
//! the JSON and the child processes are shared (`hold.rs`, `hold_group.rs`).

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::{Events, Interest, Poll, Token};

use super::conn::{Done, H3Conn, State};
use super::H3Plan;
use crate::hold_conn::{HoldPlan, HoldReport, RampReport, RoundReport};

struct Thread<'a> {
    plan: &'a HoldPlan,
    h3: &'a H3Plan,
    poll: Poll,
    /// None: never established, or ended.
    conns: Vec<Option<Box<H3Conn>>>,
    report: HoldReport,
    in_flight: usize,
    /// The connections opened during the ramp, oldest first: those still handshaking
    /// at their deadline are cut.
    opened: VecDeque<usize>,
    /// Responses of the current round (2xx ones counted in `answered`).
    answered: u64,
    responses: u64,
    /// After the ramp, a connection that ends is a drop.
    ramped: bool,
    scratch: Vec<u8>,
    done: Vec<Done>,
}

/// Runs the thread; sends the ramp result on `ramped`, then waits for `go` before the idle
/// hold.
pub fn run(
    plan: &HoldPlan,
    h3: &H3Plan,
    ramped: Sender<RampReport>,
    go: &AtomicBool,
) -> io::Result<HoldReport> {
    let mut t = Thread {
        plan,
        h3,
        poll: Poll::new()?,
        conns: Vec::with_capacity(plan.connections),
        report: HoldReport::default(),
        in_flight: 0,
        opened: VecDeque::new(),
        answered: 0,
        responses: 0,
        ramped: false,
        scratch: vec![0; 65_535],
        done: Vec::new(),
    };
    t.ramp()?;
    let _ = ramped.send(t.report.ramp);
    t.ramped = true;
    while !go.load(Ordering::Acquire) {
        t.watch(Instant::now() + Duration::from_millis(50))?;
    }
    let idle_end = Instant::now() + plan.idle;
    while Instant::now() < idle_end {
        t.watch(idle_end)?;
    }
    for _ in 0..plan.rounds {
        let r = t.round()?;
        t.report.rounds.push(r);
    }
    for c in t.conns.iter_mut().flatten() {
        c.close();
    }
    Ok(t.report)
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Thread<'_> {
    fn ramp(&mut self) -> io::Result<()> {
        let started = Instant::now();
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
            self.watch(Instant::now() + Duration::from_millis(100))?;
            self.cut_late_handshakes();
        }
        self.report.ramp.secs = started.elapsed().as_secs_f64();
        // Whatever is still handshaking at the deadline failed.
        for slot in &mut self.conns {
            if slot.as_ref().is_some_and(|c| c.state == State::Handshaking) {
                if let Some(mut c) = slot.take() {
                    c.close();
                }
                self.report.ramp.failed += 1;
            }
        }
        self.report.ramp.failed += (self.plan.connections - self.conns.len()) as u64;
        Ok(())
    }

    fn open(&mut self) {
        let i = self.conns.len();
        let addr = self.plan.addrs[(self.plan.addr_offset + i) % self.plan.addrs.len()];
        let opened = H3Conn::open(addr, &self.h3.config, &self.h3.server_name).and_then(|mut c| {
            self.poll
                .registry()
                .register(&mut c.socket, Token(i), Interest::READABLE)?;
            c.flush();
            Ok(Box::new(c))
        });
        match opened {
            Ok(c) => {
                self.in_flight += 1;
                self.opened.push_back(i);
                self.conns.push(Some(c));
            }
            Err(_) => {
                self.report.ramp.failed += 1;
                self.conns.push(None);
            }
        }
    }

    /// Ends, as failed, the handshakes begun `quic_handshake_timeout` ago or more and not
    /// done: a handshake whose datagram the server lost for good would otherwise wait for
    /// the ramp's limit (its QUIC idle timeout is longer still).
    fn cut_late_handshakes(&mut self) {
        let now = Instant::now();
        while let Some(&i) = self.opened.front() {
            let late = match self.conns.get(i).and_then(Option::as_ref) {
                Some(c) if c.state == State::Handshaking => {
                    now.saturating_duration_since(c.since) >= self.plan.quic_handshake_timeout
                }
                // Established or ended: no longer in flight here.
                _ => true,
            };
            if !late {
                return;
            }
            self.opened.pop_front();
            let Some(mut c) = self.conns[i].take_if(|c| c.state == State::Handshaking) else {
                continue;
            };
            c.close();
            let _ = self.poll.registry().deregister(&mut c.socket);
            self.in_flight -= 1;
            self.report.ramp.failed += 1;
            self.report.ramp.timed_out += 1;
        }
    }

    /// Waits for datagrams or a QUIC deadline, until `until` at the latest, and handles
    /// what came.
    fn watch(&mut self, until: Instant) -> io::Result<()> {
        let now = Instant::now();
        let mut wake = until;
        for c in self.conns.iter_mut().flatten() {
            if let Some(at) = c.deadline() {
                wake = wake.min(at);
            }
        }
        let mut events = Events::with_capacity(1024);
        match self
            .poll
            .poll(&mut events, Some(wake.saturating_duration_since(now)))
        {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        for event in events.iter() {
            let i = event.token().0;
            if let Some(Some(c)) = self.conns.get_mut(i) {
                let got = c.recv(&mut self.scratch);
                self.turn(i, got.is_err());
            }
        }
        let now = Instant::now();
        for i in 0..self.conns.len() {
            if let Some(c) = self.conns[i].as_mut() {
                if c.deadline().is_some_and(|at| at <= now) {
                    c.on_timeout(now);
                    self.turn(i, false);
                }
            }
        }
        Ok(())
    }

    /// Connection `i`'s turn: its handshake's end, its responses, what it sends; `failed`:
    /// its socket failed.
    fn turn(&mut self, i: usize, failed: bool) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        let was = c.state;
        let driven = match failed {
            true => Err(String::new()),
            false => c.drive(&mut self.done),
        };
        for d in self.done.drain(..) {
            self.responses += 1;
            if (200..300).contains(&d.status) {
                self.answered += 1;
            }
        }
        let now_ready = c.state == State::Ready && was == State::Handshaking;
        if driven.is_err() {
            // Requests of this round it held will get no answer.
            self.responses += c.outstanding() as u64;
            if was == State::Handshaking {
                self.in_flight -= 1;
                self.report.ramp.failed += 1;
            } else if self.ramped {
                self.report.dropped += 1;
            }
            if let Some(mut c) = self.conns[i].take() {
                let _ = self.poll.registry().deregister(&mut c.socket);
            }
            return;
        }
        if now_ready {
            self.in_flight -= 1;
            self.report.ramp.established += 1;
        }
        c.send_requests(&self.h3.frame);
        c.flush();
    }

    /// One request on every open connection, all sent before any answer is awaited.
    fn round(&mut self) -> io::Result<RoundReport> {
        let start_us = now_us();
        let (answered, responses) = (self.answered, self.responses);
        let mut asked = 0u64;
        for c in self.conns.iter_mut().flatten() {
            c.request(0);
            c.send_requests(&self.h3.frame);
            c.flush();
            asked += 1;
        }
        let deadline = Instant::now() + self.plan.round_timeout;
        while self.responses - responses < asked && Instant::now() < deadline {
            self.watch(deadline)?;
        }
        let got = self.answered - answered;
        Ok(RoundReport {
            answered: got,
            failed: self.plan.connections as u64 - got,
            start_us,
            end_us: now_us(),
        })
    }
}
