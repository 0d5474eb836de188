//! The command line: the options of tempesta-tech/tls-perf, spelled the same way, plus two
//! extensions (`--server-pid`, `--json`). Parse errors (unknown options, bad values) print the
//! usage and exit with status 2, as clap does by default.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Upstream refuses more than 512 threads; so do we.
pub const MAX_THREADS: u32 = 512;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "tls-perf",
    about = "TLS handshake benchmark: a closed loop of connect -> TLS handshake -> reset -> \
             reconnect, a drop-in for tempesta-tech/tls-perf",
    after_help = "127.0.0.1:443 is used when no address is given. Exit status: 0 run finished \
                  (report printed), 1 cannot start, 2 bad command line, 3 run stopped because \
                  the server stopped answering (report printed).",
    disable_version_flag = true
)]
pub struct Args {
    /// Print every connection failure as it happens (to stderr)
    #[arg(short = 'd', long = "debug")]
    pub debug: bool,

    /// No settings block and no per-second progress lines
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,

    /// Concurrent connections (peers) per thread
    #[arg(short = 'l', value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub peers: u32,

    /// Number of threads, each with its own event loop
    #[arg(short = 't', value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_THREADS as i64))]
    pub threads: u32,

    /// Stop after N completed handshakes (counting the ramp-up)
    #[arg(short = 'n', value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub handshakes: Option<u64>,

    /// Stop after this many seconds (counting the ramp-up)
    #[arg(short = 'T', long = "to", value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub seconds: Option<u64>,

    /// Cipher list: TLS 1.2 names (ECDHE-ECDSA-AES128-GCM-SHA256) and/or TLS 1.3 suites
    /// (TLS_AES_128_GCM_SHA256), separated by ':'; see `openssl ciphers`
    #[arg(short = 'c', value_name = "CIPHERS")]
    pub ciphers: Option<String>,

    /// Groups (curves) to offer, e.g. X25519 or P-256:X25519; see `openssl ecparam -list_curves`
    #[arg(short = 'C', value_name = "CURVES")]
    pub curves: Option<String>,

    /// TLS version to negotiate
    #[arg(
        short = 'V',
        long = "tls",
        value_enum,
        value_name = "VERSION",
        default_value = "1.2"
    )]
    pub tls: TlsVersion,

    /// Session tickets: `on` resumes with the last ticket received, `advertise` offers the
    /// extension but never resumes, `off` does not offer it
    #[arg(
        short = 'K',
        long = "tickets",
        value_enum,
        value_name = "MODE",
        default_value = "off"
    )]
    pub tickets: Tickets,

    /// Append TLS secrets to this file (NSS key log format, for Wireshark)
    #[arg(short = 'F', long = "keylogfile", value_name = "FILE")]
    pub keylogfile: Option<PathBuf>,

    /// Server name to send in the SNI extension
    #[arg(short = 's', long = "sni", value_name = "NAME")]
    pub sni: Option<String>,

    /// Also report the CPU time this server process (and its children) spent per handshake
    #[arg(long = "server-pid", value_name = "PID")]
    pub server_pid: Option<u32>,

    /// Print the final report as JSON on stdout; progress and settings go to stderr
    #[arg(long = "json")]
    pub json: bool,

    /// Server address, IPv4 or IPv6
    #[arg(value_name = "IP", requires = "port")]
    pub ip: Option<IpAddr>,

    /// Server port
    #[arg(value_name = "PORT")]
    pub port: Option<u16>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum TlsVersion {
    #[value(name = "1.2")]
    V12,
    #[value(name = "1.3")]
    V13,
    /// TLS 1.2 or 1.3, as the server prefers
    #[value(name = "any")]
    Any,
}

impl TlsVersion {
    /// As upstream prints it in the settings block.
    pub fn describe(self) -> &'static str {
        match self {
            TlsVersion::V12 => "1.2",
            TlsVersion::V13 => "1.3",
            TlsVersion::Any => "Any of 1.2 or 1.3",
        }
    }

    pub fn allows_tls13(self) -> bool {
        self != TlsVersion::V12
    }

    pub fn allows_tls12(self) -> bool {
        self != TlsVersion::V13
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tickets {
    On,
    Off,
    Advertise,
}

impl Tickets {
    pub fn name(self) -> &'static str {
        match self {
            Tickets::On => "on",
            Tickets::Off => "off",
            Tickets::Advertise => "advertise",
        }
    }
}

impl Args {
    /// The server address; upstream's default is 127.0.0.1:443.
    pub fn target(&self) -> SocketAddr {
        let ip = self.ip.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        SocketAddr::new(ip, self.port.unwrap_or(443))
    }

    /// Total peers over all threads.
    pub fn total_peers(&self) -> u64 {
        u64::from(self.peers) * u64::from(self.threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("tls-perf").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_match_upstream() {
        let args = parse(&[]).expect("no arguments is valid");
        assert_eq!(args.target(), "127.0.0.1:443".parse().expect("addr"));
        assert_eq!((args.peers, args.threads), (1, 1));
        assert_eq!(args.tls, TlsVersion::V12);
        assert_eq!(args.tickets, Tickets::Off);
    }

    #[test]
    fn upstream_spellings_parse() {
        let args = parse(&[
            "-q",
            "-l",
            "100",
            "-t",
            "2",
            "-T",
            "10",
            "--tls",
            "1.3",
            "--tickets",
            "on",
            "--sni",
            "example.com",
            "-c",
            "TLS_AES_128_GCM_SHA256",
            "-C",
            "X25519",
            "::1",
            "8443",
        ])
        .expect("valid");
        assert_eq!(args.target(), "[::1]:8443".parse().expect("addr"));
        assert_eq!(args.tls, TlsVersion::V13);
        assert_eq!(args.tickets, Tickets::On);
        assert_eq!(args.total_peers(), 200);
        let short = parse(&[
            "-V",
            "any",
            "-K",
            "advertise",
            "-s",
            "x",
            "-F",
            "/tmp/k",
            "--to",
            "3",
        ])
        .expect("valid");
        assert_eq!(short.tls, TlsVersion::Any);
        assert_eq!(short.tickets, Tickets::Advertise);
        assert_eq!(short.seconds, Some(3));
    }

    #[test]
    fn bad_command_lines_are_usage_errors() {
        for bad in [
            &["--bogus"][..],
            &["127.0.0.1"],
            &["-l", "0"],
            &["-t", "513"],
            &["--tls", "1.1"],
            &["--tickets", "maybe"],
            &["not-an-ip", "443"],
            &["127.0.0.1", "443", "extra"],
        ] {
            let err = parse(bad).expect_err("must be refused");
            assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
        }
    }
}
