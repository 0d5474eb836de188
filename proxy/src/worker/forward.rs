//! Sending an exchange upstream: the upstream request head (the HTTP/1.1 writer, with the
//! proxy's fields and the vhost's edits), `100 Continue` for a client that waits for it,
//! and the choice of a connection: pooled, new, or a place in the group's queue.

use std::io::Write as _;
use std::time::{Duration, Instant};

use http1::{BodyDecoder, ConnectionOption, Forwarding, HeaderEdits};

use super::caching::Fill;
use super::client::ClientId;
use super::exchange::{ExchangeId, Facts, Forward, Receiving, Sending, Stage, TierFallback};
use super::finish::Refusal;
use super::h2_origin;
use super::token::{client_token, upstream_token};
use super::upstream::groups::{self, request_key, Pick};
use super::upstream::{self, Flushed, Settled, UpPhase, UpstreamEnd, UpstreamId};
use super::Worker;
use crate::metrics::bump;

/// An upstream request head written into the worker's scratch buffer.
struct Draft {
    written: Result<(), http1::OversizedHead>,
    /// The client's address (None for the proxy's own background requests).
    peer: Option<std::net::IpAddr>,
}

impl Worker {
    /// Sends exchange `id` to `pass` (a server group, and the backup group that takes over
    /// while the first is down), filling or revalidating a cache entry from the response
    /// when `fill` is set (`validators`: the stored validators to send).
    pub(super) fn forward(
        &mut self,
        id: ExchangeId,
        pass: (usize, Option<usize>),
        fill: Option<Box<Fill>>,
        validators: Option<HeaderEdits>,
    ) {
        self.forward_via(id, pass, fill, validators, None);
    }

    /// [`Worker::forward`], to the cache tier's owner of the object when `tier` is set (the
    /// owner's group as `pass`; `tier`: the origin's, for when the owner fails).
    pub(super) fn forward_via(
        &mut self,
        id: ExchangeId,
        (group, backup): (usize, Option<usize>),
        fill: Option<Box<Fill>>,
        mut validators: Option<HeaderEdits>,
        tier: Option<Box<TierFallback>>,
    ) {
        let rt = self.rt.clone();
        validators = super::sticky_hook::request_edits(self.exchanges.get(id), &rt, validators);
        if rt.tier.is_some() {
            let scheme = self.exchanges.get(id).map(|ex| ex.request.scheme());
            validators = Some(hop_edits(validators, scheme.filter(|_| tier.is_some())));
        }
        let Some(draft) = self.upstream_head(id, validators.as_mut(), tier.is_some()) else {
            return;
        };
        // With the proxy's own fields the head would exceed what a peer parsing like this proxy
        // accepts (`Limits::for_forwarding`): refuse it here rather than send it.
        if let Err(oversized) = draft.written {
            bump(&self.metrics().parse_errors);
            if rt.config.block_action.error.log {
                let peer = draft
                    .peer
                    .map_or_else(|| "the proxy".into(), |p| p.to_string());
                crate::warn!("refused request from {peer}: {oversized}");
            }
            return self.refuse_exchange(id, oversized.request_status(), Refusal::Error);
        }
        let Some(ex) = self.exchanges.get(id) else {
            return;
        };
        let request = &ex.request;
        // `Expect: 100-continue`: tell the client to send its body now, as nginx does, rather
        // than let it wait for the origin's answer (or its own timer).
        let continue_sent = Facts::wants_continue(request)
            && self
                .clients
                .get_mut(ex.client)
                .is_some_and(|c| super::client::codec::continue_100(c, ex.stream));
        let body = request
            .has_body()
            .then(|| BodyDecoder::new(request.framing(), &rt.limits));
        let forward = Box::new(Forward {
            up: UpstreamId::NONE,
            group,
            backup,
            head: self.scratch.clone(),
            facts: Facts::of(request, ex.has_client(), continue_sent),
            sending: Sending::new(body),
            resp: Receiving::START,
            attempts: 0,
            hash_key: if std::iter::once(group)
                .chain(backup)
                .any(|g| rt.groups.get(g).is_some_and(|g| g.hash))
            {
                request_key(request.authority().unwrap_or(b""), request.path())
            } else {
                0
            },
            fill,
            upstream_time: None,
            tier_fallback: tier,
        });
        self.dispatch(id, forward);
    }

    /// Writes exchange `id`'s upstream request head into `scratch`. To a cache tier peer
    /// (`to_peer`) without the vhost's request edits: the owner makes them, once.
    fn upstream_head(
        &mut self,
        id: ExchangeId,
        validators: Option<&mut HeaderEdits>,
        to_peer: bool,
    ) -> Option<Draft> {
        let rt = &self.rt;
        let ex = self.exchanges.get(id)?;
        let v = ex.vhost.and_then(|v| rt.vhosts.get(v))?;
        let none = HeaderEdits::new();
        let configured = match ex.location.and_then(|l| v.locations.get(l)) {
            _ if to_peer => &none,
            Some(l) => &l.request_edits,
            None => &v.request_edits,
        };
        let edits = match validators {
            Some(extra) => {
                extra.extend(configured);
                &*extra
            }
            None => configured,
        };
        let peer = match self.clients.get(ex.client) {
            Some(c) => Some(c.peer.ip()),
            None if !ex.has_client() => None,
            None => return None,
        };
        // The address as text without allocating (at most 45 bytes for IPv6).
        let mut ip_text = [0u8; 48];
        let ip_len = {
            let mut cursor = std::io::Cursor::new(&mut ip_text[..]);
            if let Some(peer) = peer {
                let _ = write!(cursor, "{peer}");
            }
            cursor.position() as usize
        };
        let request = &ex.request;
        // A WebSocket handshake goes on with the proxy's own Upgrade and Connection fields.
        let connection =
            if super::websocket::classify(request) == super::websocket::Upgrade::WebSocket {
                ConnectionOption::UpgradeWebSocket
            } else {
                ConnectionOption::Default
            };
        self.scratch.clear();
        let written = http1::write_request_head(
            &mut self.scratch,
            request.head(),
            request.bytes(),
            &Forwarding {
                forwarded_for: peer.map(|_| ip_text.get(..ip_len).unwrap_or(&[])),
                forwarded_proto: Some(request.scheme().as_str().as_bytes()),
                via: Some(v.via.as_deref().unwrap_or(b"ktls-proxy")),
                edits,
                framing: request.framing(),
                connection,
                limits: &rt.forward_limits,
            },
        );
        Some(Draft { written, peer })
    }

    /// Sends `forward` on a connection of its group: pooled, new, or queued for one.
    pub(super) fn dispatch(&mut self, id: ExchangeId, mut forward: Box<Forward>) {
        let mut avoid = None;
        loop {
            // `server_proto h2`: exchanges share connections, each on a stream; a WebSocket
            // handshake has no HTTP/2 form here and goes as HTTP/1.1.
            let group = forward.group;
            let h2 = h2_origin::is_h2(&self.rt, group) && !forward.facts.websocket();
            match self.scheduling().pick(
                id,
                forward.group,
                forward.hash_key,
                avoid,
                forward.facts.websocket(),
            ) {
                Pick::Pooled(ui) if h2 && self.start_h2_origin(ui) => {
                    return self.attach_h2(id, ui, forward)
                }
                Pick::Pooled(ui) => return self.attach(id, ui, forward),
                Pick::Connect(server) => {
                    let shared = h2.then(|| self.shared_h2(group, Some(server)));
                    if let Some(conn) = shared.flatten() {
                        return self.attach_h2(id, conn, forward);
                    }
                    let (mut conns, open) = self.conns();
                    let to = (forward.group, server, UpPhase::Connecting);
                    match upstream::connect(&mut conns, open, to) {
                        Ok(ui) if h2 && self.start_h2_origin(ui) => {
                            return self.attach_h2(id, ui, forward)
                        }
                        Ok(ui) => return self.attach(id, ui, forward),
                        Err(_) => {
                            bump(&self.metrics().upstream_connect_errors);
                            self.checks().health().mark_down(forward.group, server);
                            avoid = Some(server);
                            forward.attempts += 1;
                            let limit = self
                                .rt
                                .groups
                                .get(forward.group)
                                .map_or(0, |g| g.connect_retries);
                            if forward.attempts > limit {
                                if forward.turn_to_backup() {
                                    avoid = None;
                                    continue;
                                }
                                return self.fail_exchange(id, forward, 502);
                            }
                        }
                    }
                }
                Pick::Full => {
                    let shared = h2.then(|| self.shared_h2(group, None));
                    if let Some(conn) = shared.flatten() {
                        return self.attach_h2(id, conn, forward);
                    }
                    if let Err(forward) = self.enqueue(id, forward) {
                        self.fail_exchange(id, forward, 503);
                    }
                    return;
                }
                Pick::Down if forward.turn_to_backup() => avoid = None,
                Pick::Down => return self.fail_exchange(id, forward, 502),
            }
        }
    }

    fn attach(&mut self, id: ExchangeId, ui: UpstreamId, mut forward: Box<Forward>) {
        let ci = self.exchanges.client_of(id, &self.clients);
        if ci.is_none() && self.exchanges.get(id).is_none_or(|ex| ex.has_client()) {
            // The client left meanwhile: the connection goes back unused.
            self.end_upstream(None, ui, upstream::UpstreamEnd::UNUSED);
            return self.drop_exchange(id);
        }
        let Some(u) = self.upstreams.get_mut(ui) else {
            return;
        };
        u.exchange = Some(id);
        u.out.push(&forward.head);
        let server = u.addr;
        if !forward.facts.replayable() {
            forward.head = Vec::new();
        }
        forward.up = ui;
        // Sent again (a retry): the time runs from this sending.
        forward.sending.resend();
        forward.upstream_time = None;
        let connecting = u.phase == UpPhase::Connecting;
        if !connecting {
            u.phase = UpPhase::Busy;
        }
        let timeout = self
            .rt
            .groups
            .get(forward.group)
            .map_or(Duration::from_secs(60), |g| g.forward_timeout);
        if let Some(ex) = self.exchanges.get_mut(id) {
            if let Some(log) = ex.log.as_mut() {
                log.upstream = Some(server);
            }
            ex.send(forward);
        }
        if !connecting {
            upstream::arm_timer(&mut self.upstreams, &mut self.timers, ui, timeout);
        }
        self.dirty.push_back(upstream_token(ui));
        if let Some(ci) = ci {
            self.dirty.push_back(client_token(ci));
        }
    }

    /// A connecting upstream `ui` (an exchange's, or a probe) became ready: connected or
    /// failed (upstream/conn.rs `settle`); what that means for its server's health and its
    /// exchange follows here (a failed connect is retried elsewhere or answered 502). True:
    /// the connection carries its exchange's request now, and driving it goes on.
    pub(super) fn settle_connect(&mut self, ui: UpstreamId) -> bool {
        let (mut conns, open) = self.conns();
        match upstream::settle(&mut conns, open.rt, ui) {
            Settled::Pending => false,
            Settled::Up {
                server,
                carrying,
                monitored,
                freed,
            } => {
                if let Some((group, server)) = server {
                    self.checks().health().mark_up(group, server);
                }
                self.serve_freed(freed);
                if monitored && self.checks().start(ui) {
                    self.dirty.push_back(upstream_token(ui));
                }
                carrying
            }
            Settled::Failed {
                server,
                exchange,
                freed,
            } => {
                // Marked down before the freed place is served: a queued exchange does not
                // go to a server whose connect just failed.
                if let Some((group, server)) = server {
                    self.checks().health().mark_down(group, server);
                }
                self.serve_freed(freed);
                if let Some(id) = exchange {
                    self.exchange_failed(id, super::response::Failure::Connect);
                }
                false
            }
        }
    }

    /// Writes upstream `ui`'s queued request bytes. Once all are out, the exchange's sending
    /// is timed from now; room again lets its client pass more request body. True if bytes
    /// moved (or the write failed: the connection is over).
    pub(super) fn flush_upstream(&mut self, ui: UpstreamId) -> bool {
        let (flushed, id, emptied) = upstream::flush_at(&mut self.upstreams, ui);
        match flushed {
            Flushed::Nothing => false,
            Flushed::Failed => true,
            Flushed::Wrote => {
                let Some(id) = id else {
                    return true;
                };
                if emptied {
                    let forward = self.exchanges.get_mut(id).and_then(|ex| ex.forward_mut());
                    if let Some(fwd) = forward {
                        fwd.sending.flushed(Instant::now());
                    }
                }
                if let Some(ci) = self.exchanges.client_of(id, &self.clients) {
                    self.dirty.push_back(client_token(ci));
                }
                true
            }
        }
    }

    /// Answers `status` for an exchange that got no response from its group: a stale
    /// entry if `cache_use_stale` allows one, else the error page. An exchange sent to its
    /// cache tier owner, which gave no answer (refused, reset, timed out, its queue full),
    /// goes to the origin instead, as if this node owned the object.
    pub(super) fn fail_exchange(&mut self, id: ExchangeId, mut forward: Box<Forward>, status: u16) {
        if let Some(fallback) = forward.tier_fallback.take() {
            let peer = self.rt.groups.get(forward.group).map(|g| g.name.clone());
            crate::warn!(
                "{}: no answer ({status}); the request goes to the origin",
                peer.unwrap_or_default()
            );
            crate::fleet::tier::count_fallback();
            // No head within `peer_timeout`: out until its probe answers (`fleet/tier.rs`).
            if status == 504 {
                self.checks().health().mark_down(forward.group, 0);
            }
            let TierFallback { pass, validators } = *fallback;
            return self.forward_via(id, pass, forward.fill.take(), validators, None);
        }
        let freed = super::finish::answer_failure(&mut self.ends(), (id, forward), status);
        self.serve_freed(freed);
    }

    /// Gives freed capacity of `group` to its first waiting exchange (one still queued).
    pub(super) fn serve_queue(&mut self, group: usize) {
        while let Some(id) = self.groups.get_mut(group).and_then(|g| g.next_waiting()) {
            let Some(ex) = self.exchanges.get_mut(id) else {
                continue;
            };
            let Stage::Queued(forward) = ex.take_stage() else {
                continue;
            };
            self.dispatch(id, forward);
            return;
        }
    }

    /// A queued exchange waited `server_forward_timeout` without a connection: 504.
    pub(super) fn queue_expired(&mut self, id: ExchangeId) {
        groups::unqueue(&mut self.groups, id);
        let Some(ex) = self.exchanges.get_mut(id) else {
            return;
        };
        if let Stage::Queued(forward) = ex.take_stage() {
            bump(&self.metrics().upstream_timeouts);
            self.fail_exchange(id, forward, 504);
        }
    }

    /// Queues exchange `id` until a connection of its group frees up, for at most the
    /// group's `server_forward_timeout`; Err if the queue is full.
    fn enqueue(&mut self, id: ExchangeId, forward: Box<Forward>) -> Result<(), Box<Forward>> {
        let group = forward.group;
        let Some(g) = self.rt.groups.get(group) else {
            return Err(forward);
        };
        let (limit, timeout) = (g.queue_limit, g.forward_timeout);
        let queued = self.groups.get_mut(group).map(|g| g.enqueue(id, limit));
        if queued != Some(Ok(())) {
            return Err(forward);
        }
        if let Some(ex) = self.exchanges.get_mut(id) {
            ex.queue(forward);
        }
        self.exchanges.arm_timer(&mut self.timers, id, timeout);
        Ok(())
    }

    /// The parts choosing a sticky exchange's connection touches (sticky_hook.rs).
    pub(super) fn scheduling(&mut self) -> super::sticky_hook::Scheduling<'_> {
        super::sticky_hook::Scheduling {
            rt: &self.rt,
            groups: &mut self.groups,
            upstreams: &self.upstreams,
            exchanges: &mut self.exchanges,
            metrics: &self.shared.metrics.sticky,
        }
    }

    /// Closes retiring upstream connections `due` and ends what they carried (grace.rs).
    pub(super) fn retire(&mut self, due: Vec<UpstreamId>) {
        for ui in due {
            match super::grace::carried(&self.upstreams, &self.clients, ui) {
                Some(super::grace::Carried::Tunnel(ci)) => self.guarded(ci, |w| {
                    w.close_tunnel(ci, crate::metrics_tunnel::TunnelEnd::ServerRemoved)
                }),
                Some(super::grace::Carried::Exchange(id)) => {
                    self.close_upstream(ui);
                    let failure = super::response::Failure::ServerRemoved;
                    self.guarded_exchange(id, |w| w.exchange_failed(id, failure));
                }
                Some(super::grace::Carried::Nothing) => self.close_upstream(ui),
                None => {}
            }
        }
    }

    /// A reload replaced `old`: its exchanges and queues carried over (reload.rs); those of a
    /// group that is gone answered 502, then every queue served once through.
    pub(super) fn carry_exchanges_over(
        &mut self,
        old: &crate::runtime::Runtime,
        old_groups: Vec<groups::GroupState>,
    ) {
        let both = (old, &*self.rt);
        let (exchanges, groups) = (&mut self.exchanges, &mut self.groups);
        for id in super::reload::carry_exchanges_over(exchanges, groups, both, old_groups) {
            if !super::reload::queued(&self.exchanges, id) {
                continue;
            }
            self.guarded_exchange(id, |w| {
                if let Some(forward) = super::reload::take_queued(&mut w.exchanges, id) {
                    w.fail_exchange(id, forward, 502);
                }
            });
        }
        for group in 0..self.groups.len() {
            let waiting = self.groups.get(group).map_or(0, |g| g.queue.len());
            for _ in 0..waiting {
                self.serve_queue(group);
            }
        }
    }

    /// Upstream `ui`'s timer entry of generation `gen` came due (upstream/conn.rs says for
    /// what): a failed connect or a quiet server fails its exchange (a retry, or 502/504).
    pub(super) fn upstream_timer(&mut self, ui: UpstreamId, gen: u64, now: Instant) {
        let quiet = (self.upstreams.get(ui))
            .map(|u| super::tier_hop::quiet_limit(&self.rt, &self.exchanges, u));
        let Some(due) = upstream::timer_due(&mut self.conns().0, ui, (gen, now), quiet) else {
            return;
        };
        match due {
            upstream::TimerDue::Connect {
                id,
                group,
                server,
                current,
            } => {
                bump(&self.metrics().upstream_connect_errors);
                let freed = upstream::close(&mut self.conns().0, ui);
                if current {
                    self.checks().health().mark_down(group, server);
                }
                self.serve_freed(freed);
                self.exchange_failed(id, super::response::Failure::Connect);
            }
            upstream::TimerDue::Quiet(id) => {
                bump(&self.metrics().upstream_timeouts);
                self.close_upstream(ui);
                self.exchange_failed(id, super::response::Failure::Timeout);
            }
            upstream::TimerDue::Check => {
                let freed = self.checks().judge(ui, false);
                self.serve_freed(freed);
            }
            upstream::TimerDue::Probe => {
                let freed = self.checks().probe_timed_out(ui);
                self.serve_freed(freed);
            }
            upstream::TimerDue::H2 => self.h2_deadline(ui, now),
            upstream::TimerDue::Close => self.close_upstream(ui),
        }
    }

    /// Upstream `ui` of a tunnel became ready: its client drives the tunnel (tunnel.rs), or
    /// it closes if that client is gone.
    pub(super) fn drive_tunnel_upstream(
        &mut self,
        ui: UpstreamId,
        (client, unique): (ClientId, u64),
    ) {
        match self.clients.current(client, unique) {
            Some(ci) => self.drive_client(ci),
            None => self.close_upstream(ui),
        }
    }

    /// A group's pool changed: its first waiting exchange may go now.
    pub(super) fn serve_freed(&mut self, freed: upstream::Freed) {
        if !self.upstreams.h2_woken.is_empty() {
            super::h2_origin::wake(&mut self.upstreams, &mut self.dirty);
        }
        if let upstream::Freed(Some(group)) = freed {
            self.serve_queue(group);
        }
    }

    pub(super) fn close_upstream(&mut self, ui: UpstreamId) {
        let freed = upstream::close(&mut self.conns().0, ui);
        self.serve_freed(freed);
    }

    /// Exchange `id` (or none: `of` None) is done with upstream `ui`: pooled or closed.
    pub(super) fn end_upstream(
        &mut self,
        of: Option<ExchangeId>,
        ui: UpstreamId,
        end: UpstreamEnd,
    ) {
        let conns = &mut self.conns().0;
        let freed = match of {
            Some(id) => upstream::end_of(conns, (id, ui), end),
            None => upstream::end(conns, ui, end),
        };
        self.serve_freed(freed);
    }
}

/// `validators` with the cache tier's hop field: set to the client's scheme for a request to
/// the key's owner (`to_owner`, counted), removed from one to an origin (whoever sent it).
fn hop_edits(
    validators: Option<HeaderEdits>,
    to_owner: Option<super::request::Scheme>,
) -> HeaderEdits {
    let mut edits = validators.unwrap_or_default();
    let name = crate::fleet::tier::HOP_FIELD.as_bytes();
    // A constant token and a scheme: valid edits.
    let _ = match to_owner {
        Some(scheme) => {
            crate::fleet::tier::count_to_owner();
            edits.set(name, scheme.as_str().as_bytes())
        }
        None => edits.remove(name),
    };
    edits
}
