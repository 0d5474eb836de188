//! tls-perf: a TLS handshake benchmark with the command line and report of
//! tempesta-tech/tls-perf. See docs/TLS-PERF.md.
//!
//! Exit status: 0 the run finished and the report was printed; 1 it could not start;
//! 2 bad command line; 3 the run stopped because the server stopped answering (report
//! printed).
#![forbid(unsafe_code)]

mod cli;
mod error;
mod monitor;
mod peer;
mod report;
mod rlimit;
mod stats;
mod tls;
mod worker;

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use clap::Parser;
use openssl::ssl::SslContext;
use tls_perf::procstat;

use cli::{Args, Tickets};
use error::StartError;
use monitor::{EndReason, Monitor, RunRecord};
use stats::Shared;
use worker::{Latencies, WorkerConfig, WorkerResult};

/// Descriptors the tool needs besides its peers: std streams, one epoll per thread, the key
/// log, /proc reads, and a margin for the sockets a worker closes while opening new ones.
const EXTRA_DESCRIPTORS_PER_THREAD: u64 = 4;
const EXTRA_DESCRIPTORS: u64 = 32;

/// Where human-readable lines go: stdout, or stderr when stdout carries the JSON report.
#[derive(Clone, Copy)]
pub struct Output {
    to_stderr: bool,
}

impl Output {
    pub fn line(&self, text: &str) {
        if self.to_stderr {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }
}

fn main() -> ExitCode {
    let examples = [
        ("tls-perf -l 100 -t 2 -T 10 127.0.0.1 8443", "Full TLS handshakes for 10 seconds from 2 threads, 100 in flight: handshakes per second."),
        ("tls-perf --tickets on -l 100 -t 2 -T 10 --sni example.com 127.0.0.1 8443", "The same resuming sessions with tickets, asking for example.com."),
    ];
    let command = <Args as clap::CommandFactory>::command;
    if let Some(code) = tls_perf::man::print_if_asked(command, &examples) {
        return code;
    }
    // Parse errors and --help exit here (status 2 and 0).
    let args = Args::parse();
    match run(&args) {
        Ok(EndReason::ServerDown) => ExitCode::from(3),
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ERROR: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<EndReason, StartError> {
    let out = Output {
        to_stderr: args.json,
    };
    check_descriptors(args)?;
    if let Some(pid) = args.server_pid {
        procstat::cpu_seconds(pid).map_err(|source| StartError::ServerPid { pid, source })?;
    }
    let key_log = args
        .keylogfile
        .as_deref()
        .map(tls::open_key_log)
        .transpose()?;
    // Every context is built before any thread starts, so option errors come first.
    let contexts = (0..args.threads)
        .map(|_| tls::build_context(args, key_log.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    if !args.quiet {
        print_settings(args, out);
    }
    let signalled = register_signals()?;
    let shared = Arc::new(Shared::new(args.threads, args.handshakes));
    let handles = spawn_workers(args, contexts, &shared)?;
    let record = Monitor {
        shared: &shared,
        signalled: &signalled,
        duration: args.seconds.map(Duration::from_secs),
        server_pid: args.server_pid,
        quiet: args.quiet,
        out,
    }
    .watch();
    let (measured, ramp_up) = join_workers(handles);
    let latencies = if measured.is_empty() {
        &ramp_up
    } else {
        &measured
    };
    print_report(args, &record, &shared, latencies);
    Ok(record.end)
}

/// SIGINT and SIGTERM set the returned flag; a second signal while the first is being
/// handled kills the process at once.
fn register_signals() -> Result<Arc<AtomicBool>, StartError> {
    let signalled = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&signalled))
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&signalled)))
            .map_err(StartError::Signals)?;
    }
    Ok(signalled)
}

/// One worker thread per context; if one cannot start, those already started are told to
/// stop.
fn spawn_workers(
    args: &Args,
    contexts: Vec<SslContext>,
    shared: &Arc<Shared>,
) -> Result<Vec<JoinHandle<io::Result<WorkerResult>>>, StartError> {
    let mut handles = Vec::with_capacity(contexts.len());
    for (index, ctx) in contexts.into_iter().enumerate() {
        let config = WorkerConfig {
            index,
            peers: args.peers,
            target: args.target(),
            sni: args.sni.clone(),
            resume: args.tickets == Tickets::On,
            debug: args.debug,
        };
        let worker_shared = Arc::clone(shared);
        let handle = std::thread::Builder::new()
            .name(format!("tls-perf-{index}"))
            .spawn(move || worker::run(config, ctx, worker_shared));
        match handle {
            Ok(handle) => handles.push(handle),
            Err(e) => {
                shared
                    .stop
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                return Err(StartError::Thread(e));
            }
        }
    }
    Ok(handles)
}

/// Waits for every worker and adds up their latencies: (measured, ramp-up).
fn join_workers(handles: Vec<JoinHandle<io::Result<WorkerResult>>>) -> (Latencies, Latencies) {
    let mut measured = worker::new_latencies();
    let mut ramp_up = worker::new_latencies();
    for handle in handles {
        match handle.join() {
            Ok(Ok(result)) => {
                // Both histograms have the same bounds, so adding cannot fail.
                let _ = measured.add(&result.measured);
                let _ = ramp_up.add(&result.ramp_up);
            }
            Ok(Err(e)) => eprintln!("ERROR: a worker's event loop failed: {e}"),
            Err(_) => eprintln!("ERROR: a worker thread panicked"),
        }
    }
    (measured, ramp_up)
}

/// The warnings about how the run ended, then the report, as text or JSON.
fn print_report(args: &Args, record: &RunRecord, shared: &Shared, latencies: &Latencies) {
    if !record.measuring_started {
        eprintln!(
            "WARNING: not enough statistics collected: the run ended before all {} peers were \
             active",
            args.total_peers()
        );
    }
    if record.end == EndReason::ServerDown {
        eprintln!(
            "ERROR: stopping: for {} seconds every connection failed and none completed a \
             handshake; is the server at {} running?",
            monitor::DEAD_SERVER_SECONDS,
            args.target()
        );
    }
    let report = report::build(record, &shared.totals(), latencies, args.server_pid);
    if args.json {
        let json = serde_json::to_string_pretty(&report).unwrap_or_default();
        println!("{json}");
    } else {
        print!("{}", report::text(&report));
    }
    let _ = std::io::stdout().flush();
}

/// Raises the soft descriptor limit to the hard one and refuses to start if the peers still
/// would not fit: running out of descriptors mid-run would look like server errors.
fn check_descriptors(args: &Args) -> Result<(), StartError> {
    let limit = rlimit::raise_file_limit();
    let needed = args.total_peers()
        + u64::from(args.threads) * EXTRA_DESCRIPTORS_PER_THREAD
        + EXTRA_DESCRIPTORS;
    if needed > limit.soft {
        return Err(StartError::Descriptors {
            needed,
            soft: limit.soft,
            hard: limit.hard,
        });
    }
    Ok(())
}

/// Upstream's settings block.
fn print_settings(args: &Args, out: Output) {
    let target = args.target();
    out.line("Running TLS benchmark with following settings:");
    out.line(&format!("Host:        {} : {}", target.ip(), target.port()));
    out.line(&format!("TLS version: {}", args.tls.describe()));
    out.line(&format!(
        "Cipher:      {}",
        args.ciphers.as_deref().unwrap_or("default")
    ));
    out.line(&format!("TLS tickets: {}", args.tickets.name()));
    out.line(&format!("Duration:    {}", args.seconds.unwrap_or(0)));
    out.line("");
}
