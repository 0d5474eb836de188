//! One `--h3` load thread: a mio loop over its QUIC connections (each on its own UDP
//! socket), up to `--pipeline` request streams in flight on each, a new request as soon as
//! a response completes (closed loop) or at a constant rate with latency from the intended
//! send time (`--rate`, as the TCP modes do), quinn-proto's timers armed through the poll's
//! timeout.

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};

use super::conn::{Done, H3Conn, State};
use crate::load::{LoadPlan, ThreadResult};
use crate::pacer::Pacer;

const TICK: Duration = Duration::from_millis(100);
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);

/// A connection slot: its connection, or the time to open the next one.
enum Slot {
    Open(Box<H3Conn>),
    Paused(Instant),
}

pub fn run(plan: &LoadPlan, h3: &super::H3Plan) -> io::Result<ThreadResult> {
    Thread::new(plan, h3)?.run()
}

struct Thread<'a> {
    plan: &'a LoadPlan,
    h3: &'a super::H3Plan,
    poll: Poll,
    slots: Vec<Slot>,
    start: Instant,
    result: ThreadResult,
    /// Rate mode: connections that can take one more request, and when the next is due.
    free: VecDeque<usize>,
    listed: Vec<bool>,
    next_due: Duration,
    pacer: Option<Pacer>,
    scratch: Vec<u8>,
    done: Vec<Done>,
}

impl<'a> Thread<'a> {
    fn new(plan: &'a LoadPlan, h3: &'a super::H3Plan) -> io::Result<Thread<'a>> {
        let latency = Histogram::new_with_bounds(1, 3_600_000_000, 3).map_err(io::Error::other)?;
        let now = Instant::now();
        Ok(Thread {
            plan,
            h3,
            poll: Poll::new()?,
            slots: Vec::new(),
            start: now,
            result: ThreadResult::new(latency),
            free: VecDeque::new(),
            listed: vec![false; plan.connections],
            next_due: Duration::ZERO,
            pacer: None,
            scratch: vec![0; 65_535],
            done: Vec::new(),
        })
    }

    fn run(mut self) -> io::Result<ThreadResult> {
        if self.plan.rate.is_some() {
            self.pacer = Some(Pacer::new(self.poll.registry())?);
        }
        for i in 0..self.plan.connections {
            self.slots.push(Slot::Paused(Instant::now()));
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
                    (_, Token(i)) => self.on_readable(i),
                }
            }
            self.on_deadlines(Instant::now());
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
        for slot in &mut self.slots {
            if let Slot::Open(c) = slot {
                c.close();
            }
        }
        Ok(self.result)
    }

    /// The earliest of `tick`, the connections' QUIC deadlines and (rate mode) the next
    /// request due, which the pacer's timer wakes us for.
    fn wake_at(&mut self, now: Instant, tick: Instant) -> io::Result<Instant> {
        let mut wake = tick;
        for slot in &mut self.slots {
            if let Slot::Open(c) = slot {
                if let Some(at) = c.deadline() {
                    wake = wake.min(at);
                }
            }
        }
        if let (Some(pacer), false) = (&self.pacer, self.free.is_empty()) {
            let due = self.start + self.next_due;
            if due <= now {
                return Ok(now);
            }
            if due < wake {
                pacer.arm(due - now)?;
            }
        }
        Ok(wake)
    }

    fn unfinished(&self) -> u64 {
        let Some(rate) = self.plan.rate else { return 0 };
        let elapsed = self.result.elapsed;
        let due_unsent = if self.next_due <= elapsed {
            (elapsed - self.next_due).as_secs_f64() * rate + 1.0
        } else {
            0.0
        };
        let in_flight: usize = self.slots.iter().map(outstanding).sum();
        due_unsent as u64 + in_flight as u64
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// (Re)opens connection `i` on a new socket; a failure is a connect error and a pause.
    fn connect(&mut self, i: usize) {
        if let Slot::Open(mut old) =
            std::mem::replace(&mut self.slots[i], Slot::Paused(Instant::now()))
        {
            old.close();
            let _ = self.poll.registry().deregister(&mut old.socket);
        }
        let opened = H3Conn::open(self.plan.addr, &self.h3.config, &self.h3.server_name).and_then(
            |mut c| {
                self.poll
                    .registry()
                    .register(&mut c.socket, Token(i), Interest::READABLE)?;
                Ok(c)
            },
        );
        match opened {
            Ok(mut c) => {
                c.flush();
                self.slots[i] = Slot::Open(Box::new(c));
            }
            Err(e) => {
                self.note(format!("cannot open a QUIC connection: {e}"));
                self.result.errors.connect += 1;
                self.slots[i] = Slot::Paused(Instant::now() + RECONNECT_PAUSE);
            }
        }
    }

    /// Keeps the first error's words for the report.
    fn note(&mut self, why: String) {
        self.result.first_error.get_or_insert(why);
    }

    /// Connection `i` ended with `why`: counted by its stage, then replaced.
    fn fail(&mut self, i: usize, why: String) {
        match &self.slots[i] {
            Slot::Open(c) if c.state == State::Handshaking => self.result.errors.connect += 1,
            _ => self.result.errors.read += 1,
        }
        self.note(why);
        self.connect(i);
    }

    fn on_readable(&mut self, i: usize) {
        let Some(Slot::Open(c)) = self.slots.get_mut(i) else {
            return;
        };
        let before = c.received;
        let got = c.recv(&mut self.scratch);
        self.result.bytes += c.received - before;
        if let Err(e) = got {
            return self.fail(i, format!("no QUIC server at udp {}: {e}", self.plan.addr));
        }
        self.turn(i);
    }

    /// Handles the QUIC deadlines that came due.
    fn on_deadlines(&mut self, now: Instant) {
        for i in 0..self.slots.len() {
            if let Slot::Open(c) = &mut self.slots[i] {
                if c.deadline().is_some_and(|at| at <= now) {
                    c.on_timeout(now);
                    self.turn(i);
                }
            }
        }
    }

    /// One turn of connection `i`: what it received, the responses completed, the next
    /// requests, and what it has to send.
    fn turn(&mut self, i: usize) {
        let Slot::Open(c) = &mut self.slots[i] else {
            return;
        };
        let was_ready = c.state == State::Ready;
        let mut done = std::mem::take(&mut self.done);
        let driven = c.drive(&mut done);
        let ready = c.state == State::Ready;
        for d in done.drain(..) {
            self.complete(d);
            if self.plan.rate.is_some() {
                self.offer(i);
            } else {
                self.queue(i, self.now_ns());
            }
        }
        self.done = done;
        if let Err(why) = driven {
            return self.fail(i, why);
        }
        if ready && !was_ready {
            self.on_ready(i);
        }
        if let Slot::Open(c) = &mut self.slots[i] {
            c.send_requests(&self.h3.frame);
            c.flush();
        }
    }

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
        if let Slot::Open(c) = &mut self.slots[i] {
            c.request(start_ns);
        }
    }

    fn offer(&mut self, i: usize) {
        let room = match &self.slots[i] {
            Slot::Open(c) => c.state == State::Ready && c.outstanding() < self.plan.pipeline,
            Slot::Paused(_) => false,
        };
        if room && !self.listed[i] {
            self.listed[i] = true;
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
            self.listed[i] = false;
            let Slot::Open(c) = &mut self.slots[i] else {
                continue;
            };
            if c.state != State::Ready {
                continue;
            }
            c.request(self.next_due.as_nanos() as u64);
            c.send_requests(&self.h3.frame);
            c.flush();
            self.next_due += interval;
            self.offer(i);
        }
    }

    fn complete(&mut self, d: Done) {
        let us = self.now_ns().saturating_sub(d.start_ns) / 1000;
        self.result.latency.saturating_record(us.max(1));
        self.result.requests += 1;
        *self.result.body_bytes.get_or_insert(0) += d.body;
        if !(200..400).contains(&d.status) {
            self.result.non_2xx_3xx += 1;
        }
    }

    /// Every tick: reopen paused connections, time out stuck ones.
    fn check_timers(&mut self, now: Instant) {
        let timeout = self.plan.timeout;
        for i in 0..self.slots.len() {
            let stuck = match &self.slots[i] {
                Slot::Paused(until) => {
                    if now >= *until {
                        self.connect(i);
                    }
                    continue;
                }
                Slot::Open(c) => match c.state {
                    State::Handshaking => now - c.since > timeout,
                    State::Ready => c.outstanding() > 0 && now - c.busy_since > timeout,
                },
            };
            if stuck {
                self.result.errors.timeout += 1;
                self.note(format!("no QUIC progress within {timeout:?}"));
                self.connect(i);
            }
        }
    }
}

fn outstanding(slot: &Slot) -> usize {
    match slot {
        Slot::Open(c) => c.outstanding(),
        Slot::Paused(_) => 0,
    }
}
