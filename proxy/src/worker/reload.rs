//! What a reload does to the exchanges in flight. The new configuration may keep, move or
//! remove server groups and vhosts, and every index an exchange holds (`Exchange::vhost`,
//! `location`, `Forward::group`) and every group's wait queue belong to the old one. A group
//! or vhost is the same across configurations when it has the same name (a location: the
//! same match operator and pattern in its vhost), so at the reload:
//! - each exchange's indices are renumbered into the new configuration by name; a group that
//!   is gone becomes `GONE`, which no configuration has: a retry of such an exchange finds
//!   no server and is answered 502;
//! - the exchanges waiting in a group's queue move, in their order, to the queue of the group
//!   of the same name, and are served at once as far as the new pools have room (they start
//!   empty: connections of the old configuration finish their exchange and close). Those of
//!   a group that is gone are answered 502 at once: the configuration has no server for them
//!   any more, which is what 502 says for a group without a server up (503 is the answer of
//!   a full queue, a load that passes). Making them wait out `server_forward_timeout` for a
//!   504 would say something false, and sending them to another group would serve them from
//!   servers the new configuration does not give their vhost.
//!
//! Upstream connections are renumbered by `grace.rs`.

use super::exchange::{Exchange, ExchangeId, Exchanges, Forward, Stage};
use super::upstream::groups::GroupState;
use crate::runtime::{Runtime, VhostRt};

/// The group index of an exchange whose group a reload removed.
pub(super) const GONE: usize = usize::MAX;

/// Old group and vhost indices to the new configuration's, by name.
struct Renumbering<'a> {
    old: &'a Runtime,
    new: &'a Runtime,
    groups: Vec<Option<usize>>,
    vhosts: Vec<Option<usize>>,
}

impl<'a> Renumbering<'a> {
    fn new(old: &'a Runtime, new: &'a Runtime) -> Renumbering<'a> {
        let groups = old
            .groups
            .iter()
            .map(|g| new.groups.iter().position(|n| n.name == g.name))
            .collect();
        let vhosts = old
            .vhosts
            .iter()
            .map(|v| new.vhosts.iter().position(|n| n.name == v.name))
            .collect();
        Renumbering {
            old,
            new,
            groups,
            vhosts,
        }
    }

    fn group(&self, old: usize) -> Option<usize> {
        self.groups.get(old).copied().flatten()
    }

    /// An exchange's vhost and location in the new configuration (None: gone).
    fn vhost(
        &self,
        vhost: Option<usize>,
        location: Option<usize>,
    ) -> (Option<usize>, Option<usize>) {
        let Some(new) = vhost.and_then(|v| self.vhosts.get(v).copied().flatten()) else {
            return (None, None);
        };
        let old_vhost: Option<&VhostRt> = vhost.and_then(|v| self.old.vhosts.get(v));
        let location = location.and_then(|l| {
            let old = old_vhost?.locations.get(l)?;
            let locations = &self.new.vhosts.get(new)?.locations;
            locations.iter().position(|n| n.matcher == old.matcher)
        });
        (Some(new), location)
    }

    fn renumber(&self, ex: &mut Exchange) {
        (ex.vhost, ex.location) = self.vhost(ex.vhost, ex.location);
        if let Some(forward) = ex.queued_or_sent_mut() {
            forward.group = self.group(forward.group).unwrap_or(GONE);
            if let Some(fallback) = forward.tier_fallback.as_mut() {
                let (group, backup) = fallback.pass;
                fallback.pass = (
                    self.group(group).unwrap_or(GONE),
                    backup.and_then(|b| self.group(b)),
                );
            }
        }
    }
}

/// A reload replaced `old` by `new`, and `old_groups` (the old configuration's pools and
/// queues) by `groups`, new and empty: renumbers `exchanges` and moves the queues over (see
/// the module's comment). Returns the exchanges that were queued in a group that is gone,
/// for the caller to answer 502 when still queued ([`queued`]) ([`take_queued`]); then each exchange of a queue is served (a
/// connection of the new pools, or 502 with no server up) or, the pools full, queued again
/// behind the others, so the order stays.
pub(super) fn carry_exchanges_over(
    exchanges: &mut Exchanges,
    groups: &mut [GroupState],
    (old, new): (&Runtime, &Runtime),
    old_groups: Vec<GroupState>,
) -> Vec<ExchangeId> {
    let map = Renumbering::new(old, new);
    for ex in exchanges.iter_mut() {
        map.renumber(ex);
    }
    let mut orphans = Vec::new();
    for (index, state) in old_groups.into_iter().enumerate() {
        match map.group(index).and_then(|g| groups.get_mut(g)) {
            Some(kept) => kept.queue.extend(state.queue),
            None => orphans.extend(state.queue),
        }
    }
    orphans
}

/// Whether exchange `id` still waits in a queue.
pub(super) fn queued(exchanges: &Exchanges, id: ExchangeId) -> bool {
    exchanges
        .get(id)
        .is_some_and(|ex| matches!(ex.stage(), Stage::Queued(_)))
}

/// Takes the forward out of exchange `id` if it is still queued (one whose group a reload
/// removed: the caller answers it 502).
pub(super) fn take_queued(exchanges: &mut Exchanges, id: ExchangeId) -> Option<Box<Forward>> {
    if !queued(exchanges, id) {
        return None;
    }
    let ex = exchanges.get_mut(id)?;
    match ex.take_stage() {
        Stage::Queued(forward) => Some(forward),
        _ => None,
    }
}
