//! Which application protocol a TLS listener offers (ALPN, RFC 7301), per connection: the
//! vhost's SSL context is shared by every listener, so the listener's choice travels on the
//! connection's SSL object.

use std::sync::OnceLock;

use config::Proto;
use openssl::ex_data::Index;
use openssl::ssl::{AlpnError, Ssl, SslRef};

/// What a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alpn {
    /// `proto=https`: HTTP/1.1 only.
    Http1,
    /// `proto=h2`: HTTP/2 only; a client that offers other protocols but not `h2` gets
    /// `no_application_protocol`.
    H2,
    /// `proto="h2,https"`: HTTP/2 when the client offers it, else HTTP/1.1.
    Both,
}

impl Alpn {
    pub fn of(protos: &[Proto]) -> Alpn {
        match (protos.contains(&Proto::H2), protos.contains(&Proto::Https)) {
            (true, true) => Alpn::Both,
            (true, false) => Alpn::H2,
            _ => Alpn::Http1,
        }
    }

    /// Our protocols in order of preference, in the wire format.
    fn wire(self) -> &'static [u8] {
        match self {
            Alpn::Http1 => b"\x08http/1.1",
            Alpn::H2 => b"\x02h2",
            Alpn::Both => b"\x02h2\x08http/1.1",
        }
    }
}

impl Alpn {
    /// The protocols offered, in order of preference, as the startup line names them
    /// (`h2, http/1.1`): read from the very bytes the select callback offers.
    pub fn offered(self) -> String {
        let mut names = Vec::new();
        let mut rest = self.wire();
        while let Some((&len, tail)) = rest.split_first() {
            let (name, next) = tail.split_at(usize::from(len).min(tail.len()));
            names.push(String::from_utf8_lossy(name).into_owned());
            rest = next;
        }
        names.join(", ")
    }
}

fn index() -> Option<Index<Ssl, Alpn>> {
    static INDEX: OnceLock<Option<Index<Ssl, Alpn>>> = OnceLock::new();
    *INDEX.get_or_init(|| Ssl::new_ex_index().ok())
}

/// Records the listener's policy on a new connection.
pub fn set_policy(ssl: &mut SslRef, policy: Alpn) {
    if let Some(i) = index() {
        ssl.set_ex_data(i, policy);
    }
}

/// The policy recorded on `ssl` (HTTP/1.1 only when none was).
pub fn policy(ssl: &SslRef) -> Alpn {
    index()
        .and_then(|i| ssl.ex_data(i).copied())
        .unwrap_or(Alpn::Http1)
}

/// The ALPN select callback of every server context.
pub fn select<'a>(ssl: &mut SslRef, client: &'a [u8]) -> Result<&'a [u8], AlpnError> {
    let policy = index()
        .and_then(|i| ssl.ex_data(i).copied())
        .unwrap_or(Alpn::Http1);
    // An ACME validation (RFC 8737) for a name with no challenge pending: refused, never
    // served a certificate it could take for an answer (`acme::tls_alpn`).
    if crate::acme::tls_alpn::only_acme_tls_1(client) {
        return Err(AlpnError::ALERT_FATAL);
    }
    match openssl::ssl::select_next_proto(policy.wire(), client) {
        Some(p) => Ok(p),
        // An h2-only listener refuses a client that cannot speak it; otherwise no protocol is
        // acknowledged and the client speaks HTTP/1.1, as with a server without ALPN.
        None if policy == Alpn::H2 => Err(AlpnError::ALERT_FATAL),
        None => Err(AlpnError::NOACK),
    }
}

/// Whether the handshake settled on HTTP/2 (an h2-only listener without ALPN: the client
/// must speak it by prior knowledge).
pub fn negotiated_h2(ssl: &SslRef) -> bool {
    let policy = index()
        .and_then(|i| ssl.ex_data(i).copied())
        .unwrap_or(Alpn::Http1);
    match ssl.selected_alpn_protocol() {
        Some(p) => p == b"h2",
        None => policy == Alpn::H2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offered_protocols_are_named_from_the_wire_list() {
        assert_eq!(
            Alpn::of(&[Proto::H2, Proto::Https]).offered(),
            "h2, http/1.1"
        );
        assert_eq!(Alpn::of(&[Proto::H2]).offered(), "h2");
        assert_eq!(Alpn::of(&[Proto::Https]).offered(), "http/1.1");
    }
}
