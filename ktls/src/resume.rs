//! Client-side session resumption without `unsafe` in the caller.
//!
//! `SSL_set_session` needs the session to belong to the context the connection was made
//! from, and OpenSSL does not check it (which is why the `openssl` crate marks
//! `SslRef::set_session` unsafe). [`ClientSession`] keeps the context beside the session
//! (a counted reference, so its address cannot be reused by another context) and
//! [`ClientSession::offer`] compares it with the connection's current context before the
//! call: the requirement is checked, not promised.

use std::fmt;

use openssl::error::ErrorStack;
use openssl::ssl::{SslContext, SslContextRef, SslRef, SslSession, SslSessionRef};

/// A session received on a client connection, tied to that connection's context.
#[derive(Clone)]
pub struct ClientSession {
    context: SslContext,
    session: SslSession,
}

/// Why a session was not offered.
#[derive(Debug)]
pub enum OfferError {
    /// The connection was made from another context than the session's: resuming across
    /// contexts is what `SSL_set_session` forbids. Keep one session per context.
    OtherContext,
    /// OpenSSL refused the session.
    OpenSsl(ErrorStack),
}

impl fmt::Display for OfferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OfferError::OtherContext => f.write_str(
                "session offered on a connection of another SSL context (keep one per context)",
            ),
            OfferError::OpenSsl(e) => write!(f, "SSL_set_session: {e}"),
        }
    }
}

impl std::error::Error for OfferError {}

impl From<ErrorStack> for OfferError {
    fn from(e: ErrorStack) -> OfferError {
        OfferError::OpenSsl(e)
    }
}

impl ClientSession {
    /// The session connection `ssl` holds now (after its handshake, or after a ticket),
    /// with `ssl`'s context.
    pub fn of(ssl: &SslRef) -> Option<ClientSession> {
        let session = ssl.session()?.to_owned();
        Some(ClientSession::received(ssl, session))
    }

    /// `session` arrived on connection `ssl` (a new-session callback's two arguments).
    pub fn received(ssl: &SslRef, session: SslSession) -> ClientSession {
        ClientSession {
            context: ssl.ssl_context().to_owned(),
            session,
        }
    }

    pub fn session(&self) -> &SslSessionRef {
        &self.session
    }

    /// The context the session belongs to: make the connection that resumes it from this.
    pub fn context(&self) -> &SslContextRef {
        &self.context
    }

    /// Offers the session for resumption on `ssl`, a connection not yet handshaken. Refused
    /// (and nothing changed) when `ssl`'s context is not the session's.
    pub fn offer(&self, ssl: &mut SslRef) -> Result<(), OfferError> {
        if !std::ptr::eq(ssl.ssl_context(), &*self.context) {
            return Err(OfferError::OtherContext);
        }
        // SAFETY: SSL_set_session's requirement, a session of the connection's own context,
        // was just checked: the session was received on a connection whose context is
        // `self.context`, which is `ssl`'s current context (pointer identity; `self.context`
        // holds a reference, so that address names no other context). OpenSSL takes its own
        // reference to the session.
        unsafe { ssl.set_session(&self.session) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::ssl::{SslMethod, SslVersion};

    fn context() -> SslContext {
        let mut b = SslContext::builder(SslMethod::tls_client()).unwrap();
        crate::settings::set_protocol_versions(&mut b, SslVersion::TLS1_2, SslVersion::TLS1_3)
            .unwrap();
        b.build()
    }

    /// A session is offered on connections of its own context only.
    #[test]
    fn a_session_is_offered_only_in_its_own_context() {
        let (ours, other) = (context(), context());
        let donor = openssl::ssl::Ssl::new(&ours).unwrap();
        // A fresh SSL has no session yet; a session from the serialised form stands in for
        // one received (what matters here is the context check, not the handshake).
        assert!(ClientSession::of(&donor).is_none());
        let session = sample_session();
        let held = ClientSession::received(&donor, session);
        let mut same = openssl::ssl::Ssl::new(&ours).unwrap();
        held.offer(&mut same).unwrap();
        assert_eq!(
            same.session().map(|s| s.id().to_vec()),
            Some(held.session().id().to_vec())
        );
        let mut foreign = openssl::ssl::Ssl::new(&other).unwrap();
        assert!(matches!(
            held.offer(&mut foreign),
            Err(OfferError::OtherContext)
        ));
        assert!(foreign.session().is_none());
    }

    /// A TLS 1.2 session in DER (ASN.1 SSL_SESSION): version, cipher 0xC02F, a 32-byte id,
    /// a 48-byte master key. Built field by field so the test needs no server.
    fn sample_session() -> SslSession {
        let mut body = Vec::new();
        body.extend_from_slice(&[0x02, 0x01, 0x01]); // version 1
        body.extend_from_slice(&[0x02, 0x02, 0x03, 0x03]); // TLS 1.2
        body.extend_from_slice(&[0x04, 0x02, 0xC0, 0x2F]); // cipher
        body.extend_from_slice(&[0x04, 0x20]);
        body.extend_from_slice(&[7u8; 32]); // session id
        body.extend_from_slice(&[0x04, 0x30]);
        body.extend_from_slice(&[9u8; 48]); // master key
                                            // [1] time and [2] timeout: optional for OpenSSL, required by AWS-LC.
        body.extend_from_slice(&[0xA1, 0x03, 0x02, 0x01, 0x01]); // time 1
        body.extend_from_slice(&[0xA2, 0x04, 0x02, 0x02, 0x01, 0x2C]); // timeout 300 s
        let mut der = vec![0x30, body.len() as u8];
        der.extend_from_slice(&body);
        SslSession::from_der(&der).unwrap()
    }
}
