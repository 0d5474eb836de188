//! The soak (issue 38, not in CI): no fault, the mix for a long time, counted by
//! window. HTTP/1.1 (two thirds of the requests) and HTTP/2 (one third), each 70 % to 16
//! cacheable paths (hits once stored) and 30 % to paths of their own that the origin answers
//! `no-store` (misses, through to the origin), and WebSocket sessions (one a second per 100
//! requests a second) of 10 echoed messages each, through the server to the origin's echo.
//! The rate is fixed, or a fraction of the highest rate of the mix this machine keeps
//! (`probe`). The server's RSS and descriptors are sampled at the end of every window; the
//! report (`soak_report.rs`) judges RSS drift, descriptor growth and p99 stability.

use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use super::driver::{Counts, H1Load, H2Load, Mix, Running, RunningH2};
use super::fault_origin::{FaultOrigin, BODY};
use super::report::{Expect, Report};
use super::server::{Kind, Sample, Server, Spec, HOST};
use super::soak_report::SoakFigures;
use super::window::Hist;
use super::ws_load::{RunningWs, WsLoad};

/// The paths of the mix.
pub const MIX: Mix = Mix {
    hit_pct: 70,
    cache_paths: 16,
};
/// HTTP/1.1's share of the requests (HTTP/2 the rest): the bench's 200 and 100 a second.
const H1_SHARE: f64 = 2.0 / 3.0;
/// WebSocket sessions begun a second per HTTP request a second.
const WS_PER_REQUEST: f64 = 0.01;
const WS_MESSAGES: u32 = 10;
/// The probe: steps of this long, from this total rate, each a quarter above the last.
const PROBE_STEP: Duration = Duration::from_secs(4);
const PROBE_FIRST: f64 = 300.0;
const PROBE_GROWTH: f64 = 1.25;
const PROBE_STEPS: u32 = 24;
/// A step holds when every request and session was answered whole and the p99 of each
/// protocol stayed under this.
const PROBE_P99_MS: f64 = 100.0;

/// How the soak runs.
#[derive(Clone, Copy, Debug)]
pub struct Soak {
    pub kind: Kind,
    pub secs: u64,
    /// Fixed rates, used when `rate_of_max` is not given.
    pub h1_rate: u32,
    pub h2_rate: u32,
    /// WebSocket sessions a second (default: one per 100 requests a second).
    pub ws_rate: Option<f64>,
    /// Run at this fraction of the highest rate of the mix (`max_rps`, or probed).
    pub rate_of_max: Option<f64>,
    pub max_rps: Option<f64>,
    /// The width of the report's windows.
    pub window: u64,
}

/// The rates of the three loads.
#[derive(Clone, Copy, Debug)]
struct Rates {
    h1: u32,
    h2: u32,
    ws: f64,
}

impl Rates {
    /// A total HTTP rate split by the mix's shares.
    fn of_total(total: f64, ws: Option<f64>) -> Rates {
        Rates {
            h1: ((total * H1_SHARE).round() as u32).max(2),
            h2: ((total * (1.0 - H1_SHARE)).round() as u32).max(2),
            ws: ws.unwrap_or((total * WS_PER_REQUEST).max(0.5)),
        }
    }
}

struct Loads {
    h1: Running,
    h2: RunningH2,
    ws: RunningWs,
}

/// What the three loads counted: HTTP/1.1, HTTP/2, WebSocket, and the h2 load's reasons.
struct Counted {
    h1: Counts,
    h2: Counts,
    ws: Counts,
    why: Vec<String>,
}

fn start_loads(
    addrs: (SocketAddr, SocketAddr),
    rates: Rates,
    secs: Duration,
    width: Duration,
) -> Loads {
    let answer_timeout = Duration::from_secs(10);
    let h1 = H1Load {
        addr: addrs.0,
        host: HOST.into(),
        rate: rates.h1,
        duration: secs,
        connections: 64,
        answer_timeout,
        close_each: false,
        expect_body: BODY.to_vec(),
        mix: Some(MIX),
        window: Some(width),
    };
    let h2 = H2Load {
        addr: addrs.1,
        authority: HOST.into(),
        rate: rates.h2,
        duration: secs,
        connections: 2,
        answer_timeout,
        body_len: BODY.len(),
        mix: Some(MIX),
        window: Some(width),
    };
    let ws = WsLoad {
        addr: addrs.0,
        host: HOST.into(),
        rate: rates.ws,
        duration: secs,
        connections: 16,
        messages: WS_MESSAGES,
        answer_timeout,
        window: width,
    };
    Loads {
        h1: h1.start(),
        h2: h2.start(),
        ws: ws.start(),
    }
}

impl Loads {
    fn finish(self) -> Counted {
        let h1 = self.h1.finish();
        let ws = self.ws.finish();
        let (h2, why) = self.h2.finish();
        Counted { h1, h2, ws, why }
    }
}

/// Why a probe step did not hold (None: it held).
fn step_failed(c: &Counted) -> Option<String> {
    for (proto, counts, ok) in [("h1", &c.h1, 200), ("h2", &c.h2, 200), ("ws", &c.ws, 101)] {
        let whole = counts.status(ok);
        if whole < counts.sent || counts.not_sent > 0 || counts.sent == 0 {
            return Some(format!(
                "{proto} {whole} of {} sent whole, {} not sent",
                counts.sent, counts.not_sent
            ));
        }
        let mut all = Hist::default();
        for w in counts.windows.values() {
            all.add(&w.latency);
        }
        match all.quantile_ms(0.99) {
            Some(ms) if ms > PROBE_P99_MS => return Some(format!("{proto} p99 {ms:.1} ms")),
            _ => {}
        }
    }
    None
}

/// The highest total rate of the mix that held a step (see `PROBE_P99_MS`), rising from
/// `PROBE_FIRST` by `PROBE_GROWTH`; the steps in `notes`.
fn probe(addrs: (SocketAddr, SocketAddr), ws: Option<f64>, notes: &mut Vec<String>) -> f64 {
    let mut rate = PROBE_FIRST;
    let mut held = None;
    let mut steps = Vec::new();
    for _ in 0..PROBE_STEPS {
        let counted =
            start_loads(addrs, Rates::of_total(rate, ws), PROBE_STEP, PROBE_STEP).finish();
        let failed = step_failed(&counted);
        steps.push(format!(
            "{rate:.0}/s {}",
            failed.as_deref().unwrap_or("held")
        ));
        if failed.is_some() {
            break;
        }
        held = Some(rate);
        rate *= PROBE_GROWTH;
        thread::sleep(Duration::from_millis(500));
    }
    notes.push(format!(
        "max probe ({} s steps, a quarter up each): {}",
        PROBE_STEP.as_secs(),
        steps.join(", ")
    ));
    held.unwrap_or(PROBE_FIRST)
}

/// The rates of the run: fixed, or the fraction of the maximum asked for (probed when not
/// given); what was chosen in `notes`.
fn choose_rates(s: &Soak, addrs: (SocketAddr, SocketAddr), notes: &mut Vec<String>) -> Rates {
    let rates = match s.rate_of_max {
        Some(fraction) => {
            let max = s.max_rps.unwrap_or_else(|| probe(addrs, s.ws_rate, notes));
            notes.push(format!("max {max:.0} requests/s, run at {fraction} of it"));
            Rates::of_total(max * fraction, s.ws_rate)
        }
        None => Rates {
            h1: s.h1_rate,
            h2: s.h2_rate,
            ws: s
                .ws_rate
                .unwrap_or((f64::from(s.h1_rate + s.h2_rate) * WS_PER_REQUEST).max(0.5)),
        },
    };
    notes.push(format!(
        "rates: {} HTTP/1.1 + {} HTTP/2 requests/s ({} % to {} cacheable paths), {:.1} WebSocket sessions/s of {WS_MESSAGES} messages",
        rates.h1, rates.h2, MIX.hit_pct, MIX.cache_paths, rates.ws
    ));
    rates
}

/// The server's samples at the end of each window of the load started now.
fn sample_windows(server: &Server, s: &Soak) -> Vec<Sample> {
    let width = Duration::from_secs(s.window.max(1));
    let total = Duration::from_secs(s.secs);
    let start = Instant::now();
    let mut samples = Vec::new();
    for i in 1..=s.secs.div_ceil(s.window.max(1)) {
        let at = start + (width * i as u32).min(total);
        thread::sleep(at.saturating_duration_since(Instant::now()));
        samples.push(server.sample());
    }
    samples
}

/// The soak against `s.kind`.
pub fn soak(s: &Soak) -> Report {
    let origin = FaultOrigin::start(SocketAddr::from(([127, 0, 0, 1], 0)));
    let mut spec = Spec::new(s.kind, origin.addr());
    spec.mix = true;
    let mut server = Server::start(&spec);
    let addrs = (server.http, server.https);
    let mut notes = Vec::new();
    // Warm-up: connections, pools, the cache's entries and allocator arenas.
    let _ = start_loads(
        addrs,
        Rates::of_total(150.0, None),
        Duration::from_secs(2),
        PROBE_STEP,
    )
    .finish();
    let rates = choose_rates(s, addrs, &mut notes);
    origin.drop_connections();
    thread::sleep(Duration::from_millis(500));
    let before = server.sample();
    let (completed, cacheable, websockets) =
        (origin.completed(), origin.cacheable(), origin.websockets());

    let width = Duration::from_secs(s.window.max(1));
    let loads = start_loads(addrs, rates, Duration::from_secs(s.secs), width);
    let samples = sample_windows(&server, s);
    let counted = loads.finish();
    notes.extend(counted.why);
    let origin_completed = origin.completed() - completed;
    let fills = origin.cacheable() - cacheable;
    let tunnels = origin.websockets() - websockets;

    origin.drop_connections();
    thread::sleep(Duration::from_millis(700));
    let after = server.sample();
    let mut crashes = server.crash_signs();
    if !server.alive() {
        crashes.push(format!("{} is not running at the end", server.kind.name()));
    }
    Report {
        scenario: "soak",
        server: s.kind.name(),
        secs: s.secs,
        h1: counted.h1,
        h2: counted.h2,
        origin_completed,
        before,
        after,
        crashes,
        notes,
        expect: Expect::statuses(&[200]),
        soak: Some(SoakFigures {
            window: s.window.max(1),
            warmup_windows: 1,
            ws: counted.ws,
            samples,
            origin_fills: fills,
            origin_websockets: tunnels,
        }),
    }
}
