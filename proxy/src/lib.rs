//! The `proxy` binary's library: a TLS-terminating reverse proxy in the style of Tempesta FW.
//!
//! One process validates the configuration, builds the TLS contexts and binds every
//! listener, then runs one mio event loop per worker thread ([`worker`]); `worker_processes`
//! runs several such processes ([`process`]).

#![forbid(unsafe_code)]

pub mod access_log;
pub mod acme;
pub mod alpn;
pub mod buf;
pub mod close_reason;
pub mod date;
pub mod error_pages;
pub mod fingerprint;
pub mod fleet;
pub mod frang;
pub mod handshake_failure;
pub mod health_monitor;
pub mod histogram;
pub mod log;
pub mod lru;
pub mod metrics;
pub mod metrics_h2;
pub mod metrics_quic;
pub mod metrics_tunnel;
pub mod metrics_upstream;
pub mod outbox;
pub mod pid_file;
pub mod process;
pub mod quic_hello;
pub mod resolve;
pub mod router;
pub mod runtime;
pub mod runtime_dir;
pub mod server;
pub mod server_name;
pub mod service;
pub mod socket;
pub mod stats;
pub mod stats_merge;
pub mod sticky;
pub mod ticket_files;
pub mod timers;
pub mod tls_names;
pub mod tls_quic;
mod tls_quic_tickets;
pub mod tls_setup;
pub mod transport;
pub mod upstream_h2;
pub mod upstream_tls;
pub mod worker;

use std::path::Path;
use std::sync::Arc;

use runtime::Runtime;

/// Loads, validates and prepares a configuration. Warnings are logged; the error is the
/// whole report (every error found), ready to print.
pub fn load(path: &Path) -> Result<Arc<Runtime>, String> {
    let loaded = config::load_path_and_files(path).map_err(|d| d.to_string())?;
    for w in &loaded.warnings {
        warn!("{w}");
    }
    // Held while the certificates load: no ACME process writes them meanwhile.
    let _acme_files = acme::prepare(&loaded.config)?;
    let (config, resolved) = resolve::at_load(loaded.config)?;
    let runtime = Runtime::build(config).map_err(|e| e.to_string())?;
    Ok(match (resolved, Arc::try_unwrap(runtime)) {
        (Some(resolved), Ok(mut rt)) => {
            rt.resolved = Some(Arc::new(resolved));
            Arc::new(rt)
        }
        (_, Ok(rt)) => Arc::new(rt),
        (_, Err(rt)) => rt,
    })
}
