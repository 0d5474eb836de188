//! The worker's client connections, named by [`ClientId`]: a slab whose slots only this table
//! hands out, so that no bare index names a connection outside it (a poll token or a timer
//! key carries the id's index, and is turned back into an id here).

use slab::Slab;

use super::Client;

/// A client connection's place in the worker's [`Clients`]. A slot is reused once its
/// connection closes: whoever keeps an id past the connection's turn keeps the connection's
/// unique `Client::id` beside it and checks it (an exchange's `client_id`, a tunnel's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(usize);

impl ClientId {
    /// No connection (a background revalidation's exchange has no client).
    pub const NONE: ClientId = ClientId(usize::MAX);

    /// The slot's index, for a poll token or a timer key.
    pub fn index(self) -> usize {
        self.0
    }

    /// The id a poll token or a timer key carried (`index` of an id this table gave out).
    pub fn from_index(index: usize) -> ClientId {
        ClientId(index)
    }
}

/// The worker's client connections.
#[derive(Default)]
pub struct Clients {
    slab: Slab<Client>,
    /// The last connection's unique id (`Client::id`): slots are reused, these are not.
    last_unique: u64,
}

impl Clients {
    /// A unique id for the next connection.
    pub fn next_unique(&mut self) -> u64 {
        self.last_unique += 1;
        self.last_unique
    }

    #[inline]
    pub fn get(&self, id: ClientId) -> Option<&Client> {
        self.slab.get(id.0)
    }

    #[inline]
    pub fn get_mut(&mut self, id: ClientId) -> Option<&mut Client> {
        self.slab.get_mut(id.0)
    }

    /// `id` if it still holds the connection whose unique id is `unique` (a later one may
    /// have taken its slot since).
    #[inline]
    pub fn current(&self, id: ClientId, unique: u64) -> Option<ClientId> {
        self.get(id).filter(|c| c.id == unique).map(|_| id)
    }

    #[inline]
    pub fn contains(&self, id: ClientId) -> bool {
        self.slab.contains(id.0)
    }

    /// The id the next [`Clients::insert`] gives (to register the socket first).
    pub fn next_id(&self) -> ClientId {
        ClientId(self.slab.vacant_key())
    }

    pub fn insert(&mut self, client: Client) -> ClientId {
        ClientId(self.slab.insert(client))
    }

    pub fn remove(&mut self, id: ClientId) -> Option<Client> {
        self.slab.try_remove(id.0)
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (ClientId, &Client)> {
        self.slab.iter().map(|(i, c)| (ClientId(i), c))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (ClientId, &mut Client)> {
        self.slab.iter_mut().map(|(i, c)| (ClientId(i), c))
    }
}
