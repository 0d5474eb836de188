//! stale-while-revalidate (RFC 5861 §3): the client got the stale entry at once; the
//! revalidation runs as an exchange with no client. It goes upstream like any other (pools,
//! queues, retries, timeouts), and its response is relayed like any other
//! (`response/mod.rs`) into a fill-only sink: a 304 freshens the entry, a storable response
//! replaces it, an error leaves it as it was. The cache crate gives the fetch to one request
//! (the others get the stale entry meanwhile), so there is one background revalidation per
//! entry. This file builds the revalidation's request and exchange.

use std::time::Instant;

use http1::HeaderEdits;

use super::exchange::NewExchange;
use super::fill::Fill;
use super::request::Request;
use crate::frang::RequestLimits;

/// A revalidation to run without a client: its request, the fill holding the cache's fetch
/// reservation, and the stored validators to send.
pub struct Revalidation {
    request: Request,
    fill: Box<Fill>,
    edits: HeaderEdits,
}

/// Request fields the background request does not take from the client's: those that
/// make the answer conditional or partial (the cache's own validators are sent instead, so
/// the answer is a 304 or a whole response), and the body's framing (it has none).
fn client_only(name: &[u8]) -> bool {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    (name.len() > 3 && name[..3].eq_ignore_ascii_case(b"if-"))
        || is(b"range")
        || is(b"content-length")
        || is(b"transfer-encoding")
        || is(b"expect")
}

impl Revalidation {
    /// The revalidation of the entry `client`'s request was answered from: a GET of the
    /// same target with the client's fields (the key and the Vary-named fields stay the
    /// same) minus [`client_only`] ones. None when that head is not a valid request.
    pub fn new(
        client: &Request,
        limits: &http1::Limits,
        fill: impl FnOnce(&Request) -> Box<Fill>,
        edits: HeaderEdits,
    ) -> Option<Box<Revalidation>> {
        let request = revalidation_request(client, limits)?;
        let fill = fill(&request);
        Some(Box::new(Revalidation {
            request,
            fill,
            edits,
        }))
    }

    /// The exchange the revalidation runs as (no client, kept alive, `frang`'s request
    /// limits from `now`), the fill its response goes to, and the request edits that send
    /// the stored validators.
    pub fn into_exchange(
        self: Box<Self>,
        frang: &config::FrangGlobal,
        now: Instant,
    ) -> (NewExchange, Box<Fill>, HeaderEdits) {
        let Revalidation {
            request,
            fill,
            edits,
        } = *self;
        let exchange = NewExchange {
            client: super::client::ClientId::NONE,
            client_id: 0,
            stream: 0,
            request,
            keep_alive: true,
            log: None,
            limits: RequestLimits::new(frang, false, now),
        };
        (exchange, fill, edits)
    }
}

/// The GET a background revalidation sends for `client`'s request (see
/// [`Revalidation::new`]): built as a neutral head, judged by the same rules and limits as
/// the client's own; the upstream writer renders it.
fn revalidation_request(client: &Request, limits: &http1::Limits) -> Option<Request> {
    let capacity = client.bytes().len();
    let mut head = http1::RequestBuilder::new(b"GET", client.target(), capacity).ok()?;
    for (name, value) in client.fields().filter(|(n, _)| !client_only(n)) {
        head.field(name, value).ok()?;
    }
    let (parsed, bytes) = head.finish(false, limits).ok()?;
    Some(Request::built(parsed, bytes, client.scheme()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::request::Scheme;

    #[test]
    fn the_revalidation_is_a_plain_get_with_the_clients_other_fields() {
        let bytes = b"HEAD /a?b HTTP/1.0\r\nHost: site.test\r\nAccept-Encoding: gzip\r\n\
            Range: bytes=0-1\r\nIf-None-Match: \"x\"\r\nIF-RANGE: \"x\"\r\n\
            If-Match: *\r\nCookie: c=1\r\n\r\n";
        let limits = http1::Limits::default();
        let (head, _) = http1::parse_request(bytes, &limits).unwrap().unwrap();
        let client = Request::new(head, bytes, Scheme::Https);
        let request = revalidation_request(&client, &limits).unwrap();
        assert_eq!(request.method(), http1::Method::Get);
        assert_eq!(request.version(), http1::Version::Http11);
        assert_eq!(request.path(), b"/a?b");
        assert_eq!(request.scheme(), Scheme::Https);
        assert!(!request.has_body());
        let names: Vec<String> = request
            .fields()
            .map(|(n, _)| String::from_utf8_lossy(n).to_ascii_lowercase())
            .collect();
        assert_eq!(
            names,
            ["host", "accept-encoding", "cookie"],
            "Vary-named fields stay"
        );
    }
}
