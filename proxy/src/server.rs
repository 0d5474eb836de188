//! One serving process: bind every listener (once per worker thread, SO_REUSEPORT), start the
//! workers, write the pid file and tell the service manager it is ready, then wait for
//! signals: SIGHUP reloads, SIGUSR1 reopens the access logs, SIGTERM/SIGQUIT/SIGINT stop
//! gracefully.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use mio::Waker;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;
use socket2::{Domain, Protocol, Socket, Type};

use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::worker::{Shared, Worker, WorkerListener};

/// Pending connections per listening socket.
pub(crate) const BACKLOG: i32 = 4096;

#[derive(Debug)]
pub enum ServeError {
    Bind {
        addr: SocketAddr,
        reason: std::io::Error,
    },
    Setup(String),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Bind { addr, reason } => write!(
                f,
                "cannot listen on {addr}: {reason} (is another server using the port? ports below 1024 need root)"
            ),
            ServeError::Setup(reason) => f.write_str(reason),
        }
    }
}

/// How long the kernel holds a TLS connection that has sent nothing before handing it to
/// `accept` anyway (`TCP_DEFER_ACCEPT`): the handshake timeout, so that a client that connects
/// and stays silent costs the proxy nothing for as long as it would be allowed to.
const TLS_DEFER_ACCEPT: Duration = Duration::from_secs(10);

/// A socket bound to `addr` that other sockets may share (SO_REUSEPORT). Accepted sockets
/// inherit `TCP_NODELAY` from it (Linux copies the listener's TCP options into each new
/// connection), which saves a `setsockopt` per connection. A `tls` listener also defers
/// `accept` until the ClientHello has arrived.
pub fn bind(addr: SocketAddr, tls: bool) -> Result<std::net::TcpListener, ServeError> {
    let err = |reason| ServeError::Bind { addr, reason };
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(err)?;
    socket.set_reuse_address(true).map_err(err)?;
    socket.set_reuse_port(true).map_err(err)?;
    socket.set_nodelay(true).map_err(err)?;
    if tls {
        ktls::sockopt::defer_accept(socket.as_fd(), TLS_DEFER_ACCEPT).map_err(err)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true).map_err(err)?;
    }
    socket.set_nonblocking(true).map_err(err)?;
    socket.bind(&addr.into()).map_err(err)?;
    socket.listen(BACKLOG).map_err(err)?;
    Ok(socket.into())
}

/// Serves until stopped. `config_path` is re-read on SIGHUP. `pid_file` is the claim on
/// the configuration's pid file (none in a child of `worker_processes`: its supervisor
/// holds it).
pub fn serve(
    config_path: &Path,
    runtime: Arc<Runtime>,
    pid_file: Option<&crate::pid_file::PidFileGuard>,
) -> Result<(), ServeError> {
    let threads = runtime
        .config
        .worker_threads
        .map(|n| n as usize)
        .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let per_worker = bind_all(&runtime, threads)?;
    announce_ktls(&runtime)?;
    let metrics = Metrics::new(threads);
    let shared = Arc::new(Shared::new(runtime.clone(), metrics.clone()));
    start_stats(&runtime, &shared)?;
    start_fleet(&runtime, &shared)?;
    crate::acme::start(&shared)
        .map_err(|e| ServeError::Setup(format!("cannot start the ACME thread: {e}")))?;
    crate::ticket_files::start(&shared)
        .map_err(|e| ServeError::Setup(format!("cannot start the ticket key thread: {e}")))?;
    crate::resolve::start(&shared)
        .map_err(|e| ServeError::Setup(format!("cannot start the resolver thread: {e}")))?;
    let mut wakers: Vec<Arc<Waker>> = Vec::with_capacity(threads);
    let mut handles = Vec::with_capacity(threads);
    for (id, set) in per_worker.into_iter().enumerate() {
        let (worker, waker) = Worker::new(id, set, shared.clone())
            .map_err(|e| ServeError::Setup(format!("worker {id}: {e}")))?;
        wakers.push(waker);
        let handle = thread::Builder::new()
            .name(format!("worker-{id}"))
            .spawn(move || worker.run())
            .map_err(|e| ServeError::Setup(format!("cannot start worker thread: {e}")))?;
        handles.push(handle);
    }
    // Handlers first: a signal sent as soon as the pid file names us must not kill us.
    let signals = Signals::new([SIGHUP, SIGTERM, SIGQUIT, SIGINT, SIGUSR1])
        .map_err(|e| ServeError::Setup(format!("cannot install signal handlers: {e}")))?;
    crate::access_log::open_all(&runtime.config.access_log);
    if let Some(pid_file) = pid_file {
        pid_file
            .publish()
            .map_err(|e| ServeError::Setup(e.to_string()))?;
    }
    crate::info!(
        "serving with {threads} worker thread(s), pid {}",
        std::process::id()
    );
    crate::service::notify(&format!(
        "READY=1\nMAINPID={}\nSTATUS=serving with {threads} worker thread(s)",
        std::process::id()
    ));
    let bound = runtime.config.effective_listeners();
    wait_for_signals(signals, (config_path, &bound), &shared, &wakers);
    for waker in &wakers {
        let _ = waker.wake();
    }
    for h in handles {
        let _ = h.join();
    }
    crate::info!("stopped");
    Ok(())
}

/// Every listener once per worker thread (SO_REUSEPORT). Everything is bound before anything
/// is served: a port in use fails the start, not a worker.
type PerWorker = (Vec<WorkerListener>, Vec<crate::worker::QuicBound>);

fn bind_all(runtime: &Runtime, threads: usize) -> Result<Vec<PerWorker>, ServeError> {
    let listeners = runtime.config.effective_listeners();
    let mut per_worker: Vec<PerWorker> = Vec::with_capacity(threads);
    for _ in 0..threads {
        let mut set = Vec::with_capacity(listeners.len());
        let mut quic = Vec::new();
        for l in listeners.iter().filter(|l| l.is_h3()) {
            let socket = crate::worker::bind_quic(l.addr).map_err(|e| ServeError::Bind {
                addr: l.addr,
                reason: e,
            })?;
            quic.push(crate::worker::QuicBound {
                socket,
                addr: l.addr,
            });
        }
        for l in listeners.iter().filter(|l| l.is_tcp()) {
            let std_listener = bind(l.addr, l.is_tls())?;
            set.push(WorkerListener {
                socket: mio::net::TcpListener::from_std(std_listener),
                addr: l.addr,
                tls: l.is_tls(),
                protos: l.protos.clone(),
            });
        }
        per_worker.push((set, quic));
    }
    for l in &listeners {
        crate::info!("listening on {} {}", l.addr, describe_listener(l));
    }
    Ok(per_worker)
}

/// What a listener serves, for its startup line: the ALPN protocols a TLS listener really
/// offers, or the cleartext protocol.
fn describe_listener(l: &config::Listener) -> String {
    if !l.is_tcp() {
        "h3 (HTTP/3 over QUIC, UDP)".to_string()
    } else if l.is_tls() {
        let alpn = crate::alpn::Alpn::of(&l.protos);
        let h3 = if l.is_h3() {
            ", and h3 over QUIC on UDP"
        } else {
            ""
        };
        format!("https (TLS 1.2/1.3, ALPN {}){h3}", alpn.offered())
    } else if l.protos.contains(&config::Proto::H2c) {
        "h2c (HTTP/2 by prior knowledge)".to_string()
    } else {
        "http (HTTP/1.1)".to_string()
    }
}

/// The statistics endpoint: with `worker_processes`, the first process serves the statistics
/// of all of them; the others answer it on a private socket (`stats_merge`).
fn start_stats(runtime: &Runtime, shared: &Arc<Shared>) -> Result<(), ServeError> {
    let process_index: u32 = std::env::var(crate::process::CHILD_ENV)
        .ok()
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    if let Some(addr) = runtime.config.stats_listen {
        if process_index == 0 {
            crate::stats::start(addr, shared.clone())?;
            crate::info!("statistics on http://{addr}/metrics");
        } else {
            crate::stats_merge::serve_peer(process_index, shared.clone());
        }
    }
    Ok(())
}

/// The `cluster` side thread (crate::fleet), in each process: none without the block or
/// without `redis` in it (a cache tier alone needs no thread).
fn start_fleet(runtime: &Runtime, shared: &Arc<Shared>) -> Result<(), ServeError> {
    let Some(cluster) = runtime.config.cluster.clone() else {
        return Ok(());
    };
    let Some(redis) = cluster.redis else {
        return Ok(());
    };
    let (current, wake) = (shared.clone(), shared.clone());
    crate::fleet::start(
        (cluster, redis),
        move || {
            let runtime = current.runtime();
            crate::fleet::Shared {
                frang: runtime.frang.clone(),
                fingerprints: runtime.fingerprints.clone(),
                runtime,
            }
        },
        move || wake.wake_for_blocks(),
    )
    .map_err(|e| ServeError::Setup(format!("cannot start the cluster thread: {e}")))
}

fn announce_ktls(runtime: &Runtime) -> Result<(), ServeError> {
    use ktls::offload::KtlsMode;
    if runtime.tls.is_none() {
        return Ok(());
    }
    let support = ktls::kernel::kernel_support();
    match (runtime.ktls_mode, support.is_available()) {
        (KtlsMode::Off, _) => crate::info!("kTLS: off (tls_ktls off): OpenSSL's record layer for every connection"),
        (KtlsMode::User, _) => crate::info!("kTLS: user (tls_ktls user): the proxy's record layer after each handshake, SSL objects freed"),
        (KtlsMode::On, false) => {
            return Err(ServeError::Setup(format!(
                "tls_ktls on, but the kernel cannot do kTLS: {} (load the `tls` module or set tls_ktls auto)",
                support.describe()
            )))
        }
        (_, true) => crate::info!("kTLS: available: records handed to the kernel after each handshake (the proxy's record layer where the kernel cannot take them)"),
        (KtlsMode::Auto, false) => {
            crate::info!("kTLS: unavailable ({}): the proxy's record layer after each handshake, SSL objects freed", support.describe())
        }
    }
    Ok(())
}

/// `bound`: the listeners the process bound at its start (a reload does not change them).
fn wait_for_signals(
    mut signals: Signals,
    (config_path, bound): (&Path, &[config::Listener]),
    shared: &Arc<Shared>,
    wakers: &[Arc<Waker>],
) {
    for signal in signals.forever() {
        match signal {
            SIGHUP => {
                notify_manager(&format!(
                    "RELOADING=1\nMONOTONIC_USEC={}",
                    crate::service::monotonic_usec()
                ));
                reload(config_path, shared, bound);
                // A reload that names a key file, or adds an `acme` block, for the first time
                // needs its thread.
                if let Err(e) = crate::ticket_files::start(shared) {
                    crate::error!("cannot start the ticket key thread: {e}");
                }
                if let Err(e) = crate::acme::start(shared) {
                    crate::error!("cannot start the ACME thread: {e}");
                }
                if let Err(e) = crate::resolve::start(shared) {
                    crate::error!("cannot start the resolver thread: {e}");
                }
                // Workers pick the new configuration up when their loop turns: make it turn
                // now, so that connections to removed servers retire on time even on an idle
                // worker (grace_shutdown_time).
                for waker in wakers {
                    let _ = waker.wake();
                }
                notify_manager("READY=1");
            }
            SIGUSR1 => reopen_logs(),
            _ => {
                crate::info!(
                    "signal {signal}: stopping (finishing requests in flight, at most 10 s)"
                );
                notify_manager("STOPPING=1");
                shared.begin_stop();
                for waker in wakers {
                    let _ = waker.wake();
                }
                return;
            }
        }
    }
}

/// State changes after the start, for systemd. A child of `worker_processes` reports only
/// its readiness, to its supervisor, which speaks for the service.
fn notify_manager(state: &str) {
    if !crate::process::is_child() {
        crate::service::notify(state);
    }
}

/// SIGUSR1: every access log file opened again by name (logrotate moved the old one).
fn reopen_logs() {
    let failed = crate::access_log::reopen();
    for (path, e) in &failed {
        crate::error!(
            "cannot reopen access log {}: {e}; still writing to the old file",
            path.display()
        );
    }
    if failed.is_empty() {
        crate::info!("access logs reopened");
    }
}

/// Loads the configuration again; a bad file is logged and the old one stays in force.
fn reload(config_path: &Path, shared: &Shared, bound: &[config::Listener]) {
    let path: PathBuf = config_path.to_path_buf();
    let _replacing = crate::runtime::REPLACING
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    match crate::load(&path) {
        Ok(runtime) => {
            let old = shared.runtime();
            if let Some(why) = cluster_needs_restart(&old.config, &runtime.config, bound) {
                crate::error!(
                    "reload of {} refused: {why}, which takes a restart; still serving the previous configuration",
                    path.display()
                );
                return;
            }
            if old.config.effective_listeners() != runtime.config.effective_listeners() {
                crate::warn!("reload: listeners changed; they take effect only after a restart");
            }
            crate::access_log::open_all(&runtime.config.access_log);
            shared.replace_runtime(runtime);
            crate::info!("reloaded {}", path.display());
        }
        Err(report) => {
            crate::error!(
                "reload of {} failed; still serving the previous configuration:\n{report}",
                path.display()
            );
        }
    }
}

/// Why a reload from `old` to `new` cannot change the `cluster` block, if it cannot: the
/// Redis side thread and its connection are made once per process, and the cache tier's
/// `self` must be one of `bound`, the listeners the process bound (they change at a
/// restart, whatever the configuration says meanwhile). The
/// tier's peers and `peer_timeout` change with the runtime (`fleet/tier.rs`).
fn cluster_needs_restart(
    old: &config::Config,
    new: &config::Config,
    bound: &[config::Listener],
) -> Option<String> {
    let default = config::Cluster::default();
    let (was, is) = (
        old.cluster.as_ref().unwrap_or(&default),
        new.cluster.as_ref().unwrap_or(&default),
    );
    if was.redis_side_differs(is) {
        return Some("the cluster block's redis, sync_interval or on_redis_failure changed".into());
    }
    let (_, me) = is.tier()?;
    is.problem(bound)?;
    Some(format!(
        "the cache tier's `self {me}` is not a plain HTTP listener the running process has bound"
    ))
}

/// How long to wait for children to stop before killing them.
pub const CHILD_STOP_TIMEOUT: Duration = Duration::from_secs(15);

#[cfg(test)]
mod tests {
    use super::*;

    /// What `bind` promises of the sockets `accept` returns: TCP_NODELAY without a call of
    /// their own (the worker no longer makes one).
    #[test]
    fn accepted_sockets_inherit_nodelay() {
        for tls in [false, true] {
            let listener = bind("127.0.0.1:0".parse().unwrap(), tls).unwrap();
            let addr = listener.local_addr().unwrap();
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            // The TLS listener defers accept until the client has sent something.
            std::io::Write::write_all(&mut client, b"\x16").unwrap();
            listener.set_nonblocking(false).unwrap();
            let (accepted, _) = listener.accept().unwrap();
            assert!(
                socket2::SockRef::from(&accepted).nodelay().unwrap(),
                "tls={tls}"
            );
            assert!(!socket2::SockRef::from(&client).nodelay().unwrap());
        }
    }
}
