//! The client's TLS context: no certificate verification (a load generator measures, it does
//! not authenticate), SNI, and optional session resumption with tickets on reconnect.

use std::sync::{Arc, Mutex};

use ktls::resume::ClientSession;
use openssl::error::ErrorStack;
use openssl::ssl::{
    Ssl, SslContext, SslMethod, SslMode, SslOptions, SslSessionCacheMode, SslVerifyMode,
};

/// One thread's TLS client: a context and, with tickets, the last session the server gave.
pub struct TlsClient {
    ctx: SslContext,
    sni: Option<String>,
    /// Filled by OpenSSL's new-session callback (TLS 1.3 tickets arrive after the handshake).
    session: Option<Arc<Mutex<Option<ClientSession>>>>,
}

impl TlsClient {
    pub fn new(sni: Option<String>, tickets: bool) -> Result<TlsClient, ErrorStack> {
        Self::build(sni, tickets, b"\x08http/1.1")
    }

    /// A client offering `alpn` (wire format: length-prefixed names), without tickets.
    pub fn with_alpn(sni: Option<String>, alpn: &[u8]) -> Result<TlsClient, ErrorStack> {
        Self::build(sni, false, alpn)
    }

    fn build(sni: Option<String>, tickets: bool, alpn: &[u8]) -> Result<TlsClient, ErrorStack> {
        let mut b = SslContext::builder(SslMethod::tls_client())?;
        b.set_verify(SslVerifyMode::NONE);
        // Idle connections (hold mode) then keep no record buffers.
        b.set_mode(SslMode::RELEASE_BUFFERS);
        let session = if tickets {
            let slot: Arc<Mutex<Option<ClientSession>>> = Arc::new(Mutex::new(None));
            let store = Arc::clone(&slot);
            b.set_session_cache_mode(SslSessionCacheMode::CLIENT);
            b.set_new_session_callback(move |ssl, session| {
                if let Ok(mut s) = store.lock() {
                    *s = Some(ClientSession::received(ssl, session));
                }
            });
            Some(slot)
        } else {
            b.set_options(SslOptions::NO_TICKET);
            b.set_session_cache_mode(SslSessionCacheMode::OFF);
            None
        };
        b.set_alpn_protos(alpn)?;
        Ok(TlsClient {
            ctx: b.build(),
            sni,
            session,
        })
    }

    /// A new client-side TLS object, resuming the last session when tickets are on.
    pub fn ssl(&self) -> Result<Ssl, ErrorStack> {
        let mut ssl = Ssl::new(&self.ctx)?;
        ssl.set_connect_state();
        if let Some(sni) = &self.sni {
            ssl.set_hostname(sni)?;
        }
        if let Some(slot) = &self.session {
            let last = slot.lock().ok().and_then(|s| s.clone());
            if let Some(session) = last {
                // Received on a connection of this very context, so `offer` accepts it; a
                // refusal only means a full handshake.
                let _ = session.offer(&mut ssl);
            }
        }
        Ok(ssl)
    }
}
