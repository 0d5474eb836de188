//! Hold mode (`--hold N`), the C10K/C100K gate: ramp N connections, hold them idle, run
//! request rounds, and judge PASS/FAIL. Above `--conns-per-process` connections the work is
//! spread over child processes of this binary (the descriptor limit is per process), whose
//! reports are merged here.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};

use serde::Serialize;

use crate::cli::Args;
use crate::hold_conn::{HoldReport, RampReport, RoundReport};
use crate::hold_group::{self, ChildLine};
use crate::{probe, PerfError, Setup};

/// The destinations connections are spread over: `--addrs`, or the single target address.
pub fn destinations(args: &Args, setup: &Setup) -> Result<Vec<SocketAddr>, PerfError> {
    match &args.addrs {
        Some(list) => {
            let addrs = crate::target::parse_addrs(list, setup.addr.port())?;
            if addrs.is_empty() {
                return Err(PerfError::Usage("--addrs lists no address".into()));
            }
            Ok(addrs)
        }
        None => Ok(vec![setup.addr]),
    }
}

/// The server's memory before the ramp and with every connection open.
#[derive(Debug, Serialize, Clone, Copy)]
struct ServerMemory {
    pid: u32,
    baseline_bytes: u64,
    loaded_bytes: u64,
    bytes_per_connection: u64,
}

impl ServerMemory {
    /// The server's memory, when its pid was given and both readings were made.
    fn new(baseline: Option<(u32, u64)>, loaded: Option<u64>, established: u64) -> Option<Self> {
        match (baseline, loaded) {
            (Some((pid, base)), Some(with)) => Some(ServerMemory {
                pid,
                baseline_bytes: base,
                loaded_bytes: with,
                bytes_per_connection: with.saturating_sub(base) / established.max(1),
            }),
            _ => None,
        }
    }
}

#[derive(Serialize)]
struct RoundJson {
    answered: u64,
    failed: u64,
    secs: f64,
    rps: f64,
}

impl RoundJson {
    fn new(r: &RoundReport) -> Self {
        let secs = (r.end_us.saturating_sub(r.start_us)) as f64 / 1e6;
        RoundJson {
            answered: r.answered,
            failed: r.failed,
            secs,
            rps: r.answered as f64 / secs.max(1e-6),
        }
    }
}

#[derive(Serialize)]
struct HoldJson<'a> {
    mode: &'static str,
    url: &'a str,
    connections: usize,
    processes: usize,
    threads_per_process: usize,
    addrs: Vec<String>,
    established: u64,
    ramp_failed: u64,
    /// Of `ramp_failed`: QUIC handshakes not done within --handshake-timeout.
    handshake_timeouts: u64,
    ramp_secs: f64,
    idle_secs: u64,
    dropped: u64,
    rounds: Vec<RoundJson>,
    server: Option<ServerMemory>,
    pass: bool,
    failures: Vec<String>,
}

pub fn run(args: &Args) -> Result<bool, PerfError> {
    let total = args.hold.unwrap_or(0);
    if total == 0 || args.threads == 0 || args.conns_per_process == 0 {
        return Err(PerfError::Usage(
            "--hold, -t and --conns-per-process must be above 0".into(),
        ));
    }
    let setup = Setup::from_args(args)?;
    let addrs = destinations(args, &setup)?;
    let h3 = hold_group::hold_h3_plan(args, &setup)?;
    for a in &addrs {
        match &h3 {
            Some(plan) => crate::h3::probe(*a, plan, args.timeout).map_err(PerfError::H3)?,
            None => probe(*a, args.timeout)?,
        }
    }
    let memory = |pid| tls_perf::procstat::memory_bytes(pid).unwrap_or(0);
    let baseline = args.server_pid.map(|pid| (pid, memory(pid)));
    let processes = total.div_ceil(args.conns_per_process);
    let addr_list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    if !args.json {
        println!("Hold test @ {}", args.url);
        println!(
            "  {total} connections over {} ({processes} process(es) x {} threads, {} handshakes in flight per thread)",
            addr_list.join(", "),
            args.threads,
            args.handshakes
        );
    }
    let mut loaded = None;
    let measure = |_: &RampReport| baseline.map(|(pid, _)| memory(pid));
    let report = if processes == 1 {
        hold_group::run_group(args, &setup, &addrs, total, 0, |ramp| {
            loaded = measure(ramp);
        })?
    } else {
        let (report, mem) = run_children(processes, &measure)?;
        loaded = mem;
        report
    };
    let server = ServerMemory::new(baseline, loaded, report.ramp.established);
    let failures = judge(args, total, &report, server);
    let rounds: Vec<RoundJson> = report.rounds.iter().map(RoundJson::new).collect();
    let json = HoldJson {
        mode: "hold",
        url: &args.url,
        connections: total,
        processes,
        threads_per_process: args.threads,
        addrs: addr_list,
        established: report.ramp.established,
        ramp_failed: report.ramp.failed,
        handshake_timeouts: report.ramp.timed_out,
        ramp_secs: report.ramp.secs,
        idle_secs: args.hold_secs,
        dropped: report.dropped,
        rounds,
        server,
        pass: failures.is_empty(),
        failures,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json).unwrap_or_default()
        );
    } else {
        print_text(&json);
    }
    Ok(json.pass)
}

fn print_text(j: &HoldJson) {
    println!(
        "  Ramp:       {} established, {} failed ({} QUIC handshakes timed out) in {:.2}s",
        j.established, j.ramp_failed, j.handshake_timeouts, j.ramp_secs
    );
    println!("  Idle hold:  {}s, {} dropped", j.idle_secs, j.dropped);
    for (i, r) in j.rounds.iter().enumerate() {
        println!(
            "  Round {}:    {}/{} answered, {} failed, {:.0} rps ({:.2}s)",
            i + 1,
            r.answered,
            j.connections,
            r.failed,
            r.rps,
            r.secs
        );
    }
    if let Some(s) = j.server {
        println!(
            "  Server:     pid {}, memory {:.1} MiB idle, {:.1} MiB with connections open, {} B per connection",
            s.pid,
            s.baseline_bytes as f64 / 1048576.0,
            s.loaded_bytes as f64 / 1048576.0,
            s.bytes_per_connection
        );
    }
    if j.pass {
        println!("PASS");
    } else {
        println!("FAIL: {}", j.failures.join("; "));
    }
}

/// The gate: all established, none dropped, every request of every round answered, the ramp
/// within its limit, and (when given) memory per connection within its limit.
fn judge(args: &Args, total: usize, r: &HoldReport, server: Option<ServerMemory>) -> Vec<String> {
    let mut fail = Vec::new();
    if r.ramp.established < total as u64 {
        let cut = match r.ramp.timed_out {
            0 => String::new(),
            n => format!(
                " ({n} QUIC handshakes not done within {:?})",
                args.handshake_timeout
            ),
        };
        fail.push(format!(
            "{} of {total} connections established{cut}",
            r.ramp.established
        ));
    }
    if r.ramp.secs > args.ramp_limit.as_secs_f64() {
        fail.push(format!(
            "ramp took {:.1}s, limit {:.0}s",
            r.ramp.secs,
            args.ramp_limit.as_secs_f64()
        ));
    }
    if r.dropped > 0 {
        fail.push(format!("{} connections dropped while idle", r.dropped));
    }
    if r.rounds.len() < args.rounds {
        fail.push(format!("{} of {} rounds ran", r.rounds.len(), args.rounds));
    }
    for (i, round) in r.rounds.iter().enumerate() {
        if round.answered < total as u64 {
            fail.push(format!(
                "round {}: {} of {total} requests answered",
                i + 1,
                round.answered
            ));
        }
    }
    if let (Some(limit), Some(s)) = (args.max_mem_per_conn, server) {
        if s.bytes_per_connection > limit {
            fail.push(format!(
                "server memory {} B per connection, limit {limit} B",
                s.bytes_per_connection
            ));
        }
    }
    fail
}

struct ChildProc {
    child: Child,
    stdin: ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

/// Runs `count` child processes, each with its share; measures the server once all ramped.
fn run_children(
    count: usize,
    measure: &dyn Fn(&RampReport) -> Option<u64>,
) -> Result<(HoldReport, Option<u64>), PerfError> {
    let exe = std::env::current_exe().map_err(|e| PerfError::Child(e.to_string()))?;
    let mut children = Vec::new();
    for i in 0..count {
        let mut child = Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .arg("--hold-child")
            .arg(format!("{i}/{count}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| PerfError::Child(format!("cannot start: {e}")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(PerfError::Child("no pipes to the child".into()));
        };
        children.push(ChildProc {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        });
    }
    let mut total = HoldReport::default();
    for c in children.iter_mut() {
        match read_line(c)? {
            ChildLine::Ramped(r) => total.ramp.add(&r),
            ChildLine::Done(_) => return Err(PerfError::Child("finished before its ramp".into())),
        }
    }
    let loaded = measure(&total.ramp);
    for c in children.iter_mut() {
        let _ = writeln!(c.stdin, "go");
        let _ = c.stdin.flush();
    }
    for c in children.iter_mut() {
        match read_line(c)? {
            ChildLine::Done(r) => {
                total.dropped += r.dropped;
                hold_group::merge_rounds(&mut total.rounds, &r.rounds);
            }
            ChildLine::Ramped(_) => return Err(PerfError::Child("reported its ramp twice".into())),
        }
    }
    for mut c in children {
        drop(c.stdin);
        let _ = c.child.wait();
    }
    Ok((total, loaded))
}

fn read_line(c: &mut ChildProc) -> Result<ChildLine, PerfError> {
    let pid = c.child.id();
    match c.lines.next() {
        Some(Ok(line)) => serde_json::from_str(&line)
            .map_err(|e| PerfError::Child(format!("pid {pid} printed `{line}`: {e}"))),
        _ => Err(PerfError::Child(format!(
            "pid {pid} exited early (see its messages above)"
        ))),
    }
}
