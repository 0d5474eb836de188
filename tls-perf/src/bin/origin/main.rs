//! `origin`: a fast HTTP/1.1 server of fixed bodies, the backend of the proxy's tests and of
//! the nginx A/B benchmark, and (with `--cert/--key`) a TLS server to test `http-perf` with.
//!
//!   origin [--listen 127.0.0.1:8000] [-t THREADS] [--size N] [--cache-control VALUE]
//!          [--cert FILE --key FILE] [--processes K]
//!
//! Any path answers `--size` bytes; `/bytes/N` answers N bytes; `/__origin/stats` answers this
//! process's counters as JSON (`{"connections":N,"requests":M,"tls_resumed":R}`).
#![forbid(unsafe_code)]

#[path = "../http-perf/chunked.rs"]
mod chunked;
mod request;
mod server;
#[path = "../http-perf/stream.rs"]
mod stream;

use std::fmt;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use clap::Parser;
use openssl::ssl::{SslAcceptor, SslContext, SslFiletype, SslMethod, SslMode};
use socket2::{Domain, Protocol, Socket, Type};

#[derive(Parser, Debug)]
#[command(name = "origin", about = "A fast HTTP/1.1 server of fixed-size bodies")]
struct Args {
    /// Address and port to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// Worker threads, each with its own event loop and SO_REUSEPORT listener.
    #[arg(short = 't', long = "threads", default_value_t = 1)]
    threads: usize,
    /// Body size, in bytes, of the answer to any path but /bytes/N.
    #[arg(long, default_value_t = 10)]
    size: u64,
    /// Value of a Cache-Control header added to every 200 response.
    #[arg(long = "cache-control")]
    cache_control: Option<String>,
    /// Certificate (PEM) to serve HTTPS instead of HTTP; needs --key.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Processes sharing the port (SO_REUSEPORT), for more connections than one process's
    /// descriptor limit allows. The first one starts the others and they die with it.
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// Internal: this process was started by another origin; do not start more.
    #[arg(long, hide = true)]
    child: bool,
}

enum OriginError {
    Tls(PathBuf, PathBuf, String),
    Listen(SocketAddr, std::io::Error),
    Spawn(std::io::Error),
}

impl fmt::Display for OriginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OriginError::Tls(cert, key, e) => write!(
                f,
                "cannot load certificate {} with key {}: {e}; pass PEM files that match",
                cert.display(),
                key.display()
            ),
            OriginError::Listen(addr, e) => write!(
                f,
                "cannot listen on {addr}: {e}; pick a free port with --listen ADDR:PORT"
            ),
            OriginError::Spawn(e) => write!(f, "cannot start a worker process: {e}"),
        }
    }
}

fn main() -> ExitCode {
    let examples = [
        ("origin --listen 127.0.0.1:8000", "Serve 10-byte bodies over plain HTTP/1.1 (the packaged proxy's default backend address)."),
        ("origin --listen 127.0.0.1:8443 --cert cert.pem --key key.pem", "The same over HTTPS, for measuring a TLS server without the proxy."),
    ];
    let command = <Args as clap::CommandFactory>::command;
    if let Some(code) = tls_perf::man::print_if_asked(command, &examples) {
        return code;
    }
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("origin: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), OriginError> {
    let tls = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => Some(
            tls_context(cert, key)
                .map_err(|e| OriginError::Tls(cert.clone(), key.clone(), e.to_string()))?,
        ),
        _ => None,
    };
    let threads = args.threads.max(1);
    // Bind every listener before announcing readiness, so "listening" means it.
    let listeners = (0..threads)
        .map(|_| listen(args.listen).map_err(|e| OriginError::Listen(args.listen, e)))
        .collect::<Result<Vec<_>, _>>()?;
    // Held until this process ends: their stdin pipes keep the children alive.
    let mut children = Vec::new();
    if args.child {
        exit_with_parent();
    } else {
        for _ in 1..args.processes.max(1) {
            children.push(spawn_child().map_err(OriginError::Spawn)?);
        }
    }
    let shared = Arc::new(server::Shared {
        size: args.size,
        cache_control: args.cache_control.clone(),
        tls,
        connections: AtomicU64::new(0),
        requests: AtomicU64::new(0),
        resumed: AtomicU64::new(0),
    });
    if !args.child {
        let scheme = if shared.tls.is_some() {
            "https"
        } else {
            "http"
        };
        println!(
            "origin listening on {} ({scheme}, {threads} threads, {} processes)",
            args.listen,
            args.processes.max(1)
        );
    }
    let handles: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || server::run(l, shared))
        })
        .collect();
    for h in handles {
        if let Ok(Err(e)) = h.join() {
            eprintln!("origin: worker stopped: {e}");
        }
    }
    Ok(())
}

/// Starts a copy of this process with the same arguments plus `--child`. The child's stdin
/// is a pipe from this process: when this process dies the pipe closes and the child exits,
/// so killing the first origin by pid stops them all.
fn spawn_child() -> std::io::Result<std::process::Child> {
    let exe = std::env::current_exe()?;
    Command::new(exe)
        .args(std::env::args_os().skip(1))
        .arg("--child")
        .stdin(Stdio::piped())
        .spawn()
}

/// In a child: exits when the parent's end of stdin closes.
fn exit_with_parent() {
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(0);
    });
}

fn listen(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    Ok(socket.into())
}

fn tls_context(cert: &PathBuf, key: &PathBuf) -> Result<SslContext, openssl::error::ErrorStack> {
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())?;
    b.set_certificate_chain_file(cert)?;
    b.set_private_key_file(key, SslFiletype::PEM)?;
    b.check_private_key()?;
    // Idle connections then hold no record buffers (matters for C100K baselines).
    b.set_mode(SslMode::RELEASE_BUFFERS);
    Ok(b.build().into_context())
}
