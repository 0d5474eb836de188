//! Exchanges: one request and its response, in a slab keyed by [`ExchangeId`]. Upstream
//! connections, server-group queues, cache waits and per-request timers point at exchanges,
//! never at client connections; a client connection only knows which of its exchanges is
//! current (HTTP/1.1 carries one at a time).
//!
//! The stage of an exchange changes only through the methods here, and an exchange leaves
//! the slab only through finish.rs `finish` (an answer was queued) or `drop_exchange`
//! (its client is gone).

use std::time::{Duration, Instant};

use http1::BodyDecoder;
use slab::Slab;

use super::client::{ClientId, Clients};
use super::request::Request;
use crate::access_log::RequestRecord as AccessRecord;
use crate::frang::RequestLimits;
use crate::timers::Timers;

mod entry;
mod stages;

pub use entry::{admit, Arrival};
pub use stages::{Facts, Receiving, Sending};

/// Timer keys of exchanges: EXCHANGE_TIMER_BASE + slab index (not a mio token).
pub(super) const EXCHANGE_TIMER_BASE: usize = 4 << 32;

/// Names one exchange; the serial tells it from a later exchange in the same slab slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExchangeId {
    index: usize,
    serial: u64,
}

/// Where an exchange is. An exchange being routed or answered locally is never seen in
/// between two worker steps, so it has no stage of its own.
pub enum Stage {
    /// Created and routed; about to be answered or sent.
    New,
    /// Waiting for another request's fetch of the same cache key.
    CacheWait(cache::WaitTicket),
    /// Waiting for a free connection of `Forward::group`.
    Queued(Box<Forward>),
    /// Sent to upstream connection `Forward::up`.
    Upstream(Box<Forward>),
}

/// One request and its response.
pub struct Exchange {
    serial: u64,
    /// The client connection and its unique id (the slot is reused; the id tells).
    pub client: ClientId,
    pub client_id: u64,
    /// The HTTP/2 stream carrying the exchange (0 on HTTP/1).
    pub stream: u32,
    pub request: Request,
    stage: Stage,
    /// The vhost serving the request (0: the default vhost; None until routed) and its
    /// location.
    pub vhost: Option<usize>,
    pub location: Option<usize>,
    /// The client allows the connection to continue after this exchange.
    pub keep_alive: bool,
    pub log: Option<Box<AccessRecord>>,
    /// frang's counters of this request's body.
    pub limits: RequestLimits,
    pub timer_gen: u64,
    /// Waited for another request's cache fill once: do not wait again.
    pub cache_after_wait: bool,
    /// Sent by a cache tier peer (its hop field on the `self` listener): never sent on to
    /// another peer.
    pub tier_hop: bool,
    /// What the sticky cookie decided for this request (`sticky_hook.rs`).
    pub sticky: Option<Box<super::sticky_hook::StickyState>>,
    /// When the request's head was parsed: the request-latency histogram runs from here.
    pub started: Instant,
}

/// The upstream side of an exchange: the request on its way to a server and the response
/// coming back, each a stage reached (`stages.rs`).
pub struct Forward {
    pub up: super::upstream::UpstreamId,
    pub(super) group: usize,
    /// `proxy_pass ... backup=GROUP`: where the request goes instead when no server of
    /// `group` can take it; `None` once it went there.
    pub(super) backup: Option<usize>,
    /// The upstream request head; kept while the request may still be replayed.
    pub(super) head: Vec<u8>,
    /// What is fixed from the request.
    pub(super) facts: Facts,
    /// How far the request got: its body passed on, queued whole, written.
    pub(super) sending: Sending,
    /// How far the response got: its head awaited, its body relayed, a tunnel.
    pub(super) resp: Receiving,
    pub(super) attempts: u32,
    pub(super) hash_key: u64,
    /// Filling or revalidating a cache entry from this response (held by the relay's sink
    /// while it relays a step, `response/sink.rs`).
    pub(super) fill: Option<Box<super::caching::Fill>>,
    /// From the request's last byte written to the final response head read (the access
    /// log's `urt=`).
    pub(super) upstream_time: Option<Duration>,
    /// Sent to the cache tier's owner of the object: where it goes instead if the owner
    /// gives no answer (`forward.rs`, `fail_exchange`).
    pub(super) tier_fallback: Option<Box<TierFallback>>,
}

/// What sends a request to the origin after the cache tier's owner failed it: the vhost's
/// groups and the stored validators of a revalidation, as they were before the hop.
pub struct TierFallback {
    pub(super) pass: (usize, Option<usize>),
    pub(super) validators: Option<http1::HeaderEdits>,
}

impl Forward {
    /// A response head with `status` was read: the first final one ends the upstream time.
    pub(super) fn head_received(&mut self, status: u16) {
        if status >= 200 && self.upstream_time.is_none() {
            self.upstream_time = self.sending.written_at().map(|t| t.elapsed());
        }
    }

    /// Response bytes were queued for the client: nothing can be retried after that.
    pub(super) fn committed(&self) -> bool {
        self.resp.committed(self.facts.has_client())
    }

    /// What the upstream connection's state is when this exchange ends with its response
    /// read to the end (`response_complete`) or not.
    pub(super) fn upstream_end(&self, response_complete: bool) -> super::upstream::UpstreamEnd {
        super::upstream::UpstreamEnd {
            request_sent: self.sending.all_queued(),
            response_complete,
            body_may_follow: self.resp.body_may_follow(),
        }
    }

    /// Turns to the backup group (Tempesta's `proxy_pass ... backup=`: used while every
    /// server of the main group is down). False if there is none, or it was tried already.
    pub(super) fn turn_to_backup(&mut self) -> bool {
        match self.backup.take() {
            Some(b) => {
                self.group = b;
                self.attempts = 0;
                true
            }
            None => false,
        }
    }

    /// The request body's decoder if the client has not sent all of it yet.
    pub(super) fn unread_body(self) -> Option<BodyDecoder> {
        self.sending.unread_body()
    }
}

impl Exchange {
    /// False for an exchange the proxy runs for itself (a background revalidation).
    pub fn has_client(&self) -> bool {
        self.client != ClientId::NONE
    }

    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    /// The upstream side while the exchange is at a server.
    pub fn forward(&self) -> Option<&Forward> {
        match &self.stage {
            Stage::Upstream(f) => Some(f),
            _ => None,
        }
    }

    pub fn forward_mut(&mut self) -> Option<&mut Forward> {
        match &mut self.stage {
            Stage::Upstream(f) => Some(f),
            _ => None,
        }
    }

    /// The upstream side while the exchange waits in its group's queue or is at a server
    /// (a reload renumbers its group, `reload.rs`).
    pub fn queued_or_sent_mut(&mut self) -> Option<&mut Forward> {
        match &mut self.stage {
            Stage::Queued(f) | Stage::Upstream(f) => Some(f),
            _ => None,
        }
    }

    /// The request, its body's frang counters and the upstream side, borrowed together for
    /// passing the body on.
    pub fn body_parts(&mut self) -> Option<(&Request, &mut RequestLimits, &mut Forward)> {
        match &mut self.stage {
            Stage::Upstream(f) => Some((&self.request, &mut self.limits, f)),
            _ => None,
        }
    }

    /// The request body is still arriving (it is read only while at a server).
    pub fn reading_body(&self) -> bool {
        self.forward().is_some_and(|f| !f.sending.all_queued())
    }

    pub fn park(&mut self, ticket: cache::WaitTicket) {
        self.stage = Stage::CacheWait(ticket);
    }

    pub fn queue(&mut self, forward: Box<Forward>) {
        self.stage = Stage::Queued(forward);
    }

    pub fn send(&mut self, forward: Box<Forward>) {
        self.stage = Stage::Upstream(forward);
    }

    /// Takes the upstream side out while the exchange is at a server (back to `New`).
    pub fn take_forward(&mut self) -> Option<Box<Forward>> {
        match std::mem::replace(&mut self.stage, Stage::New) {
            Stage::Upstream(f) => Some(f),
            other => {
                self.stage = other;
                None
            }
        }
    }

    /// Takes the exchange back to `New`, returning what it held.
    pub fn take_stage(&mut self) -> Stage {
        std::mem::replace(&mut self.stage, Stage::New)
    }
}

/// The exchanges of one worker.
#[derive(Default)]
pub struct Exchanges {
    slab: Slab<Exchange>,
    next_serial: u64,
}

/// What an exchange starts with.
pub struct NewExchange {
    pub client: ClientId,
    pub client_id: u64,
    pub stream: u32,
    pub request: Request,
    pub keep_alive: bool,
    pub log: Option<Box<AccessRecord>>,
    pub limits: RequestLimits,
}

impl Exchanges {
    pub fn insert(&mut self, new: NewExchange) -> ExchangeId {
        self.next_serial += 1;
        let serial = self.next_serial;
        let index = self.slab.insert(Exchange {
            serial,
            client: new.client,
            client_id: new.client_id,
            stream: new.stream,
            request: new.request,
            stage: Stage::New,
            vhost: None,
            location: None,
            keep_alive: new.keep_alive,
            log: new.log,
            limits: new.limits,
            timer_gen: 0,
            cache_after_wait: false,
            tier_hop: false,
            sticky: None,
            started: Instant::now(),
        });
        ExchangeId { index, serial }
    }

    pub fn get(&self, id: ExchangeId) -> Option<&Exchange> {
        self.slab.get(id.index).filter(|e| e.serial == id.serial)
    }

    pub fn get_mut(&mut self, id: ExchangeId) -> Option<&mut Exchange> {
        self.slab
            .get_mut(id.index)
            .filter(|e| e.serial == id.serial)
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Every exchange, for a reload to renumber what they hold (`reload.rs`).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Exchange> {
        self.slab.iter_mut().map(|(_, ex)| ex)
    }

    /// The timer generation of the exchange in slot `index` (timer compaction).
    pub fn timer_gen_at(&self, index: usize) -> Option<u64> {
        self.slab.get(index).map(|e| e.timer_gen)
    }

    /// The id of the exchange in slot `index`, for timers keyed by slot.
    pub fn id_at(&self, index: usize) -> Option<ExchangeId> {
        self.slab.get(index).map(|e| ExchangeId {
            index,
            serial: e.serial,
        })
    }

    pub(super) fn remove(&mut self, id: ExchangeId) -> Option<Exchange> {
        self.get(id)?;
        Some(self.slab.remove(id.index))
    }
}

impl Exchanges {
    /// Arms exchange `id`'s timer to fire after `after` (one per exchange: a later call
    /// replaces the earlier deadline).
    pub(super) fn arm_timer(&mut self, timers: &mut Timers, id: ExchangeId, after: Duration) {
        let gen = timers.next_gen();
        if let Some(ex) = self.get_mut(id) {
            ex.timer_gen = gen;
            timers.schedule(Instant::now() + after, EXCHANGE_TIMER_BASE + id.index, gen);
        }
    }

    /// What the timer of slot `index`, armed as `gen`, is due for: nothing if the exchange
    /// is gone or re-armed it since, and nothing while it waits on its upstream, whose own
    /// deadline answers 504.
    pub(super) fn timer_due(&self, index: usize, gen: u64) -> Option<(ExchangeId, TimerDue)> {
        let id = self.id_at(index)?;
        let ex = self.get(id).filter(|ex| ex.timer_gen == gen)?;
        let due = match ex.stage() {
            Stage::CacheWait(_) => TimerDue::CacheWait,
            Stage::Queued(_) => TimerDue::Queue,
            Stage::Upstream(f) if !f.sending.all_queued() => TimerDue::Body,
            Stage::Upstream(_) | Stage::New => return None,
        };
        Some((id, due))
    }

    /// The client connection of exchange `id`, if it is still the one that sent it.
    pub(super) fn client_of(&self, id: ExchangeId, clients: &Clients) -> Option<ClientId> {
        let ex = self.get(id)?;
        clients.current(ex.client, ex.client_id)
    }

    /// The client connection upstream `u` works for, if still the one it began with: its
    /// exchange's, or its tunnel's (whose panic guard it runs under).
    pub(super) fn client_of_upstream(
        &self,
        u: &super::upstream::Upstream,
        clients: &Clients,
    ) -> Option<ClientId> {
        match u.phase {
            super::upstream::UpPhase::Tunnel { client, client_id } => {
                clients.current(client, client_id)
            }
            _ => self.client_of(u.exchange?, clients),
        }
    }
}

/// What an exchange's timer ran out on.
pub(super) enum TimerDue {
    /// A wait for another request's fetch of the same cache key.
    CacheWait,
    /// A wait in its server group's queue.
    Queue,
    /// The request body stopped arriving.
    Body,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::request::Scheme;

    fn new_exchange(client: usize) -> NewExchange {
        let bytes = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let (head, _) = http1::parse_request(bytes, &http1::Limits::default())
            .unwrap()
            .unwrap();
        NewExchange {
            client: ClientId::from_index(client),
            client_id: client as u64,
            stream: 0,
            request: Request::new(head, bytes, Scheme::Http),
            keep_alive: true,
            log: None,
            limits: RequestLimits::new(&config::FrangGlobal::default(), false, Instant::now()),
        }
    }

    #[test]
    fn an_id_never_names_a_later_exchange_in_its_slot() {
        let mut exchanges = Exchanges::default();
        let first = exchanges.insert(new_exchange(1));
        assert!(exchanges.remove(first).is_some());
        let second = exchanges.insert(new_exchange(2));
        assert_eq!(first.index, second.index, "the slot is reused");
        assert!(exchanges.get(first).is_none());
        assert!(exchanges.remove(first).is_none());
        assert_eq!(
            exchanges.get(second).map(|e| e.client),
            Some(ClientId::from_index(2))
        );
        assert_eq!(exchanges.id_at(second.index), Some(second));
    }

    #[test]
    fn only_an_exchange_at_a_server_gives_up_its_forward() {
        let mut exchanges = Exchanges::default();
        let id = exchanges.insert(new_exchange(1));
        let ex = exchanges.get_mut(id).unwrap();
        assert!(ex.take_forward().is_none());
        assert!(matches!(ex.stage(), Stage::New));
        assert!(!ex.reading_body());
    }
}
