//! TLS to a group's servers (`server_tls`, an extension): the client context each group with
//! TLS gets when a configuration loads, the session each new connection starts from (SNI,
//! the certificate check against the CA and the server's name or IP address, the client
//! certificate, ALPN `http/1.1` (`h2` for `server_proto h2`), the server's last session offered for resumption), and a
//! failed handshake's reason in words.
//!
//! Sessions are kept per server of the group, the last one each server gave (TLS 1.3
//! tickets arrive after the handshake, through the new-session callback; TLS 1.2 sessions at
//! its end). A reload builds new contexts, so the first connection after it is a full
//! handshake.

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use ktls::resume::ClientSession;
use ktls::{TlsError, TlsSession};
use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslFiletype, SslMethod, SslMode, SslRef,
    SslSessionCacheMode, SslVerifyMode, SslVersion,
};
use openssl::x509::verify::X509CheckFlags;
use openssl::x509::X509VerifyResult;

/// The protocol offered to an HTTP/1.1 group: HTTP/1.1 only.
const ALPN: &[u8] = b"\x08http/1.1";
/// The protocol offered to a `server_proto h2` group: h2 only. Its connections speak
/// HTTP/2 from their first byte; a server that does not choose `h2` gets no request
/// (`worker/h2_origin.rs` `alpn_agreed`).
const ALPN_H2: &[u8] = b"\x02h2";

/// Where the system's trust store usually is, when `server_tls_ca` is not given (Debian and
/// its kind; Fedora and its kind).
const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// One group's TLS to its servers.
pub struct UpstreamTls {
    ctx: SslContext,
    sni: Option<String>,
    /// The DNS name each server was given by, by server index (`server NAME`): the name
    /// sent and checked when `server_tls_sni` does not set one.
    names: Vec<Option<String>>,
    verify: bool,
    /// The last session each server gave, by server index in the group.
    sessions: Arc<[Mutex<Option<ClientSession>>]>,
}

/// The index of a connection's server in its group, kept on the SSL object for the
/// new-session callback.
fn server_index() -> Option<Index<Ssl, usize>> {
    static INDEX: OnceLock<Option<Index<Ssl, usize>>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index().ok())
}

impl UpstreamTls {
    /// The context for `group`'s servers, its files read now. The error says what failed
    /// in words (the files were checked by the configuration crate already: what is left is
    /// a key that does not match its certificate, or a store OpenSSL refuses).
    pub fn build(group: &config::ServerGroup, tls: &config::ServerTls) -> Result<Self, String> {
        let named = |what: &str, e: ErrorStack| format!("{what}: {}", first_reason(&e));
        let mut b = SslContextBuilder::new(SslMethod::tls_client())
            .map_err(|e| named("TLS client context", e))?;
        ktls::settings::set_protocol_versions(&mut b, SslVersion::TLS1_2, SslVersion::TLS1_3)
            .map_err(|e| named("protocol versions", e))?;
        // Pooled connections keep no record buffers while idle; a write retried after
        // WantWrite offers the same bytes from wherever the outbox holds them now
        // (`transport::write_tls`), as on the client side (`ktls::ossl`).
        b.set_mode(SslMode::RELEASE_BUFFERS | SslMode::ACCEPT_MOVING_WRITE_BUFFER);
        let alpn = match group.proto {
            config::ServerProto::H2 => ALPN_H2,
            config::ServerProto::Http1 => ALPN,
        };
        b.set_alpn_protos(alpn).map_err(|e| named("ALPN", e))?;
        if tls.verify {
            b.set_verify(SslVerifyMode::PEER);
            trust(&mut b, tls.ca.as_deref())?;
        } else {
            b.set_verify(SslVerifyMode::NONE);
        }
        if let Some((crt, key)) = &tls.cert {
            let file = |p: &Path, e| named(&format!("server_tls_cert {}", p.display()), e);
            b.set_certificate_chain_file(crt)
                .map_err(|e| file(crt, e))?;
            b.set_private_key_file(key, SslFiletype::PEM)
                .map_err(|e| file(key, e))?;
            b.check_private_key().map_err(|e| file(key, e))?;
        }
        let sessions: Arc<[Mutex<Option<ClientSession>>]> =
            group.servers.iter().map(|_| Mutex::new(None)).collect();
        if let Some(index) = server_index() {
            let store = Arc::clone(&sessions);
            // OpenSSL's own cache is for servers: the sessions are kept here, per server.
            b.set_session_cache_mode(
                SslSessionCacheMode::CLIENT | SslSessionCacheMode::NO_INTERNAL,
            );
            b.set_new_session_callback(move |ssl, session| {
                let slot = ssl.ex_data(index).and_then(|&i| store.get(i));
                if let Some(mut held) = slot.and_then(|s| s.lock().ok()) {
                    *held = Some(ClientSession::received(ssl, session));
                }
            });
        }
        Ok(UpstreamTls {
            ctx: b.build(),
            sni: tls.sni.clone(),
            names: group
                .servers
                .iter()
                .map(|s| s.name.as_ref().map(|n| n.host.clone()))
                .collect(),
            verify: tls.verify,
            sessions,
        })
    }

    /// A client session for a new connection to server `server` (at `addr`) of the group,
    /// on the socket `fd` (connecting: nothing is sent until its handshake is driven).
    pub fn start(
        &self,
        server: usize,
        addr: SocketAddr,
        fd: BorrowedFd<'_>,
    ) -> Result<TlsSession, String> {
        let mut ssl = Ssl::new(&self.ctx).map_err(|e| first_reason(&e))?;
        ssl.set_connect_state();
        if let Some(index) = server_index() {
            ssl.set_ex_data(index, server);
        }
        // A server given by name is that name's, as a browser's connection to it would be.
        let sni = self
            .sni
            .as_deref()
            .or_else(|| self.names.get(server)?.as_deref());
        if let Some(name) = sni {
            ssl.set_hostname(name).map_err(|e| first_reason(&e))?;
        }
        if self.verify {
            let param = ssl.param_mut();
            param.set_hostflags(X509CheckFlags::NO_PARTIAL_WILDCARDS);
            match sni {
                Some(name) => param.set_host(name),
                None => param.set_ip(addr.ip()),
            }
            .map_err(|e| first_reason(&e))?;
        }
        let last = self
            .sessions
            .get(server)
            .and_then(|s| s.lock().ok()?.clone());
        if let Some(session) = last {
            // Received on a connection of this very context; a refusal only means a full
            // handshake.
            let _ = session.offer(&mut ssl);
        }
        TlsSession::new(ssl, fd).map_err(|e| e.to_string())
    }
}

/// The CA bundle to verify against: `server_tls_ca`, else the system's.
fn trust(b: &mut SslContextBuilder, ca: Option<&Path>) -> Result<(), String> {
    if let Some(ca) = ca {
        return b
            .set_ca_file(ca)
            .map_err(|e| format!("server_tls_ca {}: {}", ca.display(), first_reason(&e)));
    }
    let system = SYSTEM_CA_FILES.iter().find(|p| Path::new(p).is_file());
    match system {
        Some(file) => b
            .set_ca_file(file)
            .map_err(|e| format!("system CA bundle {file}: {}", first_reason(&e))),
        None => Err(format!(
            "no server_tls_ca and no system CA bundle ({}): give `server_tls_ca FILE;`",
            SYSTEM_CA_FILES.join(", ")
        )),
    }
}

/// Whether a failed handshake was the certificate check's refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Verify,
    Other,
}

/// A failed handshake's reason in words: the certificate check's verdict when it refused
/// (`certificate verify failed: Hostname mismatch`), else OpenSSL's reason or what happened
/// to the socket.
pub fn failure(ssl: &SslRef, err: &TlsError) -> (Failure, String) {
    let verdict = ssl.verify_result();
    // Without the server's certificate the verdict is only "not verified" (the handshake
    // broke off before: an alert, such as no ALPN protocol in common): the reason is there.
    if verdict != X509VerifyResult::OK && ssl.peer_certificate().is_some() {
        let text = format!("certificate verify failed: {}", verdict.error_string());
        return (Failure::Verify, text);
    }
    let text = match err {
        TlsError::Protocol(stack) => reason_of(stack),
        TlsError::UnexpectedEof => "the server closed the connection without close_notify".into(),
        other => other.to_string(),
    };
    (Failure::Other, text)
}

/// The reason field of the first error of an OpenSSL error stack's text
/// (`error:CODE:LIBRARY:FUNCTION:REASON:FILE:LINE:`), in words (AWS-LC writes reasons as
/// `SSLV3_ALERT_HANDSHAKE_FAILURE`).
fn reason_of(stack: &str) -> String {
    let first = stack.split(", error:").next().unwrap_or(stack);
    match first.split(':').nth(4).filter(|r| !r.is_empty()) {
        Some(reason) if reason.contains('_') => reason.to_ascii_lowercase().replace('_', " "),
        Some(reason) => reason.to_string(),
        None if stack.is_empty() => "handshake failed".into(),
        None => stack.to_string(),
    }
}

fn first_reason(e: &ErrorStack) -> String {
    reason_of(&e.to_string())
}

#[cfg(test)]
mod tests {
    use super::reason_of;

    #[test]
    fn reasons_are_read_from_either_librarys_error_text() {
        let ossl = "error:0A000410:SSL routines:ssl3_read_bytes:sslv3 alert handshake failure:ssl/record/rec_layer_s3.c:1605:SSL alert number 40";
        assert_eq!(reason_of(ossl), "sslv3 alert handshake failure");
        let awslc = "error:10000410:SSL routines:OPENSSL_internal:SSLV3_ALERT_HANDSHAKE_FAILURE:ssl/tls_record.cc:486:";
        assert_eq!(reason_of(awslc), "sslv3 alert handshake failure");
        assert_eq!(reason_of(""), "handshake failed");
    }
}
