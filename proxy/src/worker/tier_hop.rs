//! The cache tier's side of routing (issue 37): which requests came from a peer node and
//! in what scheme, which node owns an object, and how long a peer's answer may stay quiet.
//! Facts over the parts they read; the steps that act on them are route.rs's.

use std::time::Duration;

use crate::fleet::tier::{hop_scheme, Tier, HOP_FIELD, PROBE};

use super::request::{Request, Scheme};

/// Whether a request that carries the cache tier's hop field came from a peer: it did when
/// it arrived on this node's `self` listener from another peer's address (`from_peer`: the
/// peers connect from their own `self` address, `upstream/conn.rs` `connect`), whatever
/// protocol carried it. Its scheme is then the one the field names (what the client used at the first node). A hop field
/// anywhere else is ignored (and removed before any origin sees it, `forward.rs`). A peer's
/// probe (the field's value `probe`) is a peer's request too, answered in `chain.rs` `route`.
pub(super) fn honour_hop(from_peer: bool, request: &mut Request) -> bool {
    // Without a peer, no field scan: this runs for every request.
    if !from_peer {
        return false;
    }
    let Some(value) = request.header(HOP_FIELD) else {
        return false;
    };
    let scheme = hop_scheme(value);
    if scheme.is_none() && value != PROBE {
        return false;
    }
    match scheme {
        Some("https") => request.set_scheme(Scheme::Https),
        Some(_) => request.set_scheme(Scheme::Http),
        None => {}
    }
    true
}

/// Whether a connection from `from` on `sock` is a cache tier peer's (`Tier::is_peer_connection`).
pub(super) fn from_peer(
    tier: Option<&Tier>,
    (from, sock): (std::net::IpAddr, &crate::socket::Socket),
) -> bool {
    tier.is_some_and(|t| t.is_peer_connection(from, sock.local_addr().ok()))
}

/// Whether the response of `group` carries the vhost's response edits already: a cache tier
/// peer's does (the owner made them, as it made the request edits), so the node that asked
/// relays and stores it as the owner sent it; made twice, a `resp_hdr_add` field would
/// appear twice. The owner's `Via` entry stays beside this node's (RFC 9110 §7.6.3).
pub(super) fn edited_by_owner(rt: &crate::runtime::Runtime, group: usize) -> bool {
    rt.tier.as_ref().is_some_and(|t| t.is_peer_group(group))
}

/// How long upstream connection `u` may stay quiet: its group's `server_forward_timeout`,
/// except a cache tier peer's once the head of its answer came (`peer_timeout` is for the
/// head; the body is the owner's origin's, relayed at the origin's pace: `Tier::relay_timeout`).
pub(super) fn quiet_limit(
    rt: &crate::runtime::Runtime,
    exchanges: &super::exchange::Exchanges,
    u: &super::upstream::Upstream,
) -> Duration {
    let relay = rt.tier.as_ref().filter(|t| t.is_peer_group(u.group));
    let head_came = || {
        let forward = u.exchange.and_then(|id| exchanges.get(id)?.forward());
        forward.is_some_and(|f| !f.resp.awaiting_head())
    };
    match relay {
        Some(tier) if head_came() => tier.relay_timeout,
        _ => u.forward_timeout,
    }
}

/// The internal group of the cache tier peer that exchange `ex`'s object goes to: a miss
/// or a revalidation (`filling`) of a safe request without a body that no peer sent, whose
/// key another peer owns.
pub(super) fn tier_owner(
    tier: &Tier,
    ex: &super::exchange::Exchange,
    filling: bool,
) -> Option<usize> {
    let request = &ex.request;
    if !filling
        || ex.tier_hop
        || request.has_body()
        || cache::is_unsafe_method(request.cache_method())
    {
        return None;
    }
    tier.owner_group(request.authority().unwrap_or_default(), request.path())
}

/// Whether client `ci` is a cache tier peer: its requests were judged by frang at the node
/// their clients reached, and a limit they break here (the fields that node added) must not
/// block the peer's address.
pub(super) fn peer_client(
    clients: &super::client::Clients,
    rt: &crate::runtime::Runtime,
    ci: super::client::ClientId,
) -> bool {
    clients
        .get(ci)
        .is_some_and(|c| from_peer(rt.tier.as_ref(), (c.peer.ip(), &c.sock)))
}
