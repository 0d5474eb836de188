//! The load of the fault scenarios: a fixed request rate, kept over HTTP/1.1 keep-alive
//! connections by this module and over HTTP/2 by python-hyper h2
//! (`tests/py/faults_h2_load.py`), with what became of every request counted: answered (by
//! status), cut (a response that began and ended early), lost (sent and never answered: the
//! connection ended without a response, or nothing came within the answer timeout), or not
//! sent (no connection could be opened, or the clients were a second behind their schedule).
//!
//! The HTTP/1.1 side is written here rather than taken from http-perf because a request's
//! fate has to be recorded one by one (http-perf counts errors by kind only) and because the
//! scenarios act while it runs. HTTP/2 is a real peer too, and not h2load, which stops a
//! client at the first GOAWAY (every reload and graceful stop sends one).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::window::{self, Clock, Windows};
use crate::rawclient::{get_with, Outcome, RawClient};
use crate::{Proc, TempDir};

/// What became of the requests of one protocol's load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    /// Complete responses by status.
    pub answered: BTreeMap<u16, u64>,
    /// Responses whose head came and whose body ended early (or differed from the origin's),
    /// and connections the server reset after the request (an aborted response).
    pub cut: u64,
    /// Sent, and the connection ended without a response.
    pub lost_closed: u64,
    /// Sent, and nothing came within the answer timeout: a hang.
    pub lost_timeout: u64,
    /// Not sent: no connection could be opened, or the schedule was a second behind.
    pub not_sent: u64,
    /// Requests sent again on a new connection because the server had closed a kept-alive
    /// connection before reading them (HTTP/1.1: the connection ended with no byte of a
    /// response; HTTP/2: streams above the last id of a GOAWAY, or REFUSED_STREAM), as
    /// RFC 9112 9.3.1 and RFC 9113 8.1.4 let a client; each counts once, by its final outcome.
    pub retried: u64,
    /// HTTP/1.1: every request's scheduled time and its status (0: no complete response);
    /// not kept when the load counts by window instead.
    pub timeline: Vec<(Instant, u16)>,
    /// The same outcomes by window of their scheduled time, with latencies (the soak's).
    pub windows: Windows,
}

impl Counts {
    pub fn answered_total(&self) -> u64 {
        self.answered.values().sum()
    }
    pub fn status(&self, status: u16) -> u64 {
        self.answered.get(&status).copied().unwrap_or(0)
    }
    pub fn lost(&self) -> u64 {
        self.lost_closed + self.lost_timeout
    }
    pub fn add(&mut self, other: &Counts) {
        self.sent += other.sent;
        for (s, n) in &other.answered {
            *self.answered.entry(*s).or_insert(0) += n;
        }
        self.cut += other.cut;
        self.lost_closed += other.lost_closed;
        self.lost_timeout += other.lost_timeout;
        self.not_sent += other.not_sent;
        self.retried += other.retried;
        self.timeline.extend_from_slice(&other.timeline);
        window::merge(&mut self.windows, &other.windows);
    }

    /// Sent, cut, lost and not sent so far: what a request changed, by difference.
    fn scalars(&self) -> [u64; 4] {
        [self.sent, self.cut, self.lost(), self.not_sent]
    }

    /// Counts a request scheduled at `due` (its outcome: the change from `before`, and its
    /// status, 0 for none) in its window, with its latency from when it was written.
    fn record_window(
        &mut self,
        clock: &Clock,
        due: Instant,
        before: [u64; 4],
        status: u16,
        sent: Instant,
    ) {
        let now = self.scalars();
        let w = self.windows.entry(clock.index(due)).or_default();
        w.sent += now[0] - before[0];
        w.cut += now[1] - before[1];
        w.lost += now[2] - before[2];
        w.not_sent += now[3] - before[3];
        if status != 0 {
            *w.answered.entry(status).or_insert(0) += 1;
            w.latency.record(sent.elapsed());
        }
    }
}

/// The soak's paths: `hit_pct` % of the requests to one of `cache_paths` paths that the
/// origin answers cacheable (`/cache/N`, hits once stored), the others to a path of their own
/// that it answers `no-store` (`/miss/...`, through to the origin every time).
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub hit_pct: u64,
    pub cache_paths: u64,
}

impl Mix {
    /// The path of request `n` of a load (`tag` keeps two loads' misses apart).
    pub fn path(&self, tag: &str, n: u64) -> String {
        if n % 100 < self.hit_pct {
            format!("/cache/{}", n % self.cache_paths.max(1))
        } else {
            format!("/miss/{tag}-{n}")
        }
    }
}

/// A fixed-rate HTTP/1.1 load.
#[derive(Clone, Debug)]
pub struct H1Load {
    pub addr: SocketAddr,
    pub host: String,
    pub rate: u32,
    pub duration: Duration,
    /// Client connections (each a thread): the most requests in flight at once.
    pub connections: usize,
    /// A request with no complete response after this long is lost (a hang).
    pub answer_timeout: Duration,
    /// A new connection for every request (`Connection: close`) instead of keep-alive.
    pub close_each: bool,
    /// The body a 200 must carry (a 200 with another body counts as cut).
    pub expect_body: Vec<u8>,
    /// The paths: `/` for every request without a mix.
    pub mix: Option<Mix>,
    /// Counts by window of this width from the load's start, instead of the timeline.
    pub window: Option<Duration>,
}

/// A load running in the background.
pub struct Running {
    workers: Vec<JoinHandle<Counts>>,
    scheduler: JoinHandle<u64>,
}

/// The longest a scheduled request may wait for a free connection before it counts as not
/// sent: the clients are behind, and sending it later would only hide that.
const MAX_BEHIND: Duration = Duration::from_secs(1);

impl H1Load {
    /// Starts the load; `finish` waits for its end.
    pub fn start(&self) -> Running {
        let (tx, rx) = mpsc::channel::<(Instant, u64)>();
        let rx = Arc::new(Mutex::new(rx));
        let start = Instant::now();
        let clock = self.window.map(|width| Clock { start, width });
        let workers = (0..self.connections.max(1))
            .map(|_| {
                let (rx, load) = (rx.clone(), self.clone());
                thread::spawn(move || load.worker(&rx, clock))
            })
            .collect();
        let (rate, duration) = (self.rate.max(1), self.duration);
        let scheduler = thread::spawn(move || {
            let interval = Duration::from_secs(1) / rate;
            let mut n: u32 = 0;
            loop {
                let due = start + interval * n;
                if due >= start + duration {
                    return u64::from(n);
                }
                thread::sleep(due.saturating_duration_since(Instant::now()));
                if tx.send((due, u64::from(n))).is_err() {
                    return u64::from(n);
                }
                n += 1;
            }
        });
        Running { workers, scheduler }
    }

    fn worker(&self, rx: &Mutex<mpsc::Receiver<(Instant, u64)>>, clock: Option<Clock>) -> Counts {
        let mut counts = Counts::default();
        let mut conn: Option<(RawClient, u32)> = None;
        let extra = if self.close_each {
            "Connection: close\r\n"
        } else {
            ""
        };
        let fixed = get_with("/", &self.host, extra);
        loop {
            let (due, n) = {
                let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(due) => due,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return counts,
                }
            };
            let before = counts.scalars();
            let behind = due.elapsed() > MAX_BEHIND;
            let sent = Instant::now();
            let status = if behind {
                counts.not_sent += 1;
                0
            } else {
                match self.mix {
                    Some(mix) => {
                        let request = get_with(&mix.path("h1", n), &self.host, extra);
                        self.one_request(&mut counts, &mut conn, &request)
                    }
                    None => self.one_request(&mut counts, &mut conn, &fixed),
                }
            };
            match &clock {
                Some(clock) => counts.record_window(clock, due, before, status, sent),
                None if !behind => counts.timeline.push((due, status)),
                None => {}
            }
        }
    }

    /// Sends one request (again on a new connection, at most twice, when a kept-alive one
    /// turns out closed before the server read it) and counts its outcome; its status (0:
    /// no complete response).
    fn one_request(
        &self,
        counts: &mut Counts,
        conn: &mut Option<(RawClient, u32)>,
        request: &[u8],
    ) -> u16 {
        for attempt in 0..3 {
            let (client, served) = match conn.as_mut() {
                Some(c) => c,
                None => match RawClient::connect(self.addr) {
                    Ok(c) => conn.insert((c, 0)),
                    Err(_) => {
                        if attempt == 0 {
                            counts.not_sent += 1;
                        } else {
                            counts.lost_closed += 1;
                        }
                        return 0;
                    }
                },
            };
            if attempt == 0 {
                counts.sent += 1;
            }
            let reused = *served > 0;
            let outcome = match client.send(request) {
                Ok(()) => client.read_response(self.answer_timeout),
                Err(e) => e,
            };
            let unread = matches!(outcome, Outcome::Closed | Outcome::Reset);
            if reused && unread && attempt < 2 {
                counts.retried += 1;
                *conn = None;
                continue;
            }
            if self.record(counts, &outcome) {
                *served += 1;
            } else {
                *conn = None;
            }
            return match &outcome {
                Outcome::Response(r) if counts.answered.contains_key(&r.status) => r.status,
                _ => 0,
            };
        }
        0
    }

    /// Counts `outcome`; whether the connection may carry the next request.
    fn record(&self, counts: &mut Counts, outcome: &Outcome) -> bool {
        match outcome {
            Outcome::Response(r) => {
                let announced = r.header("content-length").and_then(|v| v.parse().ok());
                let whole = announced.is_none_or(|len: usize| len == r.body.len());
                if !whole || (r.status == 200 && r.body != self.expect_body) {
                    counts.cut += 1;
                    return false;
                }
                *counts.answered.entry(r.status).or_insert(0) += 1;
                let closes = r
                    .header("connection")
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"));
                !(closes || self.close_each || announced.is_none())
            }
            Outcome::Timeout => {
                counts.lost_timeout += 1;
                false
            }
            // A reset after the request is an aborted response: the proxy resets an
            // HTTP/1.1 client whose response broke off mid-body (SO_LINGER 0, which also
            // drops what was still queued, the head included), so the client may see no
            // byte of it. It counts as cut, bounded by each scenario's `max_cut` (0 but where
            // the origin dies mid-response).
            Outcome::Reset => {
                counts.cut += 1;
                false
            }
            Outcome::Closed | Outcome::Error(_) => {
                counts.lost_closed += 1;
                false
            }
        }
    }
}

impl Running {
    /// Waits for the schedule to end and every request to be answered or given up.
    pub fn finish(self) -> Counts {
        let _ = self.scheduler.join();
        let mut total = Counts::default();
        for w in self.workers {
            if let Ok(c) = w.join() {
                total.add(&c);
            }
        }
        total
    }
}

/// A fixed-rate HTTP/2 load by `tests/py/faults_h2_load.py` (python-hyper h2 over TLS):
/// h2load stops a client at the first GOAWAY, which every reload and graceful stop sends, so
/// it cannot keep a rate through those scenarios; the script opens a new connection as a
/// browser does, and retries the streams the GOAWAY refused.
#[derive(Clone, Debug)]
pub struct H2Load {
    /// A TLS listener that offers h2.
    pub addr: SocketAddr,
    pub authority: String,
    pub rate: u32,
    pub duration: Duration,
    pub connections: u32,
    pub answer_timeout: Duration,
    /// The body length a 200 must carry.
    pub body_len: usize,
    /// As `H1Load`'s.
    pub mix: Option<Mix>,
    pub window: Option<Duration>,
}

/// The HTTP/2 load running in the background.
pub struct RunningH2 {
    proc: Proc,
    deadline: Instant,
    total: u64,
    _dir: TempDir,
}

impl H2Load {
    pub fn start(&self) -> RunningH2 {
        let dir = TempDir::new("faults-h2");
        let script = crate::workspace_root().join("tests/py/faults_h2_load.py");
        let mut cmd = Command::new("python3");
        cmd.arg(script)
            .arg(self.addr.ip().to_string())
            .arg(self.addr.port().to_string())
            .arg(&self.authority)
            .arg(self.rate.to_string())
            .arg(self.duration.as_secs_f64().to_string())
            .arg(self.connections.to_string())
            .arg(self.answer_timeout.as_secs_f64().to_string())
            .arg(self.body_len.to_string());
        if let (Some(mix), Some(width)) = (self.mix, self.window) {
            cmd.arg(mix.hit_pct.to_string())
                .arg(mix.cache_paths.to_string())
                .arg(width.as_secs_f64().to_string());
        }
        let proc = Proc::spawn("h2-load", cmd, dir.path());
        RunningH2 {
            proc,
            deadline: Instant::now()
                + self.duration
                + self.answer_timeout
                + Duration::from_secs(10),
            total: (self.duration.as_secs_f64() * f64::from(self.rate)) as u64,
            _dir: dir,
        }
    }
}

impl RunningH2 {
    /// Waits for the script's end (killed at its deadline) and reads its counts, with the
    /// first reasons it gives for requests lost or cut.
    pub fn finish(mut self) -> (Counts, Vec<String>) {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if self.proc.wait_exit(left).is_none() {
            self.proc.signal(libc::SIGKILL);
            let _ = self.proc.wait_exit(Duration::from_secs(5));
        }
        let out = self.proc.stdout();
        let Ok(v) = serde_json::from_str::<serde_json::Value>(out.trim()) else {
            // No report: it hung or failed; every request counts as unanswered.
            eprintln!("h2 load gave no report:\n{}", self.proc.logs());
            let counts = Counts {
                sent: self.total,
                lost_timeout: self.total,
                ..Counts::default()
            };
            return (counts, vec!["the h2 load gave no report".into()]);
        };
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let answered = v["answered"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(s, n)| Some((s.parse().ok()?, n.as_u64()?)))
                    .collect()
            })
            .unwrap_or_default();
        let why = self
            .proc
            .stderr()
            .lines()
            .take(5)
            .map(|l| format!("h2 {l}"))
            .collect();
        let counts = Counts {
            sent: n("sent"),
            answered,
            cut: n("cut"),
            lost_closed: n("lost_closed"),
            lost_timeout: n("lost_timeout"),
            not_sent: n("not_sent"),
            retried: n("retried"),
            timeline: Vec::new(),
            windows: window::from_json(&v["windows"]),
        };
        (counts, why)
    }
}
