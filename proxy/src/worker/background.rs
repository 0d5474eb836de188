//! stale-while-revalidate (RFC 5861 §3): the client got the stale entry at once; the
//! revalidation runs here as an exchange with no client. It goes upstream like any other
//! (pools, queues, retries, timeouts), and its end only updates the cache: a 304 freshens
//! the entry, a storable response replaces it, an error leaves it as it was. The cache
//! crate gives the fetch to one request (the others get the stale entry meanwhile), so
//! there is one background revalidation per entry.

use std::time::Instant;

use http1::{BodyDecoder, HeaderEdits};

use super::exchange::{ExchangeId, Forward, NewExchange, RespPhase};
use super::fill::Fill;
use super::finish::Outcome;
use super::h1::{self, ReplyTo};
use super::lifecycle::{body_end, BodyEnd, ResponseFraming};
use super::request::Request;
use super::response::{Failure, MAX_INTERIM_RESPONSES};
use super::upstream::UpstreamId;
use super::Worker;
use crate::frang::RequestLimits;
use crate::runtime::Runtime;

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

/// A response that may fill the entry: its head's pieces kept as a client's fetch would
/// store them, its body to be read into the fill. False when the head cannot be forwarded
/// (over the limits).
fn begin_store(
    fwd: &mut Forward,
    origin: super::fill::Origin<'_>,
    edits: &HeaderEdits,
    rt: &Runtime,
) -> bool {
    let (head, input) = (origin.head, origin.input);
    let store = fwd.fill.as_mut().map(|f| f.head_sink());
    let to = ReplyTo::default();
    if h1::relayed_head_fields(store, (head, input), edits, &rt.forward_limits, to).is_err() {
        return false;
    }
    if let Some(fill) = fwd.fill.as_mut() {
        fill.begin_store(head.status(), origin);
    }
    fwd.status = head.status();
    let limits = http1::Limits {
        max_body_bytes: None,
        ..rt.limits.clone()
    };
    fwd.resp = RespPhase::Body(BodyDecoder::new(head.framing(), &limits));
    true
}

/// One step of a background response, decided while the connections are borrowed.
enum Step {
    Wait,
    Moved,
    /// No usable response: the upstream connection is closed and the exchange fails (a
    /// replayable request is retried as any other).
    Failed(Failure),
    /// The exchange is over: the response was read to its end, or is abandoned.
    Done {
        response_complete: bool,
    },
}

impl Worker {
    /// Sends `revalidation` to `pass` (its group and backup) as an exchange without a client, routed as the
    /// request it stands for (`vhost`, `location`).
    pub(super) fn revalidate_in_background(
        &mut self,
        revalidation: Box<Revalidation>,
        vhost: Option<usize>,
        location: Option<usize>,
        pass: (usize, Option<usize>),
    ) {
        let Revalidation {
            request,
            fill,
            edits,
        } = *revalidation;
        let id = self.exchanges.insert(NewExchange {
            client: super::client::ClientId::NONE,
            client_id: 0,
            stream: 0,
            request,
            keep_alive: true,
            log: None,
            limits: RequestLimits::new(&self.rt.config.frang, false, Instant::now()),
        });
        if let Some(ex) = self.exchanges.get_mut(id) {
            ex.vhost = vhost;
            ex.location = location;
        }
        self.forward(id, pass, Some(fill), Some(edits));
    }

    /// Reads what upstream `ui` sent for background exchange `id` into its fill. True if
    /// anything moved.
    pub(super) fn relay_background(&mut self, id: ExchangeId, ui: UpstreamId) -> bool {
        let mut moved = false;
        loop {
            match self.background_step(id, ui) {
                Step::Wait => return moved,
                Step::Moved => moved = true,
                Step::Failed(failure) => {
                    self.close_upstream(ui);
                    self.exchange_failed(id, failure);
                    return true;
                }
                Step::Done { response_complete } => {
                    self.end_background(id, response_complete);
                    return true;
                }
            }
        }
    }

    fn background_step(&mut self, id: ExchangeId, ui: UpstreamId) -> Step {
        let Some(fwd) = self.exchanges.get(id).and_then(|ex| ex.forward()) else {
            return Step::Wait;
        };
        match &fwd.resp {
            RespPhase::AwaitHead => self.background_head(id, ui),
            RespPhase::Body(_) => self.background_body(id, ui),
        }
    }

    /// The response head: a 304 freshens the entry; an error the stale entry may stand
    /// in for leaves it; anything else fills the entry as a client's fetch would.
    fn background_head(&mut self, id: ExchangeId, ui: UpstreamId) -> Step {
        let Worker {
            rt,
            upstreams,
            exchanges,
            ..
        } = self;
        let (Some(ex), Some(u)) = (exchanges.get_mut(id), upstreams.get_mut(ui)) else {
            return Step::Wait;
        };
        let edits = ex.vhost.and_then(|v| rt.vhosts.get(v)).map(|v| {
            ex.location
                .and_then(|l| v.locations.get(l))
                .map_or(&v.response_edits, |l| &l.response_edits)
        });
        let Some(fwd) = ex.forward_mut() else {
            return Step::Wait;
        };
        let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
        let is_head = fwd.method == http1::Method::Head;
        let (head, len) = match http1::parse_response(input, &rt.limits, is_head) {
            Ok(Some(h)) => h,
            Ok(None) if input.is_empty() && u.peer_closed && u.reused => {
                return Step::Failed(Failure::Reset)
            }
            Ok(None) if !u.peer_closed && !u.rbuf.as_mut().is_some_and(|b| b.is_full()) => {
                return Step::Wait
            }
            Ok(None) | Err(_) => return Step::Failed(Failure::BadResponse),
        };
        // A 304 announcing a body must not leave its connection pooled (`lifecycle.rs`).
        fwd.body_may_follow |= ResponseFraming::of(fwd.method, &head, input).body_may_follow();
        let status = head.status();
        if (100..200).contains(&status) {
            fwd.interim += 1;
            if status == 101 || fwd.interim > MAX_INTERIM_RESPONSES {
                return Step::Failed(Failure::BadResponse);
            }
            if let Some(b) = u.rbuf.as_mut() {
                b.consume(len);
            }
            return Step::Moved;
        }
        u.keep_alive = head.keep_alive();
        let Some(fill) = fwd.fill.as_mut() else {
            return Step::Done {
                response_complete: false,
            };
        };
        if status == 304 {
            let fields: Vec<(&[u8], &[u8])> = head.headers().fields(input).collect();
            let _ = fill.not_modified(&fields);
            if let Some(b) = u.rbuf.as_mut() {
                b.consume(len);
            }
            return Step::Done {
                response_complete: true,
            };
        }
        if fill.stale_instead(status).is_some() {
            return Step::Done {
                response_complete: false,
            };
        }
        let none = HeaderEdits::new();
        let origin = super::fill::Origin { head: &head, input };
        if !begin_store(fwd, origin, edits.unwrap_or(&none), rt) {
            return Step::Failed(Failure::BadResponse);
        }
        if let Some(b) = u.rbuf.as_mut() {
            b.consume(len);
        }
        Step::Moved
    }

    /// Response body bytes: into the fill (which gives up past the object size limit).
    fn background_body(&mut self, id: ExchangeId, ui: UpstreamId) -> Step {
        let Worker {
            upstreams,
            exchanges,
            ..
        } = self;
        let (Some(ex), Some(u)) = (exchanges.get_mut(id), upstreams.get_mut(ui)) else {
            return Step::Wait;
        };
        let Some(fwd) = ex.forward_mut() else {
            return Step::Wait;
        };
        let RespPhase::Body(decoder) = &mut fwd.resp else {
            return Step::Wait;
        };
        let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
        if input.is_empty() && !decoder.is_done() {
            return match body_end(decoder, u.peer_end()) {
                BodyEnd::Open => Step::Wait,
                end => Step::Done {
                    response_complete: end == BodyEnd::Complete,
                },
            };
        }
        let Ok(step) = decoder.decode(input) else {
            return Step::Done {
                response_complete: false,
            };
        };
        if let Some(fill) = fwd.fill.as_mut() {
            fill.push_body(input.get(step.data.clone()).unwrap_or(&[]));
        }
        if let Some(b) = u.rbuf.as_mut() {
            b.consume(step.consumed);
        }
        if step.done {
            Step::Done {
                response_complete: true,
            }
        } else if step.consumed == 0 {
            Step::Wait
        } else {
            Step::Moved
        }
    }

    /// Ends background exchange `id`: a complete response is stored (if storable); an
    /// incomplete one is dropped with its fetch reservation, and its connection closed.
    fn end_background(&mut self, id: ExchangeId, response_complete: bool) {
        let Some(mut forward) = self.exchanges.get_mut(id).and_then(|ex| ex.take_forward()) else {
            return;
        };
        if let Some(fill) = forward.fill.take() {
            if response_complete {
                fill.complete();
            }
        }
        // Nothing reached a client: status 0, nothing logged or counted as a response.
        let outcome = Outcome {
            upstream_end: Some(forward.upstream_end(response_complete)),
            forward: Some(forward),
            ..Outcome::local(0, 0, false)
        };
        self.finish(id, outcome);
    }
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
