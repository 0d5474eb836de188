//! One process's share of a hold test: its threads, the ramp barrier, and (as a child of the
//! coordinating http-perf) the line protocol on stdin/stdout:
//!
//!   child -> parent: {"ramped": RampReport}        once every thread finished its ramp
//!   parent -> child: "go"                            after measuring the server's memory
//!   child -> parent: {"done": HoldReport}            after the idle hold and the rounds
//!
//! A child exits as soon as its stdin closes, so killing the parent stops the children.

use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cli::Args;
use crate::hold_conn::{self, HoldPlan, HoldReport, RampReport, RoundReport};
use crate::{PerfError, Setup};

/// The messages a child prints.
#[derive(Serialize, Deserialize)]
pub enum ChildLine {
    #[serde(rename = "ramped")]
    Ramped(RampReport),
    #[serde(rename = "done")]
    Done(HoldReport),
}

/// Runs `connections` held connections in this process over `args.threads` threads; calls
/// `after_ramp` once all have ramped, before the idle hold starts.
pub fn run_group(
    args: &Args,
    setup: &Setup,
    addrs: &[std::net::SocketAddr],
    connections: usize,
    addr_offset: usize,
    after_ramp: impl FnOnce(&RampReport),
) -> Result<HoldReport, PerfError> {
    let threads = args.threads.clamp(1, connections.max(1));
    let go = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let ramp_deadline = Instant::now() + args.ramp_limit;
    let h3 = hold_h3_plan(args, setup)?.map(Arc::new);
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let plan = HoldPlan {
                addrs: addrs.to_vec(),
                addr_offset: addr_offset + i,
                tls: setup.tls.clone(),
                request: Arc::clone(&setup.request),
                connections: connections / threads + usize::from(i < connections % threads),
                handshakes: args.handshakes,
                ramp_deadline,
                quic_handshake_timeout: args.handshake_timeout,
                idle: Duration::from_secs(args.hold_secs),
                rounds: args.rounds,
                round_timeout: args.round_timeout,
                h3: h3.clone(),
            };
            let (tx, go) = (tx.clone(), Arc::clone(&go));
            std::thread::spawn(move || match plan.h3.clone() {
                Some(h3) => crate::h3::hold::run(&plan, &h3, tx, &go),
                None => hold_conn::run(&plan, tx, &go),
            })
        })
        .collect();
    drop(tx);
    let mut ramp = RampReport::default();
    // Ends early if a thread fails before its ramp report (its sender is dropped).
    for r in rx.iter().take(threads) {
        ramp.add(&r);
    }
    after_ramp(&ramp);
    go.store(true, Ordering::Release);
    let mut total = HoldReport {
        ramp,
        ..HoldReport::default()
    };
    for h in handles {
        let report = match h.join() {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(PerfError::Thread(e.to_string())),
            Err(_) => return Err(PerfError::Thread("a hold thread panicked".into())),
        };
        total.dropped += report.dropped;
        merge_rounds(&mut total.rounds, &report.rounds);
    }
    Ok(total)
}

/// `--hold --h3`: the interval of QUIC PINGs on held connections.
const HOLD_QUIC_PING: Duration = Duration::from_secs(10);

/// `--hold --h3`: the QUIC plan, its idle timeout longer than the whole hold (the ramp's
/// limit, the idle time and every round), so that only the server ends a connection, and a
/// QUIC PING every `HOLD_QUIC_PING`: idle at the HTTP level, but alive for a server whose
/// QUIC idle timeout is shorter than the hold (Caddy 2.6 closed every connection of a 40 s
/// hold without them: quic-go's default idle timeout is 30 s).
pub fn hold_h3_plan(args: &Args, setup: &Setup) -> Result<Option<crate::h3::H3Plan>, PerfError> {
    if !args.h3 {
        return Ok(None);
    }
    let idle = args.ramp_limit
        + Duration::from_secs(args.hold_secs)
        + args.round_timeout * args.rounds as u32
        + Duration::from_secs(60);
    crate::h3::H3Plan::new(setup, &args.headers, idle, Some(HOLD_QUIC_PING))
        .map(Some)
        .map_err(PerfError::Usage)
}

/// Adds the rounds of one thread or process to the totals.
pub fn merge_rounds(total: &mut Vec<RoundReport>, more: &[RoundReport]) {
    for (i, r) in more.iter().enumerate() {
        if total.len() <= i {
            total.push(*r);
            continue;
        }
        let t = &mut total[i];
        t.answered += r.answered;
        t.failed += r.failed;
        t.start_us = t.start_us.min(r.start_us);
        t.end_us = t.end_us.max(r.end_us);
    }
}

/// `--hold-child I/K`: this process's share of the connections, reported as JSON lines.
pub fn run_child(args: &Args) -> Result<bool, PerfError> {
    let spec = args.hold_child.as_deref().unwrap_or("");
    let (index, count) = spec
        .split_once('/')
        .and_then(|(i, k)| Some((i.parse::<usize>().ok()?, k.parse::<usize>().ok()?)))
        .filter(|(i, k)| i < k)
        .ok_or_else(|| PerfError::Usage(format!("--hold-child `{spec}`: expected I/K")))?;
    let total = args.hold.unwrap_or(0);
    let mine = total / count + usize::from(index < total % count);
    let setup = Setup::from_args(args)?;
    let addrs = crate::hold::destinations(args, &setup)?;
    let (go_tx, go_rx) = mpsc::channel::<()>();
    // Reads "go", then keeps reading so that the parent's death (EOF) ends this process.
    std::thread::spawn(move || {
        let stdin = io::stdin();
        let mut lines = stdin.lock().lines();
        let mut sent = false;
        loop {
            match lines.next() {
                Some(Ok(_)) if !sent => {
                    let _ = go_tx.send(());
                    sent = true;
                }
                Some(Ok(_)) => {}
                _ => std::process::exit(3),
            }
        }
    });
    let report = run_group(args, &setup, &addrs, mine, index, |ramp| {
        print_line(&ChildLine::Ramped(*ramp));
        let _ = go_rx.recv();
    })?;
    print_line(&ChildLine::Done(report));
    Ok(true)
}

fn print_line(line: &ChildLine) {
    let text = serde_json::to_string(line).unwrap_or_default();
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}
