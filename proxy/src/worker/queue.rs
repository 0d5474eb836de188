//! Requests waiting for a connection of their server group: at most `server_queue_size` per
//! group, each for at most `server_forward_timeout`, served in arrival order as connections
//! free up.

use super::exchange::{Exchange, ReqState};
use super::upstream::CONNECT_TIMEOUT;
use super::Worker;
use crate::metrics::bump;

impl Worker {
    /// Gives freed capacity to the first waiting client of `group`.
    pub(super) fn serve_queue(&mut self, group: usize) {
        while let Some(ci) = self.groups.get_mut(group).and_then(|g| g.queue.pop_front()) {
            let waiting = self
                .clients
                .get(ci)
                .is_some_and(|c| matches!(c.req, ReqState::Queued(_)));
            if !waiting {
                continue;
            }
            let Some(c) = self.clients.get_mut(ci) else {
                continue;
            };
            let ReqState::Queued(ex) = std::mem::replace(&mut c.req, ReqState::Head) else {
                continue;
            };
            self.dispatch(ci, ex);
            return;
        }
    }

    /// A queued request waited `server_forward_timeout` without a connection: 504.
    pub(super) fn queue_expired(&mut self, ci: usize) {
        self.unqueue(ci);
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        if let ReqState::Queued(ex) = std::mem::replace(&mut c.req, ReqState::Head) {
            bump(&self.metrics().upstream_timeouts);
            self.fail_exchange(ci, ex, 504);
        }
    }

    /// Removes a closing client from its group's wait queue.
    pub(super) fn unqueue(&mut self, ci: usize) {
        for g in &mut self.groups {
            g.queue.retain(|&c| c != ci);
        }
    }

    /// Queues a client until a connection of `group` frees up; false if the queue is full.
    pub(super) fn enqueue(
        &mut self,
        ci: usize,
        group: usize,
        ex: Box<Exchange>,
    ) -> Result<(), Box<Exchange>> {
        let limit = self.rt.groups.get(group).map_or(0, |g| g.queue_size);
        let Some(g) = self.groups.get_mut(group) else {
            return Err(ex);
        };
        if g.queue.len() >= limit {
            return Err(ex);
        }
        g.queue.push_back(ci);
        let timeout = self
            .rt
            .groups
            .get(group)
            .map_or(CONNECT_TIMEOUT, |g| g.forward_timeout);
        if let Some(c) = self.clients.get_mut(ci) {
            c.req = ReqState::Queued(ex);
        }
        // A queued request waits at most server_forward_timeout for a connection.
        self.arm_client_timer(ci, timeout);
        Ok(())
    }
}
