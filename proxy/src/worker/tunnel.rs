//! WebSocket tunnels: after the origin's `101`, a client connection and the upstream
//! connection that carried its handshake pass bytes to each other unchanged until one side
//! ends.
//!
//! - **Ownership.** The client connection owns the tunnel (its HTTP/1 codec's state is
//!   `ConnState::Tunnel`, holding the upstream's slab index); the upstream connection points
//!   back at the client (`UpPhase::Tunnel`). Readiness of either socket drives
//!   [`Worker::drive_tunnel`] for the client. A tunnel leaves its server's pool accounting
//!   when it starts: a long-lived WebSocket does not take one of the `conns_n` places that
//!   requests share.
//! - **Backpressure.** Each direction holds at most one read buffer (16 KiB) and the other
//!   side's outbox up to its bound (256 KiB, `outbox::HIGH_WATER`): a side is not read while
//!   its peer's outbox is over the bound, so its TCP window closes and the sender waits. A
//!   peer never decides how much the proxy holds.
//! - **Ends.** When one side closes, its last bytes are written to the other, then the other
//!   is closed too: a tunnel is never left half-open (WebSocket closes with its own closing
//!   handshake before TCP closes, so a conforming peer loses nothing). `client_ws_timeout` is
//!   the idle timeout: no byte either way for that long closes both sides.
//! - **Accounting.** The exchange that carried the handshake ends (access log line with 101)
//!   when the tunnel starts; the client connection stays counted by frang until it closes.

use std::time::Instant;

use super::client::codec::Codec;
use super::client::ClientId;
use super::exchange::ExchangeId;
use super::finish::Outcome;
use super::upstream::UpPhase;
use super::upstream::UpstreamId;
use super::{client_token, upstream_token, Worker};
use crate::close_reason::CloseReason;
use crate::metrics_tunnel::TunnelEnd;

/// A client connection's tunnel to an upstream connection.
pub struct Tunnel {
    /// The upstream connection (slab index) carrying the other half.
    up: UpstreamId,
    /// When a byte last moved either way: the idle timeout counts from here.
    last_activity: Instant,
}

impl Worker {
    /// The origin accepted exchange `id`'s WebSocket handshake on upstream `ui` (its `101`
    /// is queued for the client): the exchange ends, its two connections become a tunnel.
    pub(super) fn start_tunnel(&mut self, id: ExchangeId, ui: UpstreamId) {
        let Some(ci) = self.exchanges.client_of(id, &self.clients) else {
            self.close_upstream(ui);
            return self.drop_exchange(id);
        };
        let Some(forward) = self.exchanges.get_mut(id).and_then(|ex| ex.take_forward()) else {
            return self.close_upstream(ui);
        };
        let client_id = self.clients.get(ci).map_or(0, |c| c.id);
        self.detach_for_tunnel(ui, ci, client_id);
        let outcome = Outcome {
            status: 101,
            bytes: 0,
            close: false,
            forward: Some(forward),
            upstream_end: None,
            from_origin: true,
        };
        self.finish(id, outcome);
        // The exchange is done and the codec between requests: from here on the connection
        // carries the tunnel, unless finishing decided to close it (a frang block on 101).
        let started = match self.clients.get_mut(ci) {
            Some(c) if c.id == client_id && !c.end.closing() => match &mut c.codec {
                Codec::H1(h1) if h1.is_idle() => {
                    h1.start_tunnel(Tunnel {
                        up: ui,
                        last_activity: Instant::now(),
                    });
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if !started {
            return self.close_upstream(ui);
        }
        self.metrics().tunnels.count_open();
        if let Some(timeout) = self.rt.config.client_ws_timeout {
            self.clients
                .arm_timer(&mut self.timers, ci, self.now + timeout);
        } else {
            // No idle timeout: the keep-alive timer armed by `finish` must not fire.
            self.clients.disarm_timer(&mut self.timers, ci);
        }
        self.dirty.push_back(client_token(ci));
        self.dirty.push_back(upstream_token(ui));
    }

    /// Upstream `ui` leaves its exchange and its server's pool: it belongs to client `ci`'s
    /// tunnel now and is never reused.
    fn detach_for_tunnel(&mut self, ui: UpstreamId, ci: ClientId, client_id: u64) {
        let Some(u) = self.upstreams.get_mut(ui) else {
            return;
        };
        u.exchange = None;
        u.phase = UpPhase::Tunnel {
            client: ci,
            client_id,
        };
        u.keep_alive = false;
        // No upstream deadline: the tunnel's idle timeout is the client's timer.
        u.timer_gen = 0;
        let (group, server, current) = (u.group, u.server, u.rt_gen == self.rt_gen);
        if current {
            if let Some(st) = self
                .groups
                .get_mut(group)
                .and_then(|g| g.servers.get_mut(server))
            {
                st.release_place();
            }
            self.serve_queue(group);
        }
    }

    /// The upstream connection of client `ci`'s tunnel.
    fn tunnel_upstream(&self, ci: ClientId) -> Option<UpstreamId> {
        self.clients.get(ci)?.codec.h1()?.tunnel().map(|t| t.up)
    }

    /// Moves bytes both ways as far as the sockets and the bounds allow; closes the tunnel
    /// when a side has ended and its last bytes are out.
    pub(super) fn drive_tunnel(&mut self, ci: ClientId) {
        for _ in 0..64 {
            let Some(ui) = self.tunnel_upstream(ci) else {
                return;
            };
            if !self.upstreams.contains(ui) {
                return self.close_tunnel(ci, TunnelEnd::Error);
            }
            let mut moved = self.read_client(ci);
            moved |= self.pass_to_origin(ci, ui);
            moved |= self.flush_upstream(ui);
            moved |= self.read_upstream(ui);
            moved |= self.pass_to_client(ci, ui);
            moved |= self.flush_client(ci);
            if let Some(end) = self.tunnel_ended_by(ci, ui) {
                return self.close_tunnel(ci, end);
            }
            if !moved {
                return self.release_tunnel_buffers(ci, ui);
            }
            if let Some(t) = self.tunnel_mut(ci) {
                t.last_activity = Instant::now();
            }
        }
        // Still moving after a full round: let the others run, then come back.
        self.dirty.push_back(client_token(ci));
    }

    fn tunnel_mut(&mut self, ci: ClientId) -> Option<&mut Tunnel> {
        match &mut self.clients.get_mut(ci)?.codec {
            Codec::H1(h1) => h1.tunnel_mut(),
            Codec::H2(_) => None,
        }
    }

    /// The client's bytes to the origin's outbox, while it has room.
    fn pass_to_origin(&mut self, ci: ClientId, ui: UpstreamId) -> bool {
        let Worker {
            clients,
            upstreams,
            bufs,
            shared,
            ..
        } = self;
        let (Some(c), Some(u)) = (clients.get_mut(ci), upstreams.get_mut(ui)) else {
            return false;
        };
        let counter = &shared.metrics.tunnels.bytes_to_origin;
        pass_bytes(&mut c.rbuf, &mut u.out, bufs, counter)
    }

    /// The origin's bytes to the client's outbox, while it has room.
    fn pass_to_client(&mut self, ci: ClientId, ui: UpstreamId) -> bool {
        let Worker {
            clients,
            upstreams,
            bufs,
            shared,
            ..
        } = self;
        let (Some(c), Some(u)) = (clients.get_mut(ci), upstreams.get_mut(ui)) else {
            return false;
        };
        let counter = &shared.metrics.tunnels.bytes_to_client;
        pass_bytes(&mut u.rbuf, &mut c.out, bufs, counter)
    }

    /// Whether the tunnel is over: a write to the client failed, or a side closed and its
    /// last bytes have reached the other (or the other can take none).
    fn tunnel_ended_by(&self, ci: ClientId, ui: UpstreamId) -> Option<TunnelEnd> {
        let c = self.clients.get(ci)?;
        let u = self.upstreams.get(ui)?;
        if c.end.write_failed() {
            return Some(TunnelEnd::Error);
        }
        let client_done = c.end.peer_closed() && c.rbuf.as_ref().is_none_or(|b| b.is_empty());
        let origin_done = u.peer_closed && u.rbuf.as_ref().is_none_or(|b| b.is_empty());
        if client_done && (u.out.is_empty() || u.peer_closed) {
            return Some(TunnelEnd::Client);
        }
        if origin_done && c.out.is_empty() {
            return Some(TunnelEnd::Origin);
        }
        None
    }

    /// Nothing moves: an idle tunnel holds no read buffer.
    fn release_tunnel_buffers(&mut self, ci: ClientId, ui: UpstreamId) {
        if let Some(c) = self.clients.get_mut(ci) {
            self.bufs.release_if_empty(&mut c.rbuf);
        }
        if let Some(u) = self.upstreams.get_mut(ui) {
            self.bufs.release_if_empty(&mut u.rbuf);
        }
    }

    /// Client `ci`'s timer fired while it tunnels: closed if idle for `client_ws_timeout`,
    /// else the timer is set for the rest of the quiet period.
    pub(super) fn tunnel_timer(&mut self, ci: ClientId, now: Instant) {
        let Some(timeout) = self.rt.config.client_ws_timeout else {
            return;
        };
        let Some(last) = self.tunnel_mut(ci).map(|t| t.last_activity) else {
            return;
        };
        let quiet = now.saturating_duration_since(last);
        if quiet >= timeout {
            self.close_tunnel(ci, TunnelEnd::IdleTimeout);
        } else {
            self.clients.arm_timer(&mut self.timers, ci, last + timeout);
        }
    }

    /// Ends client `ci`'s tunnel for `end`: both connections close.
    pub(super) fn close_tunnel(&mut self, ci: ClientId, end: TunnelEnd) {
        let reason = match end {
            TunnelEnd::Client => CloseReason::Client,
            TunnelEnd::Origin => CloseReason::Server,
            TunnelEnd::IdleTimeout => CloseReason::IdleTimeout,
            TunnelEnd::Error => CloseReason::Error,
            TunnelEnd::Shutdown | TunnelEnd::ServerRemoved => CloseReason::Shutdown,
        };
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let client_id = c.id;
        if let Some(t) = match &mut c.codec {
            Codec::H1(h1) => h1.take_tunnel(),
            Codec::H2(_) => None,
        } {
            self.tunnel_gone(t, ci, client_id, end);
        }
        self.close_client(ci, reason);
    }

    /// A tunnel's client connection is closing (`close_client`): its upstream connection
    /// closes with it, and the tunnel is counted as ended.
    pub(super) fn tunnel_gone(&mut self, t: Tunnel, ci: ClientId, client_id: u64, end: TunnelEnd) {
        let ours = self.upstreams.get(t.up).is_some_and(|u| {
            u.phase
                == UpPhase::Tunnel {
                    client: ci,
                    client_id,
                }
        });
        if ours {
            self.close_upstream(t.up);
        }
        self.metrics().tunnels.count_close(end);
    }

    /// Upstream `ui` of a tunnel became ready: drive the tunnel of its client, or close it if
    /// that client is gone.
    pub(super) fn drive_tunnel_upstream(&mut self, ui: UpstreamId, ci: ClientId, client_id: u64) {
        if self.clients.get(ci).is_some_and(|c| c.id == client_id) {
            self.drive_tunnel(ci);
        } else {
            self.close_upstream(ui);
        }
    }

    /// Every tunnel of this worker (client slab indices), for a graceful stop.
    pub(super) fn tunnel_clients(&self) -> Vec<ClientId> {
        self.clients
            .iter()
            .filter(|(_, c)| c.codec.h1().is_some_and(|h1| h1.tunnel().is_some()))
            .map(|(ci, _)| ci)
            .collect()
    }
}

/// Why a client connection closed, as a tunnel's end (a close that did not come through
/// [`Worker::close_tunnel`]: a panic, a graceful stop).
pub(super) fn end_of(reason: CloseReason) -> TunnelEnd {
    match reason {
        CloseReason::Client => TunnelEnd::Client,
        CloseReason::Server => TunnelEnd::Origin,
        CloseReason::IdleTimeout => TunnelEnd::IdleTimeout,
        CloseReason::Shutdown => TunnelEnd::Shutdown,
        _ => TunnelEnd::Error,
    }
}

/// Moves what one side read into the other side's outbox, if that outbox has room (the
/// tunnel's backpressure: a side is not read while the other cannot take more).
fn pass_bytes(
    from: &mut Option<crate::buf::Buf>,
    to: &mut crate::outbox::Outbox,
    bufs: &mut crate::buf::BufPool,
    counter: &std::sync::atomic::AtomicU64,
) -> bool {
    if !to.has_room() {
        return false;
    }
    let Some(rbuf) = from.as_mut().filter(|b| !b.is_empty()) else {
        return false;
    };
    let n = rbuf.len();
    to.push(rbuf.bytes());
    rbuf.consume(n);
    bufs.release_if_empty(from);
    crate::metrics::add(counter, n as u64);
    true
}
