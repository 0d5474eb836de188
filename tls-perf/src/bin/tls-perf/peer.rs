//! One peer: a closed loop of non-blocking connect -> TLS handshake -> (with TLS 1.3 tickets,
//! wait for the NewSessionTicket) -> close with RST -> reconnect.
//!
//! The TLS handshake starts right after `connect()` without waiting for writability: on
//! loopback the TCP handshake usually completes inside `connect()`, and if it has not, the
//! ClientHello write returns EAGAIN and the peer waits for the writable event like any other.

use std::fmt::Display;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ktls::resume::{ClientSession, OfferError};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use openssl::ssl::{ErrorCode, ShutdownState, Ssl, SslContext, SslStream, SslVersion};
use socket2::SockRef;

/// A connect plus handshake that takes longer than this is abandoned and counted as a timeout,
/// so a hung server cannot stall a peer forever. Generous, because an overloaded server's
/// latency is (peers / handshake rate), and SYN retransmits after a full listen queue take
/// 1, 3, 7, 15 s: a real handshake must never be cut short.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause after a failure before the peer tries again, so a dead server is not hammered.
pub const RETRY_DELAY: Duration = Duration::from_millis(50);
/// Bounds of the wait for a TLS 1.3 NewSessionTicket after a handshake. Servers send it right
/// after the client's Finished, so it arrives within one server turn; a loaded server's turn
/// is longer, so once the server has shown that it sends tickets, the bound follows the
/// handshake's own latency between these limits. Until then the bound stays at the minimum:
/// with a server that sends none and serves one connection at a time, every wait holds the
/// whole server up.
pub const TICKET_WAIT_MIN: Duration = Duration::from_millis(250);
pub const TICKET_WAIT_MAX: Duration = Duration::from_secs(1);

/// What all the peers of one worker share.
pub struct PeerEnv<'a> {
    pub ctx: &'a SslContext,
    pub registry: &'a Registry,
    pub target: SocketAddr,
    pub sni: Option<&'a str>,
    /// `--tickets on`: offer the last session received, keep new ones.
    pub resume: bool,
    /// Wait for a TLS 1.3 ticket after each handshake (`--tickets on`, unless the worker
    /// found that the server sends none).
    pub wait_for_ticket: bool,
    /// This worker has received a TLS 1.3 ticket before.
    pub tickets_seen: bool,
    pub debug: bool,
}

enum Stage {
    /// No connection; `retry_at` is set after a failure.
    Idle { retry_at: Option<Instant> },
    Handshaking {
        tls: SslStream<TcpStream>,
        started: Instant,
        /// The ClientHello went out, so the TCP connection is established.
        connected: bool,
        /// Registered for writability too (a write returned EAGAIN).
        wants_write: bool,
    },
    AwaitingTicket {
        tls: SslStream<TcpStream>,
        deadline: Instant,
    },
}

/// What the progress line shows about a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageKind {
    Idle,
    Connecting,
    Handshaking,
    AwaitingTicket,
}

#[derive(Debug, Clone, Copy)]
pub struct Handshake {
    /// From `connect()` to the completed handshake.
    pub latency: Duration,
    pub resumed: bool,
}

/// What became of the TLS 1.3 ticket wait when a handshake completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketWait {
    /// No wait (TLS 1.2, tickets not on, a resumed handshake); closed.
    None,
    /// Still open, waiting; a `TicketSettled` outcome follows.
    Pending,
    /// Settled at once (with or without a ticket); closed.
    Settled { received: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Refused, unreachable, no local port.
    Connect,
    /// Reset or closed by the server during the handshake.
    Reset,
    /// A TLS alert or protocol error.
    Handshake,
    /// No handshake within HANDSHAKE_TIMEOUT.
    Timeout,
}

#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    /// Waiting for readiness or a timer.
    Pending,
    /// The handshake completed; `ticket` says whether the connection is gone (the peer is
    /// ready to reconnect) or stays open to wait for a session ticket.
    Completed {
        handshake: Handshake,
        ticket: TicketWait,
    },
    /// The wait for a ticket ended (with or without one); the peer is ready to reconnect.
    TicketSettled { received: bool },
    /// The attempt failed; the peer retries after RETRY_DELAY.
    Failed(Failure),
}

pub struct Peer {
    token: Token,
    stage: Stage,
    /// The newest session this peer received, offered on its next connection.
    session: Option<ClientSession>,
}

impl Peer {
    pub fn new(token: Token) -> Peer {
        Peer {
            token,
            stage: Stage::Idle { retry_at: None },
            session: None,
        }
    }

    pub fn stage_kind(&self) -> StageKind {
        match &self.stage {
            Stage::Idle { .. } => StageKind::Idle,
            Stage::Handshaking {
                connected: false, ..
            } => StageKind::Connecting,
            Stage::Handshaking { .. } => StageKind::Handshaking,
            Stage::AwaitingTicket { .. } => StageKind::AwaitingTicket,
        }
    }

    /// Opens a new connection and starts the handshake.
    pub fn connect(&mut self, env: &PeerEnv, now: Instant) -> Outcome {
        self.close(env);
        let mut stream = match TcpStream::connect(env.target) {
            Ok(stream) => stream,
            Err(e) => return self.fail(Failure::Connect, &e, env, now),
        };
        // As upstream: handshake flights must not wait for Nagle.
        let _ = stream.set_nodelay(true);
        if let Err(e) = env.registry.register(
            &mut stream,
            self.token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            return self.fail(Failure::Connect, &e, env, now);
        }
        let tls = match self
            .new_ssl(env)
            .and_then(|ssl| SslStream::new(ssl, stream).map_err(OfferError::OpenSsl))
        {
            Ok(tls) => tls,
            Err(e) => return self.fail(Failure::Handshake, &e, env, now),
        };
        self.stage = Stage::Handshaking {
            tls,
            started: now,
            connected: false,
            wants_write: false,
        };
        self.drive_handshake(env)
    }

    /// The socket is readable or writable.
    pub fn on_ready(&mut self, env: &PeerEnv) -> Outcome {
        match self.stage {
            Stage::Idle { .. } => Outcome::Pending,
            Stage::Handshaking { .. } => self.drive_handshake(env),
            Stage::AwaitingTicket { .. } => self.read_ticket(env),
        }
    }

    /// Timers: retry after a failure, handshake timeout, ticket wait bound.
    pub fn on_tick(&mut self, env: &PeerEnv, now: Instant) -> Outcome {
        match &self.stage {
            Stage::Idle {
                retry_at: Some(at), ..
            } if now >= *at => self.connect(env, now),
            Stage::Handshaking { started, .. } if now - *started >= HANDSHAKE_TIMEOUT => {
                let why = format!("no handshake within {} s", HANDSHAKE_TIMEOUT.as_secs());
                self.fail(Failure::Timeout, &why, env, now)
            }
            Stage::AwaitingTicket { deadline, .. } if now >= *deadline => {
                self.close(env);
                Outcome::TicketSettled { received: false }
            }
            _ => Outcome::Pending,
        }
    }

    fn new_ssl(&self, env: &PeerEnv) -> Result<Ssl, OfferError> {
        let mut ssl = Ssl::new(env.ctx)?;
        if let Some(name) = env.sni {
            ssl.set_hostname(name)?;
        }
        if env.resume {
            if let Some(session) = &self.session {
                // One context per worker and a peer never leaves its worker, so the session
                // is env.ctx's; `offer` checks it (OtherContext would be a bug, counted as a
                // failed handshake rather than resumed across contexts).
                session.offer(&mut ssl)?;
            }
        }
        Ok(ssl)
    }

    fn drive_handshake(&mut self, env: &PeerEnv) -> Outcome {
        let Stage::Handshaking {
            tls,
            started,
            connected,
            wants_write,
        } = &mut self.stage
        else {
            return Outcome::Pending;
        };
        match tls.connect() {
            Ok(()) => {
                let handshake = Handshake {
                    latency: started.elapsed(),
                    resumed: tls.ssl().session_reused(),
                };
                let is_tls13 = tls.ssl().version2() == Some(SslVersion::TLS1_3);
                // After a resumption the peer keeps the session it offered, so only a full
                // TLS 1.3 handshake needs to wait for its ticket.
                if env.wait_for_ticket
                    && is_tls13
                    && !handshake.resumed
                    && !has_resumable_session(tls)
                {
                    self.await_ticket(env, handshake)
                } else {
                    self.close(env);
                    Outcome::Completed {
                        handshake,
                        ticket: TicketWait::None,
                    }
                }
            }
            Err(e) if e.code() == ErrorCode::WANT_READ => {
                *connected = true;
                Outcome::Pending
            }
            Err(e) if e.code() == ErrorCode::WANT_WRITE => {
                // Still connecting (or a full send buffer): wait for writability as well.
                if !*wants_write {
                    *wants_write = true;
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if let Err(e) = env.registry.reregister(tls.get_mut(), self.token, interest) {
                        return self.fail(Failure::Connect, &e, env, Instant::now());
                    }
                }
                Outcome::Pending
            }
            Err(e) => {
                let failure = classify(&e);
                self.fail(failure, &e, env, Instant::now())
            }
        }
    }

    /// TLS 1.3 sends tickets after the handshake: keep the connection until one arrives, but
    /// try to read it at once, since it often came with the server's last flight.
    fn await_ticket(&mut self, env: &PeerEnv, handshake: Handshake) -> Outcome {
        let stage = std::mem::replace(&mut self.stage, Stage::Idle { retry_at: None });
        if let Stage::Handshaking { tls, .. } = stage {
            let wait = if env.tickets_seen {
                handshake.latency.clamp(TICKET_WAIT_MIN, TICKET_WAIT_MAX)
            } else {
                TICKET_WAIT_MIN
            };
            self.stage = Stage::AwaitingTicket {
                tls,
                deadline: Instant::now() + wait,
            };
        }
        let ticket = match self.read_ticket(env) {
            Outcome::TicketSettled { received } => TicketWait::Settled { received },
            _ => TicketWait::Pending,
        };
        Outcome::Completed { handshake, ticket }
    }

    fn read_ticket(&mut self, env: &PeerEnv) -> Outcome {
        let Stage::AwaitingTicket { tls, .. } = &mut self.stage else {
            return Outcome::Pending;
        };
        // A NewSessionTicket is handled inside SSL_read, which returns WANT_READ when no
        // application data follows; the ticket replaces the connection's session.
        let mut scratch = [0u8; 256];
        loop {
            let result = tls.ssl_read(&mut scratch);
            if has_resumable_session(tls) {
                self.close(env);
                return Outcome::TicketSettled { received: true };
            }
            match result {
                Ok(n) if n > 0 => continue,
                Err(e) if e.code() == ErrorCode::WANT_READ => return Outcome::Pending,
                _ => {
                    // Closed or failed after a completed handshake: no ticket, not an error.
                    self.close(env);
                    return Outcome::TicketSettled { received: false };
                }
            }
        }
    }

    fn fail(
        &mut self,
        failure: Failure,
        detail: &dyn Display,
        env: &PeerEnv,
        now: Instant,
    ) -> Outcome {
        if env.debug {
            eprintln!("peer {}: {failure:?} error: {detail}", self.token.0);
        }
        self.close(env);
        self.stage = Stage::Idle {
            retry_at: Some(now + RETRY_DELAY),
        };
        Outcome::Failed(failure)
    }

    /// Drops the connection, keeping its session if it can be resumed.
    fn close(&mut self, env: &PeerEnv) {
        let stage = std::mem::replace(&mut self.stage, Stage::Idle { retry_at: None });
        let tls = match stage {
            Stage::Handshaking { tls, .. } | Stage::AwaitingTicket { tls, .. } => tls,
            Stage::Idle { .. } => return,
        };
        if env.resume && has_resumable_session(&tls) {
            let session = match crate::tls::ticket_session(tls.ssl()) {
                Some(received) => Some(received.clone()),
                None => ClientSession::of(tls.ssl()),
            };
            if let Some(session) = session {
                self.session = Some(session);
            }
        }
        reset(tls);
    }

    /// Drops any connection at the end of the run.
    pub fn abandon(&mut self) {
        let stage = std::mem::replace(&mut self.stage, Stage::Idle { retry_at: None });
        if let Stage::Handshaking { tls, .. } | Stage::AwaitingTicket { tls, .. } = stage {
            reset(tls);
        }
    }
}

/// Closes with RST (SO_LINGER 0), as upstream does: no FIN exchange and no TIME-WAIT, so a
/// long run does not exhaust local ports.
fn reset(mut tls: SslStream<TcpStream>) {
    // Freeing an SSL that did not shut down marks its session not resumable; these flags
    // (no I/O, no close_notify) keep the session usable.
    tls.set_shutdown(ShutdownState::SENT | ShutdownState::RECEIVED);
    let _ = SockRef::from(tls.get_ref()).set_linger(Some(Duration::ZERO));
    // Dropping the stream frees the SSL and closes the socket, which also removes it from
    // the poller.
}

/// Whether the connection's session can be resumed: it has an identifier, which OpenSSL sets
/// for a TLS 1.2 session ID or ticket and, in TLS 1.3, only when a NewSessionTicket arrives
/// (the echoed legacy session ID of a TLS 1.3 ServerHello is not kept). On AWS-LC: a ticket's
/// session arrived through the new-session callback (crate::tls::ticket_session).
fn has_resumable_session(tls: &SslStream<TcpStream>) -> bool {
    if ktls::settings::is_aws_lc() {
        return crate::tls::ticket_session(tls.ssl()).is_some();
    }
    tls.ssl().session().is_some_and(|s| !s.id().is_empty())
}

/// Sorts a failed handshake step into the categories of the report.
fn classify(error: &openssl::ssl::Error) -> Failure {
    if let Some(io) = error.io_error() {
        return match io.kind() {
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::AddrNotAvailable
            | io::ErrorKind::TimedOut => Failure::Connect,
            _ => Failure::Reset,
        };
    }
    if error.code() == ErrorCode::SSL {
        // OpenSSL 3 reports a server that closed without an alert as an SSL error.
        let eof = error.ssl_error().is_some_and(|stack| {
            stack
                .errors()
                .iter()
                .any(|e| e.reason().is_some_and(|r| r.contains("unexpected eof")))
        });
        return if eof {
            Failure::Reset
        } else {
            Failure::Handshake
        };
    }
    Failure::Reset
}
