//! The fault scenarios. Each starts an origin and the server, warms it up, takes the
//! baseline sample, runs the load with its fault, and returns the figures with the
//! expectation written before the run. The CI test and the bench call the same functions;
//! only `Params` differ.

use std::net::SocketAddr;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::driver::{H1Load, H2Load};
use super::fault_origin::{FaultOrigin, Mode, BODY, SLOW_BODY};
use super::isolation::MemCgroup;
pub use super::netns::{mtu80_loss1, mtu80_loss5, mtu80_netns};
use super::report::{Expect, Report};
use super::server::{self, Kind, Server, Spec, HOST};

/// How long and how hard a scenario runs.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub kind: Kind,
    /// The faulted load's duration.
    pub secs: u64,
    /// Requests a second over HTTP/1.1 keep-alive and over HTTP/2.
    pub h1_rate: u32,
    pub h2_rate: u32,
}

impl Params {
    /// A few seconds each: the CI test.
    pub fn ci(kind: Kind) -> Params {
        Params {
            kind,
            secs: 3,
            h1_rate: 60,
            h2_rate: 40,
        }
    }
}

/// What a fault does while the load runs.
pub struct Ctx<'a> {
    pub origin: &'a FaultOrigin,
    pub server: &'a mut Server,
    pub params: Params,
    /// A server that took over (the hot upgrade's new instance): sampled at the end instead.
    pub successor: Option<u32>,
    pub notes: Vec<String>,
    pub crashes: Vec<String>,
}

/// Options of a run beyond the fault itself.
pub(super) struct Run {
    pub(super) name: &'static str,
    pub(super) expect: Expect,
    /// Loads at these fractions of the params' rates (the slow origin holds each request
    /// for seconds).
    pub(super) rate_scale: (u32, u32),
    pub(super) answer_timeout: Duration,
    pub(super) spec: Spec,
    /// Each HTTP/1.1 request on a connection of its own too (accepting new connections is
    /// what the fault tests).
    pub(super) also_close_each: bool,
    /// The origin's mode for the whole measured load (set after the warm-up).
    pub(super) mode: Mode,
    /// Client connections of each load: the most requests in flight at once (HTTP/2: each
    /// carries up to 16 streams).
    pub(super) h1_connections: usize,
    pub(super) h2_connections: u32,
}

impl Run {
    pub(super) fn new(name: &'static str, p: &Params, origin: &FaultOrigin, expect: Expect) -> Run {
        Run {
            name,
            expect,
            rate_scale: (1, 1),
            answer_timeout: Duration::from_secs(10),
            spec: Spec::new(p.kind, origin.addr()),
            also_close_each: false,
            mode: Mode::Normal,
            h1_connections: 64,
            h2_connections: 2,
        }
    }
}

fn loads(p: &Params, run: &Run, server: &Server, secs: u64) -> (H1Load, H2Load) {
    let (num, den) = run.rate_scale;
    let h1 = H1Load {
        addr: server.http,
        host: HOST.into(),
        rate: (p.h1_rate * num / den).max(2),
        duration: Duration::from_secs(secs),
        connections: run.h1_connections,
        answer_timeout: run.answer_timeout,
        close_each: false,
        expect_body: if run.mode == Mode::Slow {
            SLOW_BODY
        } else {
            BODY
        }
        .to_vec(),
        mix: None,
        window: None,
    };
    let h2 = H2Load {
        addr: server.https,
        authority: HOST.into(),
        rate: (p.h2_rate * num / den).max(2),
        duration: Duration::from_secs(secs),
        connections: run.h2_connections,
        answer_timeout: run.answer_timeout,
        body_len: h1.expect_body.len(),
        mix: None,
        window: None,
    };
    (h1, h2)
}

/// The server's end sample, once its descriptors are back to `baseline` or 5 s have passed.
/// A connection whose last segments a loss scenario dropped closes only when TCP gives up
/// retransmitting them (the timeout backs off past a second), after the load's clients
/// are done: so the end is waited for, bounded, and the wait is noted. A descriptor that
/// stays open 5 s after everything closed is still reported.
fn settled_sample(pid: u32, baseline: u64, notes: &mut Vec<String>) -> server::Sample {
    let started = Instant::now();
    let mut sample = server::sample_tree(pid);
    while sample.fds > baseline && started.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(100));
        sample = server::sample_tree(pid);
    }
    let waited = started.elapsed().as_millis();
    if sample.fds > baseline {
        notes.push(format!(
            "descriptors still above the baseline {waited} ms after the first end sample"
        ));
    } else if waited >= 100 {
        notes.push(format!(
            "descriptors settled {waited} ms after the first end sample"
        ));
    }
    sample
}

/// Runs the load with `fault` acting on this thread meanwhile; the report.
pub(super) fn measure(
    p: &Params,
    run: Run,
    origin: &FaultOrigin,
    fault: impl FnOnce(&mut Ctx),
) -> Report {
    let mut server = Server::start(&run.spec);
    // Warm-up: connections, pools and allocator arenas as under load; then the origin drops
    // its connections so that the proxy's idle pool is not part of either sample.
    let (h1, h2) = loads(p, &run, &server, 1);
    let (w1, w2) = (h1.start(), h2.start());
    let _ = (w1.finish(), w2.finish().0);
    origin.drop_connections();
    thread::sleep(Duration::from_millis(500));
    let before = server.sample();
    let origin_before = origin.completed();
    origin.set_mode(run.mode);

    let (h1, h2) = loads(p, &run, &server, p.secs);
    let close_each = run.also_close_each.then(|| {
        let mut c = h1.clone();
        c.close_each = true;
        c.rate = (c.rate / 2).max(2);
        c.connections = 16;
        c.start()
    });
    let (r1, r2) = (h1.start(), h2.start());
    let mut ctx = Ctx {
        origin,
        server: &mut server,
        params: *p,
        successor: None,
        notes: Vec::new(),
        crashes: Vec::new(),
    };
    fault(&mut ctx);
    let (successor, mut notes, mut crashes) = (ctx.successor, ctx.notes, ctx.crashes);
    let mut h1 = r1.finish();
    if let Some(c) = close_each {
        h1.add(&c.finish());
    }
    let (h2, why) = r2.finish();
    notes.extend(why);
    let origin_completed = origin.completed() - origin_before;

    origin.set_mode(Mode::Normal);
    origin.drop_connections();
    thread::sleep(Duration::from_millis(700));
    let after = settled_sample(successor.unwrap_or(server.pid()), before.fds, &mut notes);
    if successor.is_none() && !server.alive() {
        crashes.push(format!("{} is not running at the end", server.kind.name()));
    }
    crashes.extend(server.crash_signs());
    if let Some(pid) = successor {
        // A graceful stop: nginx's workers would outlive a master killed outright.
        crate::send_signal(pid, libc::SIGTERM);
        if !wait_until(Duration::from_secs(10), || !running(pid)) {
            crate::send_signal(pid, libc::SIGKILL);
        }
    }
    Report {
        scenario: run.name,
        server: p.kind.name(),
        secs: p.secs,
        h1,
        h2,
        origin_completed,
        before,
        after,
        crashes,
        notes,
        expect: run.expect,
        soak: None,
    }
}

/// When the HTTP/1.1 502s of a dead origin began and ended, from the kill and the revival:
/// the time the server took to notice and to take the origin back.
fn recovery_note(timeline: &[(Instant, u16)], killed: Instant, revived: Instant) -> String {
    let at = |t: &Instant| t.saturating_duration_since(killed).as_secs_f64();
    let failed: Vec<f64> = timeline
        .iter()
        .filter(|(_, s)| *s != 200)
        .map(|(t, _)| at(t))
        .collect();
    let first = failed.iter().copied().fold(f64::INFINITY, f64::min);
    let last = failed.iter().copied().fold(0.0, f64::max);
    format!(
        "origin down from 0 to {:.1} s: HTTP/1.1 requests scheduled from {first:.1} s to {last:.1} s \
         were not 200 ({} of them); {:.1} s from the revival to the last",
        at(&revived),
        failed.len(),
        last - at(&revived)
    )
}

fn loopback_origin() -> FaultOrigin {
    FaultOrigin::start(SocketAddr::from(([127, 0, 0, 1], 0)))
}

pub(super) fn sleep_secs(secs: f64) {
    thread::sleep(Duration::from_secs_f64(secs));
}

/// The origin dies (its listener and every connection at once, responses half-written
/// included) a third into the load and comes back a third later. Right: 200 while it lives,
/// 502 while it is down (connect refused), a response cut only if the origin had begun it,
/// nothing hanging, every response the origin finished delivered.
pub fn origin_killed(p: &Params) -> Report {
    let origin = loopback_origin();
    let mut expect = Expect::statuses(&[200, 502]);
    // Set once the kill shows how many responses were under way.
    expect.max_cut = 0;
    let run = Run::new("origin_killed", p, &origin, expect);
    let mut down = None;
    let mut report = measure(p, run, &origin, |ctx| {
        let third = ctx.params.secs as f64 / 3.0;
        sleep_secs(third);
        let (read, done) = (ctx.origin.requests(), ctx.origin.completed());
        let killed = Instant::now();
        ctx.origin.kill();
        ctx.notes.push(format!("in_flight_at_kill={}", read - done));
        sleep_secs(third);
        ctx.origin.revive();
        down = Some((killed, Instant::now()));
    });
    report.expect.max_cut = report
        .notes
        .iter()
        .find_map(|n| n.strip_prefix("in_flight_at_kill="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if let Some((killed, revived)) = down {
        report
            .notes
            .push(recovery_note(&report.h1.timeline, killed, revived));
    }
    report
}

/// The origin sends the head, then the body at one byte a second. Right: every request
/// answered 200 with the whole body: a moving response is never cut
/// (`server_forward_timeout` is a time without progress); a tenth of the rate over more
/// connections, since each request is held for seconds. The proxy keeps at most `conns_n`
/// (32) upstream connections per worker, so 64 such responses at once, 16 a second: above
/// that (the bench's 30 a second) the rest wait in the group's queue and hold the clients'
/// connections meanwhile, and the bench counts what the clients could not send then.
pub fn origin_slow(p: &Params) -> Report {
    let origin = loopback_origin();
    let mut run = Run::new("origin_slow", p, &origin, Expect::statuses(&[200]));
    run.mode = Mode::Slow;
    run.rate_scale = (1, 10);
    run.h1_connections = 128;
    run.h2_connections = 8;
    run.answer_timeout = Duration::from_secs(30);
    measure(p, run, &origin, |ctx| sleep_secs(ctx.params.secs as f64))
}

/// The origin resets every connection after reading the request. Right: 502 for each (after
/// the retries of an idempotent request), nothing lost or hanging.
pub fn origin_resetting(p: &Params) -> Report {
    let origin = loopback_origin();
    let mut run = Run::new("origin_resetting", p, &origin, Expect::statuses(&[502]));
    run.mode = Mode::Reset;
    measure(p, run, &origin, |ctx| sleep_secs(ctx.params.secs as f64))
}

/// The origin answers bytes that are no HTTP, then closes. Right: 502 for each.
pub fn origin_garbage(p: &Params) -> Report {
    let origin = loopback_origin();
    let mut run = Run::new("origin_garbage", p, &origin, Expect::statuses(&[502]));
    run.mode = Mode::Garbage;
    measure(p, run, &origin, |ctx| sleep_secs(ctx.params.secs as f64))
}

/// The origin answers ten times slower (50 ms to the head, 50 more to the end). Right: every
/// request 200, the extra requests in flight queued, not refused.
pub fn origin_latency_10x(p: &Params) -> Report {
    let origin = loopback_origin();
    let mut run = Run::new("origin_latency_10x", p, &origin, Expect::statuses(&[200]));
    run.mode = Mode::Latency10x;
    measure(p, run, &origin, |ctx| sleep_secs(ctx.params.secs as f64))
}

/// SIGHUP (reload) every 100 ms while the load runs. Right: every request 200, none lost.
pub fn reload_every_100ms(p: &Params) -> Report {
    let origin = loopback_origin();
    let run = Run::new("reload_every_100ms", p, &origin, Expect::statuses(&[200]));
    measure(p, run, &origin, |ctx| {
        let end = Instant::now() + Duration::from_secs(ctx.params.secs);
        let mut n = 0;
        while Instant::now() < end {
            ctx.server.reload();
            n += 1;
            thread::sleep(Duration::from_millis(100));
        }
        ctx.notes.push(format!("{n} reloads"));
    })
}

/// The documented hot upgrade under load (OPERATIONS.md): a new instance on the same
/// configuration (`--upgrade`), then `-s quit` of the old one. Right: every request 200, none
/// lost, the old instance gone cleanly. The proxy's only: nginx ignores its upgrade signal
/// (USR2) unless its parent is init, i.e. daemonized, and this harness keeps every server a
/// child that it stops by pid.
pub fn hot_upgrade(p: &Params) -> Report {
    let origin = loopback_origin();
    let run = Run::new("hot_upgrade", p, &origin, Expect::statuses(&[200]));
    measure(p, run, &origin, |ctx| {
        sleep_secs(ctx.params.secs as f64 / 3.0);
        ctx.successor = upgrade_proxy(ctx);
        sleep_secs(ctx.params.secs as f64 / 3.0);
    })
}

fn upgrade_proxy(ctx: &mut Ctx) -> Option<u32> {
    let mut cmd = Command::new(crate::bin_path("proxy"));
    cmd.arg("-c").arg(&ctx.server.config).arg("--upgrade");
    // Not a `Proc`: it must outlive this function; `measure` kills it by pid at the end.
    let log = std::fs::File::create(ctx.server.dir.join("successor.log")).ok()?;
    let err = log.try_clone().ok()?;
    let child = cmd.stdout(log).stderr(err).spawn().ok()?;
    let pid = child.id();
    let log_path = ctx.server.dir.join("successor.log");
    let started = wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log_path).is_ok_and(|t| t.contains("serving with"))
    });
    if !started {
        ctx.crashes.push("the new instance did not start".into());
    }
    let out = crate::proxy_cmd(&ctx.server.config, &["-s", "quit"]);
    if !out.status.success() {
        ctx.crashes
            .push(format!("-s quit: {}", crate::output_text(&out)));
    }
    match ctx.server.proc.wait_exit(Duration::from_secs(20)) {
        Some(s) if s.success() => {}
        other => ctx
            .crashes
            .push(format!("the old instance ended with {other:?}")),
    }
    // Reaped by this thread so that no zombie is left once `measure` kills it.
    thread::spawn(move || {
        let mut child = child;
        let _ = child.wait();
    });
    Some(pid)
}

/// Whether `pid` runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        !s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A sixth into the load (its connections open by then), each server process's soft
/// descriptor limit lowered (prlimit) to what it has open plus 24, then 64 idle connections
/// opened to it, held for half the load and closed, the limits restored. Right: the
/// connections open before go on being served; requests on new connections wait in the
/// accept queue and are served once descriptors are free again (or answered 502/503 when no
/// upstream connection can be opened; a request may also wait in its group's queue for an
/// upstream connection, within server_forward_timeout), nothing lost or hanging, no crash,
/// and the descriptors back to the baseline. Lowered at the load's start instead, the
/// limit raced the load's first connections: those that came after the 64 idle ones waited
/// out the exhaustion, and the count of not sent followed how many came first (issue 38).
pub fn fd_exhaustion(p: &Params) -> Report {
    let origin = loopback_origin();
    let mut run = Run::new(
        "fd_exhaustion",
        p,
        &origin,
        Expect::statuses(&[200, 502, 503]),
    );
    run.also_close_each = true;
    // A request may wait in the proxy's group queue for the whole exhaustion (at most
    // server_forward_timeout, 60 s): the bound covers that and 15 s more.
    run.answer_timeout = Duration::from_secs(p.secs / 2 + 15);
    measure(p, run, &origin, |ctx| {
        let secs = ctx.params.secs as f64;
        sleep_secs(secs / 6.0);
        // Per process: nginx's master holds none of the connections, its worker all.
        let limits: Vec<(u32, u64)> = server::tree(ctx.server.pid())
            .into_iter()
            .map(|pid| (pid, open_fds(pid) + 24))
            .collect();
        let before = soft_nofile(ctx.server.pid());
        for (pid, limit) in &limits {
            set_soft_nofile(ctx, *pid, &limit.to_string());
        }
        let holders: Vec<_> = (0..64)
            .filter_map(|_| {
                std::net::TcpStream::connect_timeout(&ctx.server.http, Duration::from_secs(2)).ok()
            })
            .collect();
        sleep_secs(secs / 2.0);
        let at_limit = ctx.server.sample().fds;
        let shown: Vec<String> = limits.iter().map(|(_, l)| l.to_string()).collect();
        ctx.notes.push(format!(
            "limit {} (per process), {} idle connections held, {at_limit} descriptors open then",
            shown.join("/"),
            holders.len()
        ));
        // Recovery: the idle connections go and the limit is what it was.
        drop(holders);
        for (pid, _) in &limits {
            set_soft_nofile(ctx, *pid, &before);
        }
        sleep_secs(secs - secs / 6.0 - secs / 2.0);
    })
}

/// The soft limit only: raising it back needs no privilege (a container may lack
/// CAP_SYS_RESOURCE, which raising the hard limit needs).
fn set_soft_nofile(ctx: &mut Ctx, pid: u32, soft: &str) {
    let status = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={soft}:"))
        .status();
    if !status.is_ok_and(|s| s.success()) {
        ctx.notes
            .push(format!("prlimit --nofile={soft}: on {pid} failed"));
    }
}

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// The soft descriptor limit of `pid`, as /proc shows it.
fn soft_nofile(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        .unwrap_or_else(|| "1024".into())
}

/// The server in a memory cgroup (v1) whose limit is set, after the warm-up, to its peak
/// usage then plus an eighth. Right: every request 200, the OOM killer kills nothing.
pub fn memcg_limit(p: &Params) -> Report {
    let cg = match MemCgroup::create() {
        Ok(cg) => cg,
        Err(e) => panic!("the memory cgroup of memcg_limit: {e}"),
    };
    let origin = loopback_origin();
    let mut run = Run::new("memcg_limit", p, &origin, Expect::statuses(&[200]));
    run.spec.prefix = cg.exec_prefix();
    let mut report = measure(p, run, &origin, |ctx| {
        let peak = cg.max_usage();
        let limit = peak + peak / 8;
        if let Err(e) = cg.set_limit(limit) {
            ctx.crashes.push(format!("cannot set the limit: {e}"));
        }
        sleep_secs(ctx.params.secs as f64);
        ctx.notes.push(format!(
            "limit {} KiB (peak after warm-up {} KiB), usage at the end {} KiB, limit hit {} times",
            limit / 1024,
            peak / 1024,
            cg.usage() / 1024,
            cg.failcnt()
        ));
    });
    let kills = cg.oom_kills();
    if kills > 0 {
        report
            .crashes
            .push(format!("{kills} processes killed by the OOM killer"));
    }
    report
}

/// A scenario: its figures for the params given.
pub type Scenario = fn(&Params) -> Report;

/// Every scenario by name, in the order of the table.
pub const ALL: &[(&str, Scenario)] = &[
    ("origin_killed", origin_killed),
    ("origin_slow", origin_slow),
    ("origin_resetting", origin_resetting),
    ("origin_garbage", origin_garbage),
    ("origin_latency_10x", origin_latency_10x),
    ("reload_every_100ms", reload_every_100ms),
    ("hot_upgrade", hot_upgrade),
    ("fd_exhaustion", fd_exhaustion),
    ("mtu80_netns", mtu80_netns),
    ("mtu80_loss1", mtu80_loss1),
    ("mtu80_loss5", mtu80_loss5),
    ("memcg_limit", memcg_limit),
];

/// Whether a scenario is run against nginx too: all but the hot upgrade (see there).
pub fn applies_to_nginx(name: &str) -> bool {
    name != "hot_upgrade"
}
