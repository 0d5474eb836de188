//! A client's TLS: the session a new connection's handshake runs in, and the hand-over of a
//! finished handshake's record protection to the connection's transport.

use std::net::IpAddr;
use std::os::fd::AsFd;

use ktls::offload::{offload, Offload};
use ktls::TlsSession;
use openssl::ssl::Ssl;

use crate::metrics::TlsPath;
use crate::runtime::Runtime;
use crate::socket::Socket;
use crate::transport::Transport;

/// A server-side TLS session on `sock` with the listener's ALPN policy; `None` when the
/// worker has no TLS context or OpenSSL refuses.
pub fn start_tls(rt: &Runtime, sock: &Socket, alpn: crate::alpn::Alpn) -> Option<TlsSession> {
    let ctx = &rt.tls.as_ref()?.accept;
    let mut ssl = Ssl::new(ctx).ok()?;
    ssl.set_accept_state();
    crate::alpn::set_policy(&mut ssl, alpn);
    ktls::offload::prepare_ssl(&mut ssl).ok()?;
    TlsSession::new(ssl, sock.as_fd()).ok()
}

/// Whether a finished handshake was a TLS-ALPN-01 validation (logged): the handshake was
/// the answer, no HTTP follows (RFC 8737 §3).
pub fn acme_validation(session: &TlsSession, peer: IpAddr) -> bool {
    // The context decides, not only the agreed protocol: a handshake switched to the
    // validation context is never served HTTP, even if its client agreed no ALPN.
    let agreed = session.ssl().selected_alpn_protocol() == Some(crate::acme::tls_alpn::ACME_TLS_1);
    if !agreed && !crate::acme::tls_alpn::in_validation_context(session.ssl()) {
        return false;
    }
    crate::info!(
        "acme: tls-alpn-01 validation handshake from {} for {}",
        peer,
        session
            .ssl()
            .servername(openssl::ssl::NameType::HOST_NAME)
            .unwrap_or("-")
    );
    true
}

/// Hands a finished handshake's record protection over (`ktls::offload`: to the kernel, to
/// the proxy's record layer, or kept in OpenSSL) and counts the path it took and why a
/// faster one was not possible.
pub fn open_transport(
    session: TlsSession,
    fd: std::os::fd::BorrowedFd<'_>,
    mode: ktls::offload::KtlsMode,
    metrics: &crate::metrics::Metrics,
) -> Transport {
    match offload(session, fd, mode) {
        Offload::Kernel(socket) => {
            metrics.count_tls_path(TlsPath::KtlsBoth);
            Transport::Kernel(socket)
        }
        Offload::Records { mut socket, reason } => {
            metrics.count_tls_path(TlsPath::Records);
            metrics.count_ktls_fallback(reason.as_str());
            // The worker's loop reports every readiness event (`client::readable`).
            socket.track_readiness();
            Transport::Records(*socket)
        }
        Offload::UserSpace {
            session,
            send_offloaded,
            reason,
        } => {
            metrics.count_tls_path(if send_offloaded {
                TlsPath::KtlsSendOnly
            } else {
                TlsPath::UserSpace
            });
            metrics.count_ktls_fallback(reason.as_str());
            Transport::Tls(Box::new(session), 0)
        }
    }
}
