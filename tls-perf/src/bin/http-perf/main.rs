//! `http-perf`: an HTTP/1.1 load generator with wrk's command line and report, HDR latency,
//! pipelining, constant-rate mode (coordinated omission corrected), HTTP/2 load (`--h2`),
//! HTTP/3 load over QUIC (`--h3`),
//! TLS with optional resumption, JSON output, a hold mode for C10K/C100K gates, and HTTP/2
//! flood attacks (`--h2-flood`). See docs/HTTP-PERF.md.

#![forbid(unsafe_code)]

mod chunked;
mod cli;
mod flood;
mod h2_session;
mod h3;
mod h3flood;
mod hold;
mod hold_conn;
mod hold_group;
mod hpack_status;
mod load;
mod load_conn;
mod pacer;
mod progress;
mod report;
mod response;
mod stream;
mod target;
mod tls;
mod units;

use std::fmt;
use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use cli::Args;
use target::{TargetError, Url};

/// Why http-perf could not run (a failed gate is not an error: it is a FAIL report).
#[derive(Debug)]
pub enum PerfError {
    Target(TargetError),
    Usage(String),
    Unreachable(SocketAddr, std::io::Error),
    Thread(String),
    Child(String),
    /// `--h3`: the probe connection found no HTTP/3 server, in words.
    H3(String),
}

impl fmt::Display for PerfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerfError::Target(e) => write!(f, "{e}"),
            PerfError::Usage(e) => write!(f, "{e}"),
            PerfError::Unreachable(addr, e) => write!(
                f,
                "unable to connect to {addr}: {e}; is the server running? (use --connect ADDR:PORT to connect elsewhere)"
            ),
            PerfError::Thread(e) => write!(f, "a load thread failed: {e}"),
            PerfError::Child(e) => write!(f, "a hold child process failed: {e}"),
            PerfError::H3(e) => write!(f, "{e}"),
        }
    }
}

impl From<TargetError> for PerfError {
    fn from(e: TargetError) -> Self {
        PerfError::Target(e)
    }
}

fn main() -> ExitCode {
    let examples = [
        ("http-perf -c 100 -t 2 -d 10s --latency https://127.0.0.1:8443/", "100 keep-alive connections over 2 threads for 10 seconds, with the latency distribution, as wrk would."),
        ("http-perf -c 1k -d 30s --progress http://127.0.0.1:8080/", "1000 connections for 30 seconds, a progress line every second; Ctrl-C prints the report so far."),
        ("http-perf -c 1000 -t 2 -d 30 -H \"Connection: close\" --connect 127.0.0.1:8443 https://example.com/", "A new connection (and TLS handshake) for every request, to a server on this host named example.com."),
        ("http-perf --h3 -c 10 -t 1 --pipeline 100 -d 10s --connect 127.0.0.1:8443 https://example.com/", "HTTP/3 over QUIC: 10 connections of up to 100 request streams each, to a server on this host named example.com."),
        ("http-perf --hold 10000 --hold-secs 5 --rounds 2 --server-pid PID https://127.0.0.1:8443/", "Hold 10,000 idle TLS connections, then send a request on each twice; report the server's memory per connection."),
    ];
    let command = <Args as clap::CommandFactory>::command;
    if let Some(code) = tls_perf::man::print_if_asked(command, &examples) {
        return code;
    }
    let args = Args::parse();
    // SIGPIPE needs no handling: the Rust runtime ignores it, so a peer closing while we
    // write is a write error, never a silent death.
    let outcome = if args.hold_child.is_some() {
        hold_group::run_child(&args)
    } else if let Some(kind) = args.h2_flood {
        flood::run(&args, kind)
    } else if let Some(kind) = args.h3_flood {
        h3flood::run(&args, kind)
    } else if args.hold.is_some() {
        hold::run(&args)
    } else {
        run_load(&args).map(|()| true)
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("http-perf: {e}");
            ExitCode::from(2)
        }
    }
}

/// The target as every mode needs it: URL, address, request, TLS settings.
pub struct Setup {
    pub url: Url,
    pub addr: SocketAddr,
    pub request: Arc<Vec<u8>>,
    pub close_each: bool,
    /// (SNI, resume with tickets) when the URL is https.
    pub tls: Option<(Option<String>, bool)>,
}

impl Setup {
    pub fn from_args(args: &Args) -> Result<Setup, PerfError> {
        let url = Url::parse(&args.url)?;
        let addr = match args.connect {
            Some(a) => a,
            None => url.resolve()?,
        };
        let (request, close_each) = target::build_request(&url, &args.headers)?;
        let tls = url
            .tls
            .then(|| (args.sni.clone().or_else(|| url.default_sni()), args.tickets));
        Ok(Setup {
            url,
            addr,
            request: Arc::new(request),
            close_each,
            tls,
        })
    }
}

/// `--h2`: the request's header block, the pseudo-header fields and every -H field (names
/// in lower case, connection-specific ones left out), each a literal without indexing.
fn h2_request_block(setup: &Setup, headers: &[String]) -> Vec<u8> {
    let scheme = if setup.url.tls { "https" } else { "http" };
    let mut block =
        flood::wire::request_block("GET", scheme, &setup.url.host_header(), &setup.url.path);
    for h in headers {
        let Some((name, value)) = h.split_once(':') else {
            continue;
        };
        let name = name.trim().to_ascii_lowercase();
        if matches!(
            name.as_str(),
            "connection" | "host" | "keep-alive" | "te" | "upgrade"
        ) {
            continue;
        }
        flood::wire::hpack_literal(&mut block, name.as_bytes(), value.trim().as_bytes());
    }
    block
}

/// `--h3`: the QUIC idle timeout at least (a run's --timeout may be shorter).
const MIN_QUIC_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// Fails fast, as wrk does, when nothing listens at `addr`.
pub fn probe(addr: SocketAddr, timeout: std::time::Duration) -> Result<(), PerfError> {
    std::net::TcpStream::connect_timeout(&addr, timeout)
        .map(drop)
        .map_err(|e| PerfError::Unreachable(addr, e))
}

/// `--h2`'s header block, `--h3`'s plan.
type ProtocolPlans = (Option<Arc<Vec<u8>>>, Option<Arc<h3::H3Plan>>);

/// `--h2`'s header block or `--h3`'s plan, once the server has answered the probe (a TCP
/// connect, or a QUIC handshake that agreed to h3).
fn protocol_plans(args: &Args, setup: &Setup) -> Result<ProtocolPlans, PerfError> {
    let h2 = args
        .h2
        .then(|| Arc::new(h2_request_block(setup, &args.headers)));
    if (h2.is_some() || args.h3) && (setup.close_each || args.tickets) {
        return Err(PerfError::Usage(
            "--h2 and --h3 keep their connections: no \"Connection: close\" nor --tickets".into(),
        ));
    }
    if !args.h3 {
        probe(setup.addr, args.timeout)?;
        return Ok((h2, None));
    }
    let idle = args.timeout.max(MIN_QUIC_IDLE);
    let plan = h3::H3Plan::new(setup, &args.headers, idle, None).map_err(PerfError::Usage)?;
    h3::probe(setup.addr, &plan, args.timeout).map_err(PerfError::H3)?;
    Ok((h2, Some(Arc::new(plan))))
}

fn run_load(args: &Args) -> Result<(), PerfError> {
    let setup = Setup::from_args(args)?;
    if args.threads == 0 || args.connections < args.threads {
        return Err(PerfError::Usage(
            "the number of connections (-c) must be at least the number of threads (-t), and both above 0".into(),
        ));
    }
    if args.pipeline == 0 || args.rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
        return Err(PerfError::Usage(
            "--pipeline and --rate must be above 0".into(),
        ));
    }
    let (h2, h3) = protocol_plans(args, &setup)?;
    let live = Arc::new(progress::Live::default());
    live.stop_on_sigint()
        .map_err(|e| PerfError::Thread(format!("cannot handle SIGINT: {e}")))?;
    let cpu_before = args
        .server_pid
        .map(|pid| tls_perf::procstat::cpu_seconds(pid).unwrap_or(0.0));
    let started = std::time::Instant::now();
    let handles: Vec<_> = (0..args.threads)
        .map(|i| {
            let plan = load::LoadPlan {
                addr: setup.addr,
                tls: setup.tls.clone(),
                request: Arc::clone(&setup.request),
                close_each: setup.close_each,
                h2: h2.clone(),
                h3: h3.clone(),
                connections: args.connections / args.threads
                    + usize::from(i < args.connections % args.threads),
                pipeline: args.pipeline,
                rate: args.rate.map(|r| r / args.threads as f64),
                duration: args.duration,
                timeout: args.timeout,
                live: Arc::clone(&live),
            };
            std::thread::spawn(move || match plan.h3.clone() {
                Some(h3) => h3::load::run(&plan, &h3),
                None => load::run(&plan),
            })
        })
        .collect();
    let show = args.progress || std::io::stderr().is_terminal();
    progress::wait(&handles, &live, started, show);
    if live.stopped() {
        eprintln!(
            "http-perf: interrupted after {:.1}s; the report covers what was measured until then",
            started.elapsed().as_secs_f64()
        );
    }
    let mut results = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => return Err(PerfError::Thread(e.to_string())),
            Err(_) => return Err(PerfError::Thread("panicked".into())),
        }
    }
    let mut summary = report::Summary::merge(&args.url, args.connections, args.duration, results)
        .map_err(|e| PerfError::Thread(e.to_string()))?;
    summary.rate_target = args.rate;
    if let (Some(pid), Some(before)) = (args.server_pid, cpu_before) {
        let after = tls_perf::procstat::cpu_seconds(pid).unwrap_or(before);
        summary.server_cpu = Some((pid, after - before));
    }
    if let Some(why) = &summary.first_error {
        eprintln!("http-perf: first error: {why}");
    }
    if args.json {
        println!("{}", summary.json());
    } else {
        print!("{}", summary.text(args.latency));
    }
    Ok(())
}
