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

use super::client::{ClientId, Clients};
use super::exchange::ExchangeId;
use super::upstream::{UpPhase, UpstreamId, Upstreams};
use crate::runtime::Runtime;
use crate::timers::Timers;

/// The timer key of the grace deadline (one per worker; every due connection is found by its
/// own `retire_at`).
pub(super) const GRACE_TIMER: usize = 5 << 32;

/// A reload replaced `old` by `new`: connections of servers it removed start retiring, those
/// of kept servers are renumbered into `new`. Arms the grace deadline on `timers` when one
/// applies; returns the connections to retire at once (tunnels to removed servers, when
/// there is no grace time).
pub(super) fn retire_removed_servers(
    upstreams: &mut Upstreams,
    (old, new): (&Runtime, &Runtime),
    timers: &mut Timers,
) -> Vec<UpstreamId> {
    let grace = new.config.grace_shutdown_time;
    let now = Instant::now();
    let deadline = now.checked_add(grace);
    let mut retiring = false;
    for (_, u) in upstreams.iter_mut() {
        if u.removed {
            // Retiring since an earlier reload: its deadline stands (and its indices
            // name a configuration older than `old`).
            continue;
        }
        let kept = old.groups.get(u.group).and_then(|g| {
            let addr = g.servers.get(u.server)?.addr;
            find_server(new, &g.name, addr)
        });
        match kept {
            Some((group, server)) => {
                u.group = group;
                u.server = server;
                if let Some(g) = new.groups.get(group) {
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
        return upstreams
            .iter()
            .filter(|(_, u)| u.removed && matches!(u.phase, UpPhase::Tunnel { .. }))
            .map(|(ui, _)| ui)
            .collect();
    }
    if let (true, Some(at)) = (retiring, deadline) {
        timers.schedule(at, GRACE_TIMER, 0);
    }
    Vec::new()
}

/// The grace deadline came: the connections of removed servers still open, to retire.
pub(super) fn due(upstreams: &Upstreams, now: Instant) -> Vec<UpstreamId> {
    upstreams
        .iter()
        .filter(|(_, u)| u.retire_at.is_some_and(|at| at <= now))
        .map(|(ui, _)| ui)
        .collect()
}

/// What retiring upstream connection `ui` carries, and so what its close ends.
pub(super) enum Carried {
    /// The tunnel of this client connection: closed with it.
    Tunnel(ClientId),
    /// An exchange: it fails (`Failure::ServerRemoved`) once the connection is closed.
    Exchange(ExchangeId),
    /// Nothing (idle, or a tunnel whose client is gone): the connection only closes.
    Nothing,
}

/// What upstream `ui` carries (None: no such connection).
pub(super) fn carried(upstreams: &Upstreams, clients: &Clients, ui: UpstreamId) -> Option<Carried> {
    let u = upstreams.get(ui)?;
    Some(match (u.phase, u.exchange) {
        (UpPhase::Tunnel { client, client_id }, _) => {
            if clients.get(client).is_some_and(|c| c.id == client_id) {
                Carried::Tunnel(client)
            } else {
                Carried::Nothing
            }
        }
        (_, Some(id)) => Carried::Exchange(id),
        (_, None) => Carried::Nothing,
    })
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
