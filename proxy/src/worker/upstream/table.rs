//! The worker's upstream connections, named by [`UpstreamId`]: a slab whose slots only this
//! table hands out, so that no bare index names a connection outside it (a poll token or a
//! timer key carries the id's index, and is turned back into an id here).

use slab::Slab;

use super::Upstream;

/// An upstream connection's place in the worker's [`Upstreams`]. A slot is reused once its
/// connection closes: whoever keeps an id checks that the connection is still the one it
/// meant (its exchange, its tunnel's client).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UpstreamId(usize);

impl UpstreamId {
    /// No connection (an exchange not sent yet).
    pub const NONE: UpstreamId = UpstreamId(usize::MAX);

    /// The slot's index, for a poll token or a timer key.
    pub fn index(self) -> usize {
        self.0
    }

    /// The id a poll token or a timer key carried (`index` of an id this table gave out).
    pub fn from_index(index: usize) -> UpstreamId {
        UpstreamId(index)
    }
}

/// The worker's upstream connections.
#[derive(Default)]
pub struct Upstreams {
    slab: Slab<Upstream>,
    /// HTTP/2 stream entries that lost their connection as it closed: the loop drives them
    /// next (`forward.rs` `serve_freed`), so their exchanges fail or retry at once.
    pub h2_woken: Vec<UpstreamId>,
}

impl Upstreams {
    pub fn get(&self, id: UpstreamId) -> Option<&Upstream> {
        self.slab.get(id.0)
    }

    pub fn get_mut(&mut self, id: UpstreamId) -> Option<&mut Upstream> {
        self.slab.get_mut(id.0)
    }

    pub fn contains(&self, id: UpstreamId) -> bool {
        self.slab.contains(id.0)
    }

    /// The id the next [`Upstreams::insert`] gives (to register the socket first).
    pub fn next_id(&self) -> UpstreamId {
        UpstreamId(self.slab.vacant_key())
    }

    pub fn insert(&mut self, upstream: Upstream) -> UpstreamId {
        UpstreamId(self.slab.insert(upstream))
    }

    pub fn remove(&mut self, id: UpstreamId) -> Option<Upstream> {
        self.slab.try_remove(id.0)
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (UpstreamId, &Upstream)> {
        self.slab.iter().map(|(i, u)| (UpstreamId(i), u))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (UpstreamId, &mut Upstream)> {
        self.slab.iter_mut().map(|(i, u)| (UpstreamId(i), u))
    }
}
