//! Connection IDs routed to the worker that owns the connection (issue 33, "Workers"). Each
//! worker's endpoint issues IDs that name it ([`WorkerCids`]: the worker's index, a nonce
//! and a signature under the process's key); a datagram that the kernel's SO_REUSEPORT hash
//! hands to another worker (the client's address or port changed: NAT rebinding, migration)
//! is recognised by its ID ([`owner`]) and moved to the owner's queue ([`Moves`]), which
//! wakes it; the owner feeds it to its endpoint as if it had read it, and answers from its
//! own socket of the same listener (same address and port; on a wildcard listener, from the
//! address the datagram was sent to, which it carries). A bounded queue per worker (4096
//! datagrams, 4 MiB): past it a moved datagram is dropped (QUIC's loss recovery sends again).

use std::collections::{HashMap, VecDeque};
use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mio::Waker;
use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};

/// The length of the IDs the proxy issues: worker (1), nonce (7), signature (4).
pub const CID_LEN: usize = 12;
/// Where the signature starts: it signs the worker byte and the nonce.
const SIGNED: usize = CID_LEN - 4;
/// A worker index that does not fit a byte is issued as this: not routed.
const UNROUTED: u8 = u8::MAX;
/// Datagrams waiting in one worker's queue at most, and their bytes at most (a datagram
/// may be up to 64 KiB).
const QUEUE_MAX: usize = 4096;
const QUEUE_BYTES: usize = 4 << 20;

/// The connection IDs one worker issues.
pub struct WorkerCids {
    pub key: u64,
    pub worker: usize,
}

/// The signature of an ID's first four bytes under `key`.
fn sign(key: u64, head: &[u8]) -> [u8; 4] {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    hasher.write_u64(key);
    hasher.write(head);
    let [a, b, c, d, ..] = hasher.finish().to_le_bytes();
    [a, b, c, d]
}

fn signed(key: u64, cid: &[u8]) -> bool {
    match (cid.get(..SIGNED), cid.get(SIGNED..CID_LEN)) {
        (Some(head), Some(sig)) if cid.len() == CID_LEN => sign(key, head) == sig,
        _ => false,
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut cid = [0u8; CID_LEN];
        cid[0] = u8::try_from(self.worker).unwrap_or(UNROUTED);
        // Not secret: the nonce only makes IDs differ (and unlinkable without the key). It
        // must not repeat while IDs are live: a Retry's ID is not checked against the
        // endpoint's (quinn-proto 0.11 `Endpoint::retry`), and the client's next Initial,
        // sent to it, goes to the connection that holds an equal ID and is lost there, so
        // the handshake never ends. With 3 bytes, at 16 000 live IDs (2 000 connections of
        // 8) one Retry in a thousand did that; with 7, about one in 10^12.
        let _ = openssl::rand::rand_bytes(&mut cid[1..SIGNED]);
        let sig = sign(self.key, &cid[..SIGNED]);
        cid[SIGNED..].copy_from_slice(&sig);
        ConnectionId::new(&cid)
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        match signed(self.key, cid) {
            true => Ok(()),
            false => Err(InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// The worker a datagram's destination connection ID names, if it is an ID of this
/// process (signed under `key`): a short-header packet (the ID right after the first byte)
/// or a Handshake packet (after version and length). Initial and 0-RTT packets carry the ID
/// the client chose: whichever worker gets them owns the connection.
pub fn owner(key: u64, datagram: &[u8]) -> Option<usize> {
    let first = *datagram.first()?;
    let cid = if first & 0x80 == 0 {
        datagram.get(1..1 + CID_LEN)?
    } else if first & 0x30 == 0x20 && datagram.get(5) == Some(&(CID_LEN as u8)) {
        datagram.get(6..6 + CID_LEN)?
    } else {
        return None;
    };
    let worker = *cid.first()?;
    (worker != UNROUTED && signed(key, cid)).then_some(usize::from(worker))
}

/// A datagram moved to the worker that owns its connection.
pub struct Moved {
    /// Which of the worker's QUIC sockets (listeners) it came in on.
    pub socket: usize,
    pub from: SocketAddr,
    /// The address it was sent to, on a wildcard listener: the owner replies from it.
    pub to: Option<IpAddr>,
    pub data: bytes::BytesMut,
}

struct Slot {
    waker: Arc<Waker>,
    queue: VecDeque<Moved>,
    bytes: usize,
}

/// The workers' queues of moved datagrams, one per worker of the process.
#[derive(Default)]
pub struct Moves {
    slots: Mutex<HashMap<usize, Slot>>,
}

impl Moves {
    pub fn register(&self, worker: usize, waker: Arc<Waker>) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let queue = VecDeque::new();
        slots.insert(
            worker,
            Slot {
                waker,
                queue,
                bytes: 0,
            },
        );
    }

    /// Queues `moved` for `worker` and wakes it. False: no such worker, or its queue is full.
    pub fn send(&self, worker: usize, moved: Moved) -> bool {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = slots.get_mut(&worker) else {
            return false;
        };
        let bytes = slot.bytes + moved.data.len();
        if slot.queue.len() >= QUEUE_MAX || bytes > QUEUE_BYTES {
            return false;
        }
        let wake = slot.queue.is_empty();
        slot.bytes = bytes;
        slot.queue.push_back(moved);
        if wake {
            let _ = slot.waker.wake();
        }
        true
    }

    /// What waits for `worker`.
    pub fn take(&self, worker: usize) -> VecDeque<Moved> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = slots.get_mut(&worker) else {
            return VecDeque::new();
        };
        slot.bytes = 0;
        std::mem::take(&mut slot.queue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_ids_name_their_worker_and_others_do_not() {
        let mut gen = WorkerCids { key: 7, worker: 3 };
        let cid = gen.generate_cid();
        assert!(gen.validate(&cid).is_ok());
        let mut short = vec![0x41];
        short.extend_from_slice(&cid);
        short.extend_from_slice(&[0; 30]);
        assert_eq!(owner(7, &short), Some(3));
        // Another process's key, or a changed byte: not ours.
        assert_eq!(owner(8, &short), None);
        short[2] ^= 1;
        assert_eq!(owner(7, &short), None);
        // A Handshake packet (long header type 2) with our ID after version and length.
        let mut handshake = vec![0xe0, 0, 0, 0, 1, CID_LEN as u8];
        handshake.extend_from_slice(&cid);
        assert_eq!(owner(7, &handshake), Some(3));
        // An Initial carries the client's choice: never routed.
        handshake[0] = 0xc0;
        assert_eq!(owner(7, &handshake), None);
    }

    /// A worker's live IDs and the ones it hands out in Retries come from one generator,
    /// and quinn-proto does not check a Retry's against the live ones: an ID must not repeat
    /// among as many as a worker holds (10 000 connections of 8). With a 3-byte nonce, 100 000
    /// IDs had about 300 repeats.
    #[test]
    fn issued_ids_do_not_repeat() {
        let mut gen = WorkerCids { key: 7, worker: 0 };
        let ids: std::collections::HashSet<ConnectionId> =
            (0..100_000).map(|_| gen.generate_cid()).collect();
        assert_eq!(ids.len(), 100_000);
    }
}
