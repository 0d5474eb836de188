//! A response head read from the upstream's buffer: parsed, its framing facts noted, then
//! one of a `101` switching to a WebSocket tunnel, an interim 1xx passed on, a 304 or an
//! error the cache answers instead, or the final head written to the sink, stored in the
//! fill beside it, and the exchange set up to relay the body.

use http1::BodyDecoder;

use super::super::client::codec;
use super::super::exchange::{Exchange, Forward};
use super::super::fill::Origin;
use super::super::h1::{self, ReplyTo};
use super::super::lifecycle::ResponseFraming;
use super::super::sticky_hook;
use super::super::upstream::h2_pieces::{self, Piece};
use super::super::upstream::Upstream;
use super::sink::Sink;
use super::{Step, MAX_INTERIM_RESPONSES};
use crate::metrics::bump;

/// Whom a final response head is written for, copied out of the exchange so that the
/// exchange's `Forward` can be borrowed beside it.
pub(super) struct Recipient {
    vhost: Option<usize>,
    location: Option<usize>,
    /// The client keeps its connection after this exchange.
    keep_alive: bool,
    /// The sticky cookie this response sets (`sticky_hook.rs`).
    set_cookie: Option<String>,
    /// The server that answered, for the sticky session it may start (None: a reload
    /// removed it, or no client will hold the session's cookie).
    server: Option<usize>,
    /// A cache tier peer's request (`tier_hop.rs` `honour_hop`): its statuses are its clients',
    /// judged at the node they reached, not counted against the peer's address here.
    tier_hop: bool,
}

impl Recipient {
    /// The recipient of exchange `ex`'s response from `u`.
    pub(super) fn of(ex: &Exchange, u: &Upstream) -> Recipient {
        Recipient {
            vhost: ex.vhost,
            location: ex.location,
            keep_alive: ex.keep_alive,
            set_cookie: ex.sticky.as_ref().and_then(|s| s.set_cookie.clone()),
            // A removed server's index names an older configuration (`grace.rs`).
            server: (!u.removed && ex.has_client()).then_some(u.server),
            tier_hop: ex.tier_hop,
        }
    }
}

/// The worker's parts that reading a response head uses, borrowed apart from the client,
/// the upstream and the exchange.
pub(super) struct HeadWriter<'a> {
    pub rt: &'a crate::runtime::Runtime,
    pub metrics: &'a crate::metrics::Metrics,
    pub scratch: &'a mut Vec<u8>,
}

impl HeadWriter<'_> {
    /// Reads the response head (or an interim one) buffered on `u` and passes it on.
    pub(super) fn step(
        mut self,
        sink: &mut Sink<'_>,
        u: &mut Upstream,
        fwd: &mut Forward,
        to: &Recipient,
    ) -> Step {
        let is_head = fwd.facts.method() == http1::Method::Head;
        let (head, taken) = match take_head(u, &self.rt.limits, is_head) {
            Ok(taken) => taken,
            Err(step) => return step,
        };
        fwd.head_received(head.status());
        // Decided for every head, interim, 304 to a revalidation and final alike, before any
        // of them is acted on.
        let input = taken.bytes(u);
        fwd.resp
            .head_read(ResponseFraming::of(fwd.facts.method(), &head, input));
        if let Some(step) = self.not_relayed_as_final(sink, u, fwd, to, (&head, &taken)) {
            return step;
        }
        // Judged before a byte of it is sent: a refused response is replaced, as in Tempesta.
        if let Some(c) = sink.client().filter(|_| !to.tier_hop) {
            let vhost = to.vhost.unwrap_or(0);
            let ip = c.peer.ip();
            if let Err(v) =
                super::super::limits::judge_response_status(self.rt, vhost, ip, head.status())
            {
                return Step::Blocked(v);
            }
        }
        let input = taken.bytes(u);
        let origin = Origin { head: &head, input };
        if self.start_response(sink, fwd, to, origin).is_err() {
            // The proxy's fields took the head over what a client parsing like this proxy
            // accepts (`Limits::for_forwarding`): a bad response, never relayed.
            return Step::Bad { count: true };
        }
        // The upstream closes after a response without keep-alive: never pool it. A connection
        // opened for a WebSocket handshake that got an ordinary answer is not pooled either.
        u.keep_alive = head.keep_alive() && !fwd.facts.websocket();
        taken.consume(u);
        Step::Moved
    }

    /// The heads that are not relayed as the final response: a `101` switching to a
    /// WebSocket tunnel, an interim 1xx, a 304 or an error the cache answers instead. None:
    /// `head` (parsed from the first `len` bytes of the upstream's buffer) is a final response
    /// to relay.
    fn not_relayed_as_final(
        &mut self,
        sink: &mut Sink<'_>,
        u: &mut Upstream,
        fwd: &mut Forward,
        to: &Recipient,
        (head, taken): (&http1::ResponseHead, &Taken),
    ) -> Option<Step> {
        let status = head.status();
        let input = taken.bytes(u);
        // A server removed by a reload without grace time gets no new tunnel (`grace.rs`).
        if status == 101 && fwd.facts.websocket() && !(u.removed && u.retire_at.is_none()) {
            if let Some(out) = sink.client_out() {
                let edits = response_edits(self.rt, to.vhost, to.location);
                let switch = (head, input, edits, &self.rt.forward_limits);
                if let Some(step) = switch_protocols(fwd, out, self.scratch, switch) {
                    taken.consume(u);
                    return Some(step);
                }
            }
        }
        if (100..200).contains(&status) {
            return Some(relay_interim(fwd, sink, u, (head, taken), self.metrics));
        }
        let step = cache_instead(sink, head, input)?;
        if matches!(step, Step::NotModified(_)) {
            u.keep_alive = head.keep_alive();
            taken.consume(u);
        }
        Some(step)
    }

    /// A final (not 1xx) response head from the origin: writes it to the sink with the
    /// vhost's and the sticky cookie's edits (and, for a client, `Age` for a cache fill),
    /// starts storing it, lets a sticky session learn its server and sets the exchange up to
    /// relay the body. Err: the rewritten head is over the forwarding limits (nothing was
    /// written).
    fn start_response(
        self,
        sink: &mut Sink<'_>,
        fwd: &mut Forward,
        to: &Recipient,
        origin: Origin<'_>,
    ) -> Result<(), ()> {
        let Origin { head, input } = origin;
        let rt = self.rt;
        let edits = response_edits(
            rt,
            to.vhost
                .filter(|_| !super::super::tier_hop::edited_by_owner(rt, fwd.group)),
            to.location,
        );
        let edits = &*sticky_hook::response_edits(to.set_cookie.as_deref(), edits);
        // The Age a client sees; a fill-only sink stores the origin's head as it came.
        let with_age = sink.age_edits(head, input, edits);
        let relayed = codec::RelayedHead {
            head,
            input,
            edits: with_age.as_ref().unwrap_or(edits),
            limits: &rt.forward_limits,
            to: ReplyTo {
                http10: fwd.facts.http10(),
                close: !to.keep_alive,
            },
        };
        let plan = sink.head(self.scratch, &relayed, origin)?;
        let status = head.status();
        if let Some(server) = to.server {
            sticky_hook::learn(rt, self.metrics, to.vhost, (fwd.group, server), head, input);
        }
        if plan.close_delimited {
            sink.close_after_flush();
        }
        let decoder = BodyDecoder::new(
            head.framing(),
            &http1::Limits {
                max_body_bytes: None,
                ..rt.limits.clone()
            },
        );
        fwd.resp.start_body(status, decoder, plan.dechunk);
        Ok(())
    }
}

/// The origin's `101` to a WebSocket handshake (`switch`: the head, the bytes it was parsed
/// from, the response edits and the forwarding limits): when it accepts the handshake, it is
/// queued for the client and the exchange switches to a tunnel (the caller consumes the head).
/// None: not a switch this proxy makes (the caller refuses the 101).
fn switch_protocols(
    fwd: &mut Forward,
    out: &mut crate::outbox::Outbox,
    scratch: &mut Vec<u8>,
    switch: (
        &http1::ResponseHead,
        &[u8],
        &http1::HeaderEdits,
        &http1::Limits,
    ),
) -> Option<Step> {
    let (head, input, edits, limits) = switch;
    if !super::super::websocket::accepts(head, input) {
        return None;
    }
    if h1::write_switching_protocols(out, scratch, head, input, edits, limits).is_err() {
        return Some(Step::Bad { count: true });
    }
    fwd.resp.switch();
    Some(Step::Switch)
}

/// The response edits of `vhost` (its `location`'s when it has one); none if the vhost
/// vanished in a reload meanwhile.
fn response_edits(
    rt: &crate::runtime::Runtime,
    vhost: Option<usize>,
    location: Option<usize>,
) -> &http1::HeaderEdits {
    static NONE: std::sync::OnceLock<http1::HeaderEdits> = std::sync::OnceLock::new();
    match vhost.and_then(|v| rt.vhosts.get(v)) {
        Some(v) => location
            .and_then(|l| v.locations.get(l))
            .map_or(&v.response_edits, |l| &l.response_edits),
        None => NONE.get_or_init(http1::HeaderEdits::new),
    }
}

/// An interim (1xx) response: passed on as it is, a bounded number of them. A `101` that
/// does not accept a WebSocket handshake of this exchange cannot be relayed (nothing after it
/// would be HTTP): a bad response, 502.
fn relay_interim(
    fwd: &mut Forward,
    sink: &mut Sink<'_>,
    u: &mut Upstream,
    (head, taken): (&http1::ResponseHead, &Taken),
    metrics: &crate::metrics::Metrics,
) -> Step {
    let status = head.status();
    if status == 101 || fwd.resp.interim_read() > MAX_INTERIM_RESPONSES {
        if status != 101 {
            bump(&metrics.upstream_interim_floods);
        }
        return Step::Bad { count: false };
    }
    // The proxy answered `Expect: 100-continue` itself; an HTTP/1.0 client gets no interim
    // responses at all.
    if fwd.facts.relays_interim(status) {
        let to_client = sink.interim((head, taken.bytes(u), taken.raw_len()));
        fwd.resp.interim_relayed(to_client);
    }
    taken.consume(u);
    Step::Moved
}

/// The cache may answer instead of the origin's response: a 304 to its revalidation
/// refreshes the stored entry; an error may be replaced by a stale entry.
/// (The caller consumes a 304's head.)
fn cache_instead(sink: &mut Sink<'_>, head: &http1::ResponseHead, input: &[u8]) -> Option<Step> {
    let fill = sink.fill_mut()?;
    let status = head.status();
    if status == 304 && fill.revalidating.is_some() {
        let fields: Vec<(&[u8], &[u8])> = head.headers().fields(input).collect();
        return Some(Step::NotModified(fill.not_modified(&fields)));
    }
    fill.stale_instead(status).map(Step::Stale)
}

/// Where a response head came from: parsed from the first `len` bytes of the upstream's
/// buffer (an HTTP/1.1 server's), or decoded by the upstream's HTTP/2 stream, assembled over
/// a buffer of its own (`upstream/h2_pieces.rs`; no HTTP/1 text between).
pub(super) enum Taken {
    Parsed(usize),
    Decoded(Vec<u8>),
}

impl Taken {
    /// The bytes the head's spans refer to.
    fn bytes<'a>(&'a self, u: &'a Upstream) -> &'a [u8] {
        match self {
            Taken::Parsed(_) => u.rbuf.as_ref().map_or(&[][..], |b| b.bytes()),
            Taken::Decoded(buf) => buf,
        }
    }

    /// The head's length as the server sent it, when it came as HTTP/1.1 text.
    fn raw_len(&self) -> Option<usize> {
        match self {
            Taken::Parsed(len) => Some(*len),
            Taken::Decoded(_) => None,
        }
    }

    /// The head was acted on: a parsed one leaves the upstream's buffer (a decoded one left
    /// its stream when it was taken).
    fn consume(&self, u: &mut Upstream) {
        if let (Taken::Parsed(len), Some(b)) = (self, u.rbuf.as_mut()) {
            b.consume(*len);
        }
    }
}

/// The next response head of `u` (`is_head`: the request was HEAD), or the step to take
/// instead (wait for more, the connection lost before a response, a bad head).
fn take_head(
    u: &mut Upstream,
    limits: &http1::Limits,
    is_head: bool,
) -> Result<(http1::ResponseHead, Taken), Step> {
    if let Some(piece) = h2_pieces::take(u) {
        return match piece {
            Some(Piece::Head(response)) => {
                match crate::upstream_h2::response_head(&response, limits, is_head) {
                    Ok((head, buf)) => Ok((head, Taken::Decoded(buf))),
                    Err(_) => Err(Step::Bad { count: true }),
                }
            }
            // The codec gives a head first: anything else is not a response.
            Some(_) => Err(Step::Bad { count: true }),
            None if u.peer_closed => Err(Step::Lost { reused: u.reused }),
            None => Err(Step::Wait),
        };
    }
    let input = u.rbuf.as_ref().map_or(&[][..], |b| b.bytes());
    if input.is_empty() {
        return Err(if u.peer_closed {
            Step::Lost { reused: u.reused }
        } else {
            Step::Wait
        });
    }
    match http1::parse_response(input, limits, is_head) {
        Ok(Some((head, len))) => Ok((head, Taken::Parsed(len))),
        Ok(None) if !u.peer_closed && !u.rbuf.as_mut().is_some_and(|b| b.is_full()) => {
            Err(Step::Wait)
        }
        Ok(None) | Err(_) => Err(Step::Bad { count: true }),
    }
}
