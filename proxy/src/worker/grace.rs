//! `grace_shutdown_time`: what a reload does to connections of servers it removed.
//!
//! A reload builds new server groups; new requests are scheduled over them only, so a server
//! that left its group (or whose group left) gets no new request or tunnel. Its connections
//! already open are *retiring*:
//! - an idle pooled one is closed at once (the pool belongs to the old configuration);
//! - one serving an exchange lets it finish and is then closed (never pooled again);
//! - with `grace_shutdown_time N` (N > 0), whatever still uses them N seconds after the
//!   reload is closed: an exchange without a response yet is answered 502, one half-sent is
//!   cut (the client connection closes), a WebSocket tunnel is closed;
//! - with `0` (the default) exchanges in flight still finish, as they did before this
//!   directive was enforced (each is bounded by `server_forward_timeout`), and tunnels to a
//!   removed server are closed at the reload.
//!
//! Connections of servers the new configuration keeps (same group name and address) are not
//! retiring: their exchanges and tunnels go on; they are renumbered into the new groups so
//! that failures and timeouts are accounted to the right server.
//!
//! Tempesta applies `grace_shutdown_time` to reconfiguration only; the process's own graceful
//! stop keeps its fixed bound (10 s).

use std::time::Instant;

use super::response::Failure;
use super::upstream::UpPhase;
use super::upstream::UpstreamId;
use super::Worker;
use crate::metrics_tunnel::TunnelEnd;
use crate::runtime::Runtime;

/// The timer key of the grace deadline (one per worker; every due connection is found by its
/// own `retire_at`).
pub(super) const GRACE_TIMER: usize = 5 << 32;

impl Worker {
    /// A reload replaced `old` by `self.rt`: connections of servers it removed start retiring.
    pub(super) fn retire_removed_servers(&mut self, old: &Runtime) {
        let grace = self.rt.config.grace_shutdown_time;
        let now = Instant::now();
        let deadline = now.checked_add(grace);
        let mut retiring = false;
        for (_, u) in self.upstreams.iter_mut() {
            if u.removed {
                // Retiring since an earlier reload: its deadline stands (and its indices
                // name a configuration older than `old`).
                continue;
            }
            let kept = old.groups.get(u.group).and_then(|g| {
                let addr = g.servers.get(u.server)?.addr;
                find_server(&self.rt, &g.name, addr)
            });
            match kept {
                Some((group, server)) => {
                    u.group = group;
                    u.server = server;
                    if let Some(g) = self.rt.groups.get(group) {
                        u.forward_timeout = g.forward_timeout;
                    }
                }
                None => {
                    u.removed = true;
                    if !grace.is_zero() {
                        u.retire_at = deadline;
                        retiring = true;
                    }
                }
            }
        }
        if grace.is_zero() {
            self.close_removed_tunnels();
        } else if let (true, Some(at)) = (retiring, deadline) {
            self.timers.schedule(at, GRACE_TIMER, 0);
        }
    }

    /// Tunnels to removed servers, when there is no grace time.
    fn close_removed_tunnels(&mut self) {
        let due: Vec<UpstreamId> = self
            .upstreams
            .iter()
            .filter(|(_, u)| u.removed && matches!(u.phase, UpPhase::Tunnel { .. }))
            .map(|(ui, _)| ui)
            .collect();
        for ui in due {
            self.retire(ui);
        }
    }

    /// The grace deadline came: connections of removed servers still open are closed.
    pub(super) fn retire_due(&mut self, now: Instant) {
        let due: Vec<UpstreamId> = self
            .upstreams
            .iter()
            .filter(|(_, u)| u.retire_at.is_some_and(|at| at <= now))
            .map(|(ui, _)| ui)
            .collect();
        for ui in due {
            self.retire(ui);
        }
    }

    /// Closes retiring upstream `ui` and ends what it carried.
    fn retire(&mut self, ui: UpstreamId) {
        let Some(u) = self.upstreams.get(ui) else {
            return;
        };
        match (u.phase, u.exchange) {
            (UpPhase::Tunnel { client, client_id }, _) => {
                if self.clients.get(client).is_some_and(|c| c.id == client_id) {
                    self.guarded(client, |w| w.close_tunnel(client, TunnelEnd::ServerRemoved));
                } else {
                    self.close_upstream(ui);
                }
            }
            (_, Some(id)) => {
                self.close_upstream(ui);
                self.guarded_exchange(id, |w| w.exchange_failed(id, Failure::ServerRemoved));
            }
            (_, None) => self.close_upstream(ui),
        }
    }
}

/// The (group, server) indices of `addr` in the group named `group` of `rt`.
fn find_server(rt: &Runtime, group: &str, addr: std::net::SocketAddr) -> Option<(usize, usize)> {
    let g = rt.groups.iter().position(|g| g.name == group)?;
    let s = rt
        .groups
        .get(g)?
        .servers
        .iter()
        .position(|s| s.addr == addr)?;
    Some((g, s))
}
