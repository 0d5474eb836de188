//! The command line: wrk's options (`-c -t -d -H --latency --timeout -v URL`, counts with
//! wrk's `k`/`M`/`G` suffixes), the extras (`--pipeline --rate --h2 --h3 --tickets --json --progress
//! --server-pid --sni --connect`) and hold mode.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "http-perf",
    version,
    disable_version_flag = true,
    about = "HTTP/1.1 (and HTTP/2, HTTP/3) load generator with wrk's command line and report, a C10K/C100K hold mode, and HTTP/2 floods",
    after_help = "Ctrl-C (SIGINT) ends the run early and prints the report of what was measured; a second one kills it.\n\nExamples:\n  http-perf -c 100 -t 2 -d 10s --latency https://127.0.0.1:8443/\n  http-perf -c 1k -d 30s --progress http://127.0.0.1:8080/\n  http-perf -c 1000 -t 2 -d 30 -H \"Connection: close\" --connect 127.0.0.1:8443 https://tempesta-tech.com/\n  http-perf --hold 10000 --hold-secs 5 --rounds 2 --addrs 127.0.0.1,127.0.0.2 --server-pid PID https://127.0.0.1:8443/\n  http-perf --h2-flood ping -c 10 -d 30 --server-pid PID --json https://127.0.0.1:8443/"
)]
pub struct Args {
    /// Connections to keep open (in total, over all threads): 100, 1k, 1M.
    #[arg(short = 'c', long = "connections", default_value = "10", value_parser = parse_count)]
    pub connections: usize,
    /// Threads, each with its own event loop.
    #[arg(short = 't', long = "threads", default_value = "2", value_parser = parse_count)]
    pub threads: usize,
    /// Test duration: 30, 30s, 2m, 1h.
    #[arg(short = 'd', long = "duration", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// A request header, "Name: value" (repeatable). "Connection: close" makes every request
    /// use a new connection.
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// Print the latency distribution (50, 75, 90, 99, 99.9, 99.99%).
    #[arg(long)]
    pub latency: bool,
    /// A request (or connect) without progress for this long is a timeout error.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// TLS server name to send (default: the URL's host, unless it is an IP address).
    #[arg(long)]
    pub sni: Option<String>,
    /// Connect to this address instead of resolving the URL's host.
    #[arg(long)]
    pub connect: Option<SocketAddr>,
    /// Requests in flight per connection (with --h2 and --h3: request streams).
    #[arg(long, visible_alias = "streams", default_value_t = 1)]
    pub pipeline: usize,
    /// Constant total request rate (requests/s); latency counts from the intended send time.
    #[arg(long)]
    pub rate: Option<f64>,
    /// HTTP/2 load (TLS with ALPN h2, or h2c by prior knowledge for http URLs): one stream
    /// per request, at most --pipeline streams per connection.
    #[arg(long)]
    pub h2: bool,
    /// HTTP/3 load over QUIC (https URLs; UDP to the URL's or --connect's port): one
    /// stream per request, at most --pipeline streams per connection; the certificate is
    /// not verified, as in the TCP modes.
    #[arg(long, conflicts_with_all = ["h2", "h2_flood", "tickets"])]
    pub h3: bool,
    /// Resume TLS sessions (tickets) when reconnecting.
    #[arg(long)]
    pub tickets: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Print progress to stderr once a second (the default when stderr is a terminal).
    #[arg(long)]
    pub progress: bool,
    /// Print the version and exit.
    #[arg(short = 'v', long = "version", action = clap::ArgAction::Version)]
    pub version: Option<bool>,
    /// Measure this server process tree: CPU per 1000 requests, memory per held connection.
    #[arg(long = "server-pid")]
    pub server_pid: Option<u32>,

    /// Hold mode: open this many connections, hold them idle, then run request rounds.
    #[arg(long, value_parser = parse_count)]
    pub hold: Option<usize>,
    /// Hold mode: seconds to hold every connection idle.
    #[arg(long = "hold-secs", default_value_t = 5)]
    pub hold_secs: u64,
    /// Hold mode: rounds of one request on every connection.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Hold mode: destination addresses to spread connections over (IP or IP:PORT,
    /// comma-separated; default the URL's or --connect address).
    #[arg(long)]
    pub addrs: Option<String>,
    /// Hold mode: TCP+TLS (or, with --h3, QUIC) handshakes in flight per thread during the ramp.
    #[arg(long = "handshakes", default_value_t = 512)]
    pub handshakes: usize,
    /// Hold mode: the ramp must finish within this time (PASS criterion).
    #[arg(long = "ramp-limit", default_value = "180s", value_parser = parse_duration)]
    pub ramp_limit: Duration,
    /// Hold mode with --h3: a QUIC handshake not done within this time counts as failed
    /// and the ramp goes on (a handshake whose packets the server lost for good would
    /// otherwise wait for the ramp's limit).
    #[arg(long = "handshake-timeout", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,
    /// Hold mode: time allowed for every response of one round.
    #[arg(long = "round-timeout", default_value = "60s", value_parser = parse_duration)]
    pub round_timeout: Duration,
    /// Hold mode: FAIL when the server's memory per connection exceeds this many bytes.
    #[arg(long = "max-mem-per-conn")]
    pub max_mem_per_conn: Option<u64>,
    /// Hold mode: connections per process; more are spread over child processes (the
    /// descriptor limit is per process).
    #[arg(long = "conns-per-process", default_value_t = 18000)]
    pub conns_per_process: usize,
    /// Internal: run as hold child I of K (`I/K`), reporting JSON lines to the parent.
    #[arg(long = "hold-child", hide = true)]
    pub hold_child: Option<String>,

    /// HTTP/2 flood: ping, settings, reset, continuation, hpack, window, empty-data,
    /// zero-window, priority, unknown or made-you-reset, from -c connections for -d (TLS
    /// with ALPN h2 for https URLs, h2c by prior knowledge for http).
    #[arg(long = "h2-flood", value_name = "KIND")]
    pub h2_flood: Option<crate::flood::FloodKind>,
    /// HTTP/3 flood: handshake, streams, reset, reset-only, qpack-table or qpack-blocked, from -c
    /// sockets or connections for -d (an https URL; QUIC to its port over UDP).
    #[arg(long = "h3-flood", value_name = "KIND", conflicts_with_all = ["h2_flood", "h3", "hold"])]
    pub h3_flood: Option<crate::h3flood::H3FloodKind>,
    /// HTTP/2 flood: replace every connection the server closes (a persistent attacker).
    #[arg(long)]
    pub reconnect: bool,

    /// http://HOST[:PORT]/PATH or https://...
    pub url: String,
}

/// Parses counts as wrk does: `100`, `1k` (1000), `2M`, `1G` (powers of 1000).
pub fn parse_count(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, scale) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1_000f64),
        Some((i, 'M')) => (&s[..i], 1e6),
        Some((i, 'G')) => (&s[..i], 1e9),
        _ => (s, 1.0),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a count; use e.g. 100, 1k, 2M"))?;
    let n = n * scale;
    if !n.is_finite() || n < 0.0 || n.fract() != 0.0 || n > usize::MAX as f64 {
        return Err(format!("`{s}` is not a whole, positive count"));
    }
    Ok(n as usize)
}

/// Parses wrk-style durations: `10` (seconds), `10s`, `500ms`, `2m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration; use e.g. 10s, 500ms, 2m, 1h"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "us" => n / 1e6,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown unit `{unit}` in `{s}`; use ms, s, m or h")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{s}` is not a positive duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("1x").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn counts_with_suffixes() {
        assert_eq!(parse_count("1k"), Ok(1000));
        assert_eq!(parse_count("2.5k"), Ok(2500));
        assert_eq!(parse_count("1M"), Ok(1_000_000));
        assert_eq!(parse_count("12"), Ok(12));
        assert!(parse_count("1.5").is_err());
        assert!(parse_count("k").is_err());
        assert!(parse_count("-1k").is_err());
    }

    #[test]
    fn wrk_command_line() {
        let a = Args::try_parse_from([
            "http-perf",
            "-c",
            "1000",
            "-t",
            "4",
            "-d",
            "30",
            "-H",
            "Connection: close",
            "https://tempesta-tech.com",
        ])
        .unwrap();
        assert_eq!((a.connections, a.threads), (1000, 4));
        assert_eq!(a.duration, Duration::from_secs(30));
        assert_eq!(a.headers, vec!["Connection: close".to_string()]);
    }
}
