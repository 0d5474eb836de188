//! `--h3`: HTTP/3 load over QUIC (RFC 9114, RFC 9000). QUIC is quinn-proto (sans-IO, on
//! each load thread's mio loop), its TLS 1.3 rustls on the AWS-LC provider (the workspace's
//! versions, so one AWS-LC is linked); HTTP/3 framing and QPACK are this tool's own
//! (`frame.rs`, `qpack.rs`), sharing nothing with the proxy's crates. A probe connection
//! first turns "nothing on that UDP port", "no QUIC answer" and "QUIC without h3" into a
//! clear error before any load.

pub mod conn;
pub mod frame;
pub mod hold;
pub mod load;
pub mod qpack;
pub mod tls;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};

use crate::Setup;

/// What every `--h3` load thread shares.
pub struct H3Plan {
    pub config: quinn_proto::ClientConfig,
    /// The TLS server name (SNI), or the URL's IP address (then none is sent).
    pub server_name: String,
    /// A request stream's content: one HEADERS frame.
    pub frame: Vec<u8>,
}

impl H3Plan {
    /// The plan for `setup`'s URL with the -H fields (lower-cased names; the fields HTTP/3
    /// forbids left out), `idle` the QUIC idle timeout and `keep_alive` the PING interval.
    pub fn new(
        setup: &Setup,
        headers: &[String],
        idle: Duration,
        keep_alive: Option<Duration>,
    ) -> Result<H3Plan, String> {
        if !setup.url.tls {
            return Err("--h3 needs an https:// URL (HTTP/3 is always over TLS)".into());
        }
        let mut extra = Vec::new();
        let mut authority = setup.url.host_header();
        for h in headers {
            let Some((name, value)) = h.split_once(':') else {
                continue;
            };
            let name = name.trim().to_ascii_lowercase();
            if name == "host" {
                // As in the TCP modes, a Host header replaces the URL's: here :authority.
                authority = value.trim().to_string();
                continue;
            }
            if matches!(
                name.as_str(),
                "connection" | "keep-alive" | "te" | "upgrade" | "transfer-encoding"
            ) {
                continue;
            }
            extra.push((name, value.trim().to_string()));
        }
        let section = qpack::request_section(true, &authority, &setup.url.path, &extra);
        let server_name = match &setup.tls {
            Some((Some(sni), _)) => sni.clone(),
            _ => setup.url.host.clone(),
        };
        Ok(H3Plan {
            config: tls::client_config(idle, keep_alive)?,
            server_name,
            frame: frame::headers_frame(&section),
        })
    }
}

/// One QUIC handshake with `addr` within `timeout`: Ok once the server agreed to `h3`, or
/// why not, in words.
pub fn probe(addr: SocketAddr, plan: &H3Plan, timeout: Duration) -> Result<(), String> {
    let mut conn = conn::H3Conn::open(addr, &plan.config, &plan.server_name)
        .map_err(|e| format!("cannot open a QUIC connection to udp {addr}: {e}"))?;
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    poll.registry()
        .register(&mut conn.socket, Token(0), Interest::READABLE)
        .map_err(|e| e.to_string())?;
    conn.flush();
    let until = Instant::now() + timeout;
    let mut events = Events::with_capacity(8);
    let mut scratch = vec![0; 65_535];
    let mut done = Vec::new();
    loop {
        let now = Instant::now();
        if now >= until {
            return Err(format!(
                "no QUIC handshake with udp {addr} within {timeout:?}: nothing answered (no HTTP/3 listener there, or its datagrams are dropped)"
            ));
        }
        let wake = conn.deadline().unwrap_or(until).min(until);
        let _ = poll.poll(&mut events, Some(wake.saturating_duration_since(now)));
        if let Err(e) = conn.recv(&mut scratch) {
            return Err(format!(
                "no QUIC server at udp {addr}: {e} (nothing listens on that UDP port: is the server's HTTP/3 listener on?)"
            ));
        }
        if conn.deadline().is_some_and(|at| at <= Instant::now()) {
            conn.on_timeout(Instant::now());
        }
        conn.drive(&mut done)
            .map_err(|e| format!("QUIC handshake with udp {addr} failed: {e}"))?;
        if conn.state == conn::State::Ready {
            // Our Finished first: closed without it, the server would count a handshake
            // abandoned by the client (APPLICATION_ERROR) in every run.
            conn.flush();
            conn.close();
            return Ok(());
        }
        conn.flush();
    }
}
