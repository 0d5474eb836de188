//! What the worker asks of [`crate::fingerprint`] at three points, as functions of the parts
//! they read (no `impl Worker`): when a TLS handshake completes (`on_handshake` over TCP,
//! `on_quic_handshake` over QUIC: the connection's `tft`, its JA4 for the access log, and
//! whether it may go on), when bytes arrive (`on_records`: the TLS records against its
//! `tft`), and when a request reaches its vhost (`on_request`: its `tfh`). The decisions are
//! `Fingerprints`'; the worker answers a refusal the way it answers frang's: a connection is
//! reset (a QUIC one closed with H3_EXCESSIVE_LOAD), a request gets `block_action attack`'s
//! answer, both counted as `blocks_total{limit="tft"|"tfh"}`.

use std::time::Instant;

use ktls::hello::ClientHello;
use openssl::ssl::SslRef;

use super::client::codec::Codec;
use super::client::{Client, Stage};
use super::request::Request;
use crate::alpn::Alpn;
use crate::fingerprint::{Fingerprints, Handshake, Ja4, RequestShape, Tfh, Tft, Verdict};
use crate::runtime::Runtime;

/// The `tfh` of a request (the access log's and the limits').
pub(super) fn tfh_of(request: &Request) -> Tfh {
    Tfh::of(RequestShape {
        method: request.method_bytes(),
        // The protocol the request came in (the neutral head does not say it otherwise).
        h2: matches!(request.version_label(), "HTTP/2.0" | "HTTP/3.0"),
        fields: request.fields(),
    })
}

/// What a completed handshake yields: the connection's fingerprints and whether it may go on.
pub(super) struct HandshakePrints {
    /// `None`: nothing was captured.
    pub tft: Option<Tft>,
    /// `None`: nothing was captured, or the access log (its only reader) was off.
    pub ja4: Option<Ja4>,
    pub verdict: Verdict,
}

/// A handshake completed on `ssl`: the connection's `tft` and JA4, from the ClientHello
/// captured during it, and whether the connection may go on.
pub(super) fn on_handshake(ssl: &mut SslRef, rt: &Runtime, now: Instant) -> HandshakePrints {
    let Some(hello) = ktls::hello::take(ssl) else {
        return HandshakePrints {
            tft: None,
            ja4: None,
            verdict: Ok(()),
        };
    };
    let alpn = crate::alpn::policy(ssl);
    let handshake = Handshake {
        http1: matches!(alpn, Alpn::Http1 | Alpn::Both),
        h2: matches!(alpn, Alpn::H2 | Alpn::Both),
        vhost_found: names_a_vhost(&hello, rt),
        resumed: ssl.session_reused(),
        quic: false,
    };
    let tft = Tft::of(&hello, handshake);
    HandshakePrints {
        tft: Some(tft),
        ja4: rt.config.access_log.enabled().then(|| Ja4::of(&hello)),
        verdict: rt.fingerprints.on_tls_connection(tft, now),
    }
}

/// A QUIC connection's handshake completed (quic::Work::Connected) with `hello` captured
/// (`quic_hello.rs`): its `tft` and JA4 (`q...`) kept on client `c` for the access log, as
/// TCP's are, and whether it may go on (the fingerprint's limits, then frang's
/// `tls_connection_rate`/`burst`). The ClientHello's listener offers `h3` only; a session
/// `resumed` with a ticket sets the fingerprint's bit and is not counted by frang's TLS
/// rate, as on TCP (there is no 0-RTT). A refused connection is closed here with
/// H3_EXCESSIVE_LOAD, as the flood budgets close (frang's limits are defences against load;
/// TCP resets instead), counted in `m`; the caller then ends its entry as a TCP refusal's.
pub(super) fn on_quic_handshake(
    c: &mut Client,
    (hello, resumed): (Option<ClientHello>, bool),
    (rt, m): (&Runtime, &crate::metrics_quic::QuicMetrics),
    now: Instant,
) -> Verdict {
    let prints = hello.map_or(Ok(()), |hello| {
        let handshake = Handshake {
            http1: false,
            h2: false,
            vhost_found: names_a_vhost(&hello, rt),
            resumed,
            quic: true,
        };
        let tft = Tft::of(&hello, handshake);
        c.tft = Some(tft);
        c.ja4 = rt.config.access_log.enabled().then(|| Ja4::of_quic(&hello));
        rt.fingerprints.on_tls_connection(tft, now)
    });
    // frang's TLS handshake rate, as a TCP handshake's (`client/conn.rs`).
    let verdict = (rt.frang)
        .on_tls_handshake(c.peer.ip(), resumed, now)
        .and(prints);
    if let (Err(_), Codec::H3(h3)) = (&verdict, &mut c.codec) {
        h3.close_excessive(m, ("proxy", ""), now);
    }
    verdict
}

/// Whether the server name `hello` sends is a vhost's.
fn names_a_vhost(hello: &ClientHello, rt: &Runtime) -> bool {
    hello.server_name().is_some_and(|name| {
        rt.vhosts
            .iter()
            .any(|v| v.name.as_bytes().eq_ignore_ascii_case(name))
    })
}

/// Bytes arrived on client `c`: the TLS records they came in against its `tft` (the proxy's
/// record layer counts them; on OpenSSL's records or the kernel's a read counts as one).
pub(super) fn on_records(c: &mut Client, fingerprints: &Fingerprints, now: Instant) -> Verdict {
    let (Some(tft), Stage::Open(transport)) = (c.tft, &c.stage) else {
        return Ok(());
    };
    let records = match transport.records_read() {
        Some(total) => {
            // A TLS 1.3 key update starts the numbering again.
            let new = total.checked_sub(c.tft_records).unwrap_or(total);
            c.tft_records = total;
            new
        }
        None => 1,
    };
    fingerprints.on_tls_records(tft, records, now)
}

/// A request reached its vhost: its `tfh` against the limits (computed only when a limit or
/// the blocklist may judge it).
#[inline]
pub(super) fn on_request(fingerprints: &Fingerprints, request: &Request, now: Instant) -> Verdict {
    if !fingerprints.judges_requests() {
        return Ok(());
    }
    fingerprints.on_request(tfh_of(request), now)
}
