//! `http-perf --h3-flood KIND`: HTTP/3 and QUIC floods against a server, with what the
//! server did (the `--h2-flood` family over QUIC; docs/HTTP-PERF.md). `handshake` sends
//! Initials from many sockets and never answers (address validation, the amplification
//! limit: what came back against what was sent); the others are connections that attack
//! once established (`conns.rs`).

mod conns;
mod handshake;
mod report;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::cli::Args;
use crate::h3::H3Plan;
use crate::{PerfError, Setup};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum H3FloodKind {
    /// Initials of ever new connections from -c sockets, nothing acknowledged or answered:
    /// a spoofed source's view (what the server sends to an address that never proves it
    /// is there).
    Handshake,
    /// As many request streams as the server's credit allows, each a HEADERS frame that
    /// never completes, held open.
    Streams,
    /// Rapid reset over QUIC: a request, then RESET_STREAM and STOP_SENDING, stream after
    /// stream, as fast as the credit comes back.
    Reset,
    /// Request streams that only reset: HEADERS without FIN, then RESET_STREAM, never
    /// STOP_SENDING (the request can never complete; the server must still count it).
    ResetOnly,
    /// A QPACK encoder stream setting the dynamic table far above the server's limit.
    QpackTable,
    /// Request streams whose field sections wait for QPACK inserts that never come, more
    /// of them than the server allows to wait.
    QpackBlocked,
}

impl H3FloodKind {
    pub const ALL: [H3FloodKind; 6] = [
        H3FloodKind::Handshake,
        H3FloodKind::Streams,
        H3FloodKind::Reset,
        H3FloodKind::ResetOnly,
        H3FloodKind::QpackTable,
        H3FloodKind::QpackBlocked,
    ];

    pub fn name(self) -> &'static str {
        match self {
            H3FloodKind::Handshake => "handshake",
            H3FloodKind::Streams => "streams",
            H3FloodKind::Reset => "reset",
            H3FloodKind::ResetOnly => "reset-only",
            H3FloodKind::QpackTable => "qpack-table",
            H3FloodKind::QpackBlocked => "qpack-blocked",
        }
    }
}

impl fmt::Display for H3FloodKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for H3FloodKind {
    type Err = String;
    fn from_str(s: &str) -> Result<H3FloodKind, String> {
        H3FloodKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = H3FloodKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown HTTP/3 flood `{s}`; one of: {}", names.join(", "))
            })
    }
}

/// Runs the flood; Ok(false) when nothing could flood (no QUIC answer at all, or no
/// connection was established).
pub fn run(args: &Args, kind: H3FloodKind) -> Result<bool, PerfError> {
    let setup = Setup::from_args(args)?;
    if args.connections == 0 {
        return Err(PerfError::Usage(
            "--h3-flood needs at least one connection (-c)".into(),
        ));
    }
    let idle = args.timeout.max(Duration::from_secs(30));
    let plan = H3Plan::new(&setup, &args.headers, idle, None).map_err(PerfError::Usage)?;
    let sampler = args.server_pid.map(crate::flood::rss::Sampler::start);
    let started = std::time::Instant::now();
    let tally = match kind {
        H3FloodKind::Handshake => handshake::run(setup.addr, &plan, args),
        _ => conns::run(setup.addr, &plan, args, kind),
    }
    .map_err(|e| PerfError::Thread(e.to_string()))?;
    let memory = sampler.map(crate::flood::rss::Sampler::finish);
    let report = report::Report {
        url: &args.url,
        kind,
        connections: args.connections,
        elapsed: started.elapsed(),
        tally: &tally,
        memory: memory.as_ref(),
    };
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    Ok(tally.worked())
}

/// What a flood sent and what came back.
#[derive(Debug, Default)]
pub struct Tally {
    /// UDP payload bytes sent and received (every socket).
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// `handshake`: Initials sent, Retry packets received, and the largest ratio of bytes
    /// received to bytes sent over one socket (one never-answering address).
    pub initials: u64,
    pub retries: u64,
    pub worst_ratio: f64,
    /// Connections established, and how each ended (reason in words, count).
    pub established: u64,
    pub ends: std::collections::BTreeMap<String, u64>,
    /// Request streams opened, the most open at once on one connection, opens the
    /// server's stream credit held back (rounds that wanted a stream and got none).
    pub streams: u64,
    pub most_open: u64,
    pub credit_waits: u64,
    /// Streams reset by us; responses that completed anyway.
    pub resets: u64,
    pub responses: u64,
}

impl Tally {
    fn worked(&self) -> bool {
        self.initials > 0 && self.bytes_received > 0 || self.established > 0
    }
}
