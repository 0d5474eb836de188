//! Exchanges waiting for a connection of their server group: at most `server_queue_size` for
//! each connection the group may open (`GroupRt::queue_limit`), each for at most
//! `server_forward_timeout`, served in arrival order as connections free up.

use super::exchange::{ExchangeId, Forward, Stage};
use super::upstream::CONNECT_TIMEOUT;
use super::Worker;
use crate::metrics::bump;

impl Worker {
    /// Gives freed capacity to the first waiting exchange of `group`.
    pub(super) fn serve_queue(&mut self, group: usize) {
        while let Some(id) = self.groups.get_mut(group).and_then(|g| g.queue.pop_front()) {
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
        self.unqueue(id);
        let Some(ex) = self.exchanges.get_mut(id) else {
            return;
        };
        if let Stage::Queued(forward) = ex.take_stage() {
            bump(&self.metrics().upstream_timeouts);
            self.fail_exchange(id, forward, 504);
        }
    }

    /// Removes an exchange from its group's wait queue.
    pub(super) fn unqueue(&mut self, id: ExchangeId) {
        for g in &mut self.groups {
            g.queue.retain(|&queued| queued != id);
        }
    }

    /// Queues exchange `id` until a connection of its group frees up; Err if the queue is
    /// full.
    pub(super) fn enqueue(
        &mut self,
        id: ExchangeId,
        forward: Box<Forward>,
    ) -> Result<(), Box<Forward>> {
        let group = forward.group;
        let limit = self.rt.groups.get(group).map_or(0, |g| g.queue_limit);
        let Some(g) = self.groups.get_mut(group) else {
            return Err(forward);
        };
        if g.queue.len() >= limit {
            return Err(forward);
        }
        g.queue.push_back(id);
        let timeout = self
            .rt
            .groups
            .get(group)
            .map_or(CONNECT_TIMEOUT, |g| g.forward_timeout);
        if let Some(ex) = self.exchanges.get_mut(id) {
            ex.queue(forward);
        }
        // A queued exchange waits at most server_forward_timeout for a connection.
        self.arm_exchange_timer(id, timeout);
        Ok(())
    }
}
