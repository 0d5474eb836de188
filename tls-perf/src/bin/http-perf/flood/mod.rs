//! `http-perf --h2-flood KIND`: HTTP/2 flood attacks against a server (the proxy or
//! nginx), with what the server answered, when it closed each flooding connection, and
//! (with `--server-pid`) its memory sampled over the run. See docs/HTTP-PERF.md.

mod attack;
mod conn;
mod reader;
mod report;
pub(crate) mod rss;
pub(crate) mod wire;

use std::time::Duration;

pub use attack::FloodKind;

use crate::cli::Args;
use crate::{probe, PerfError, Setup};
use attack::Target;
use conn::FloodPlan;
use reader::Tally;

/// Runs the flood the command line asks for; Ok(false) when no connection could flood
/// (the server refused, or did not speak HTTP/2).
pub fn run(args: &Args, kind: FloodKind) -> Result<bool, PerfError> {
    let setup = Setup::from_args(args)?;
    if args.threads == 0 || args.connections == 0 {
        return Err(PerfError::Usage(
            "--h2-flood needs at least one connection (-c) and one thread (-t)".into(),
        ));
    }
    probe(setup.addr, args.timeout)?;
    let threads = args.threads.min(args.connections);
    let target = Target {
        scheme: if setup.url.tls { "https" } else { "http" },
        authority: setup.url.host_header(),
        path: setup.url.path.clone(),
    };
    let sampler = args.server_pid.map(rss::Sampler::start);
    let started = std::time::Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let plan = FloodPlan {
                addr: setup.addr,
                tls: setup.tls.as_ref().map(|(sni, _)| sni.clone()),
                kind,
                target: target.clone(),
                connections: args.connections / threads
                    + usize::from(i < args.connections % threads),
                duration: args.duration,
                reconnect: args.reconnect,
                timeout: args.timeout.max(Duration::from_secs(1)),
            };
            std::thread::spawn(move || conn::run(&plan))
        })
        .collect();
    let mut tally = Tally::default();
    for h in handles {
        match h.join() {
            Ok(Ok(t)) => tally.add(&t),
            Ok(Err(e)) => return Err(PerfError::Thread(e.to_string())),
            Err(_) => return Err(PerfError::Thread("panicked".into())),
        }
    }
    let elapsed = started.elapsed();
    let memory = sampler.map(rss::Sampler::finish);
    let report = report::FloodReport {
        url: &args.url,
        kind,
        connections: args.connections,
        reconnect: args.reconnect,
        elapsed,
        tally: &tally,
        memory: memory.as_ref(),
    };
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    Ok(tally.flooded > 0)
}
