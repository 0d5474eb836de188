//! Record protection with OpenSSL's AEADs, through cipher contexts kept keyed per thread.
//!
//! A connection holds only its keys (no context: an idle connection costs no cipher state).
//! Each worker thread keeps up to [`KEYED_PER_THREAD`] contexts per direction, each keyed
//! with one connection direction's key, and the connection remembers which of them it last
//! used ([`DirectionKeys::slot`]). A record whose key is still in its slot sets only the
//! nonce: no key schedule, no GHASH table, no provider look-ups of the key length. The
//! connections active at once (100 in the benchmarks) all stay keyed; past that, slots are
//! re-keyed in turn. A slot is wiped (its context freed, which clears OpenSSL's copy of the
//! key) when its keys are dropped on the thread that keyed it.
//! The contexts call the provider's functions directly where they can ([`aead_ctx`]).
//!
//! [`DirectionKeys::slot`]: crate::record::DirectionKeys
//! [`aead_ctx`]: super::aead_ctx

use std::cell::{Cell, RefCell};

use openssl::error::ErrorStack;

use super::aead_ctx::{AeadCtx, Backend};
use crate::kernel::KernelCipher;
use crate::record::keys::NONCE_LEN;

pub(crate) const TAG_LEN: usize = 16;

/// Keyed contexts a thread keeps per direction (about 1 KB each with AES-GCM, made only as
/// connections become active). At most 256: a connection keeps its slot in a byte (which
/// fits in the padding of its keys, so an idle connection grows by nothing).
const KEYED_PER_THREAD: usize = 128;

/// One context and what it is keyed with.
#[derive(Default)]
struct Keyed {
    /// Made for one cipher; `None` until first keyed and after a wipe.
    ctx: Option<AeadCtx>,
    /// The cipher `ctx` is keyed for; `None` while its key must not be trusted.
    cipher: Option<KernelCipher>,
    key_id: u64,
}

impl Keyed {
    fn holds(&self, suite: &Suite<'_>) -> bool {
        self.key_id == suite.key_id && self.cipher == Some(suite.cipher)
    }

    /// Keys the context with `suite` (a new context when the cipher changes); no nonce yet.
    fn key(
        &mut self,
        seal: bool,
        suite: &Suite<'_>,
        backend: Backend,
    ) -> Result<&mut AeadCtx, ErrorStack> {
        // Mark unkeyed first: if init fails half-way the context must not be trusted.
        self.cipher = None;
        let ctx = match self.ctx.take() {
            Some(ctx) if ctx.cipher() == suite.cipher => ctx,
            _ => AeadCtx::new(suite.cipher, backend)?,
        };
        let ctx = self.ctx.insert(ctx);
        ctx.set_key(seal, suite.key)?;
        self.cipher = Some(suite.cipher);
        self.key_id = suite.key_id;
        Ok(ctx)
    }

    /// Forgets the key: the context is freed (OpenSSL clears the key schedule as it frees
    /// it); the slot makes a new one when it is keyed again.
    fn wipe(&mut self) {
        self.ctx = None;
        self.cipher = None;
        self.key_id = 0;
    }

    /// Runs one record's steps on the keyed context; a failure (a forged record included)
    /// leaves the context in an unknown state, so the slot is re-keyed next time.
    fn record<T>(
        &mut self,
        steps: impl FnOnce(&mut AeadCtx) -> Result<T, ErrorStack>,
    ) -> Result<T, ErrorStack> {
        let result = match self.ctx.as_mut() {
            Some(ctx) => steps(ctx),
            None => Err(ErrorStack::get()),
        };
        if result.is_err() {
            self.cipher = None;
        }
        result
    }
}

/// One direction's keyed contexts on this thread.
#[derive(Default)]
struct Table {
    slots: Vec<Keyed>,
    /// The slot the next miss re-keys once the table is full (round robin).
    next_victim: usize,
}

impl Table {
    /// The slot keyed with `suite`'s key, keying one if none is.
    fn keyed(
        &mut self,
        seal: bool,
        suite: &Suite<'_>,
        backend: Backend,
    ) -> Result<&mut Keyed, ErrorStack> {
        let hint = usize::from(suite.slot.get());
        if self.slots.get(hint).is_some_and(|k| k.holds(suite)) {
            return Ok(&mut self.slots[hint]);
        }
        let index = if self.slots.len() < KEYED_PER_THREAD {
            self.slots.push(Keyed::default());
            self.slots.len() - 1
        } else {
            let victim = self.next_victim % KEYED_PER_THREAD;
            self.next_victim = victim + 1;
            victim
        };
        // KEYED_PER_THREAD <= 256, so every index fits.
        suite.slot.set(u8::try_from(index).unwrap_or(u8::MAX));
        let keyed = &mut self.slots[index];
        keyed.key(seal, suite, backend)?;
        Ok(keyed)
    }

    fn forget(&mut self, key_id: u64, slot: usize) {
        if let Some(k) = self.slots.get_mut(slot).filter(|k| k.key_id == key_id) {
            k.wipe();
        }
    }
}

struct Contexts {
    seal: Table,
    open: Table,
    backend: Backend,
}

thread_local! {
    static CONTEXTS: RefCell<Contexts> = RefCell::new(Contexts {
        seal: Table::default(),
        open: Table::default(),
        backend: Backend::Provider,
    });
}

fn with_contexts<T>(
    f: impl FnOnce(&mut Contexts) -> Result<T, ErrorStack>,
) -> Result<T, ErrorStack> {
    CONTEXTS.with(|cell| f(&mut cell.borrow_mut()))
}

/// Tests: this thread's records go through EVP from now on (its contexts are dropped).
#[cfg(test)]
pub(crate) fn use_evp_on_this_thread() {
    CONTEXTS.with(|cell| {
        let mut c = cell.borrow_mut();
        c.seal = Table::default();
        c.open = Table::default();
        c.backend = Backend::Evp;
    });
}

/// Wipes this thread's contexts keyed with `key_id` (its keys are being dropped). Keys
/// dropped on another thread than the one that used them are only overwritten when their
/// slot is re-keyed; the worker that serves a connection is also the one that drops it.
pub(crate) fn forget(key_id: u64, slot: u8) {
    let slot = usize::from(slot);
    let _ = CONTEXTS.try_with(|cell| {
        if let Ok(mut contexts) = cell.try_borrow_mut() {
            contexts.seal.forget(key_id, slot);
            contexts.open.forget(key_id, slot);
        }
    });
}

/// Which key a record is protected with.
pub(crate) struct Suite<'a> {
    pub cipher: KernelCipher,
    pub key: &'a [u8],
    pub key_id: u64,
    /// Where this thread's keyed context for the key was last (a hint, checked by id).
    pub slot: &'a Cell<u8>,
}

/// Records of at most this many plaintext bytes are gathered into the output first and
/// encrypted in one call: each call into the cipher costs a few hundred instructions of
/// set-up (more for a piece that ends mid-block), and a 10-byte response's record has three
/// pieces (head, body, content type). Larger records are encrypted piece by piece, straight
/// from the caller's buffers, so a 16 KiB body is not copied first.
#[cfg(not(feature = "aws-lc"))]
const GATHER_UP_TO: usize = 1024;

/// Appends to `out` the encryption of the `len` bytes `plain` yields, then the tag. The
/// ciphertext goes straight into `out`'s spare capacity: no zero-filling of the record first
/// (16 KiB per full record).
pub(crate) fn seal<'p>(
    suite: &Suite<'_>,
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    plain: impl Iterator<Item = &'p [u8]>,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), ErrorStack> {
    out.reserve(len + TAG_LEN);
    with_contexts(|c| {
        let backend = c.backend;
        c.seal.keyed(true, suite, backend)?.record(|ctx| {
            // AWS-LC's EVP_AEAD seals a whole record in one call: the pieces are gathered
            // first, whatever the length.
            #[cfg(feature = "aws-lc")]
            {
                let start = out.len();
                plain.for_each(|piece| out.extend_from_slice(piece));
                let mut tag = [0u8; TAG_LEN];
                ctx.seal_whole(nonce, aad, &mut out[start..], &mut tag)?;
                out.extend_from_slice(&tag);
                Ok(())
            }
            #[cfg(not(feature = "aws-lc"))]
            {
                ctx.set_nonce(true, nonce)?;
                ctx.aad(aad)?;
                if len <= GATHER_UP_TO {
                    let start = out.len();
                    plain.for_each(|piece| out.extend_from_slice(piece));
                    ctx.update_in_place(&mut out[start..])?;
                } else {
                    for piece in plain {
                        ctx.encrypt_append(piece, out)?;
                    }
                }
                let mut tag = [0u8; TAG_LEN];
                ctx.finish_seal(&mut tag)?;
                out.extend_from_slice(&tag);
                Ok(())
            }
        })
    })
}

/// Decrypts `data` in place and checks `tag`. An error means the record is not authentic
/// (or OpenSSL failed); `data` then holds garbage.
pub(crate) fn open(
    suite: &Suite<'_>,
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    data: &mut [u8],
    tag: &[u8],
) -> Result<(), ErrorStack> {
    with_contexts(|c| {
        let backend = c.backend;
        c.open.keyed(false, suite, backend)?.record(|ctx| {
            #[cfg(feature = "aws-lc")]
            return ctx.open_whole(nonce, aad, data, tag);
            #[cfg(not(feature = "aws-lc"))]
            {
                ctx.set_nonce(false, nonce)?;
                ctx.aad(aad)?;
                ctx.update_in_place(data)?;
                ctx.finish_open(tag)
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::KEYED_PER_THREAD;
    use crate::kernel::{KernelCipher, TlsVersion};
    use crate::record::{DirectionKeys, Inbound, RecordLayer};

    const CONNECTIONS: usize = 2 * KEYED_PER_THREAD + 45;

    /// A key of its own for every `i` (its first two bytes are `i`).
    fn key(i: usize, len: usize) -> Vec<u8> {
        let mut key: Vec<u8> = (0..len).map(|b| (b * 13) as u8).collect();
        key[..2].copy_from_slice(&(i as u16).to_be_bytes());
        key
    }

    /// A server layer (writes with connection `i`'s key) and the client layer that reads it.
    fn pair(i: usize, cipher: KernelCipher) -> (RecordLayer, RecordLayer) {
        let len = if cipher == KernelCipher::AesGcm128 {
            16
        } else {
            32
        };
        let keys = |n: usize| DirectionKeys::from_key_iv(&key(n, len), &[n as u8; 12], 0).unwrap();
        let server = RecordLayer::new(TlsVersion::Tls13, cipher, keys(2 * i), keys(2 * i + 1));
        let client = RecordLayer::new(TlsVersion::Tls13, cipher, keys(2 * i + 1), keys(2 * i));
        (server, client)
    }

    fn cipher_of(i: usize) -> KernelCipher {
        [
            KernelCipher::AesGcm128,
            KernelCipher::AesGcm256,
            KernelCipher::Chacha20Poly1305,
        ][i % 3]
    }

    fn seal(layer: &mut RecordLayer, i: usize, round: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let text = format!("connection {i} round {round}");
        layer
            .seal_data(&[text.as_bytes()], usize::MAX, &mut out)
            .unwrap();
        out
    }

    /// More connections than a thread keeps keyed, their records interleaved (every record
    /// a miss or a hit on a re-keyed slot), some connections dropped and replaced midway:
    /// every record must be the bytes a fresh thread (no cached context) makes with the same
    /// keys, must open with its own connection's keys, and must not open with another's.
    #[test]
    fn interleaved_connections_past_the_cache_seal_and_open_as_alone() {
        let mut pairs: Vec<_> = (0..CONNECTIONS).map(|i| pair(i, cipher_of(i))).collect();
        let mut wire = vec![Vec::new(); CONNECTIONS];
        for round in 0..3 {
            for (i, (server, _)) in pairs.iter_mut().enumerate() {
                wire[i].push(seal(server, i, round));
            }
            // Drop and remake some connections (their slots are wiped, ids are new).
            for i in (0..CONNECTIONS).step_by(17) {
                pairs[i] = pair(i, cipher_of(i));
                wire[i].clear();
            }
            for (i, (_, client)) in pairs.iter_mut().enumerate() {
                for record in &wire[i] {
                    let mut input = record.clone();
                    match client.open_record(&mut input) {
                        Ok(Inbound::Data { plain, .. }) => {
                            assert!(input[plain].starts_with(format!("connection {i} ").as_bytes()))
                        }
                        other => panic!("connection {i}: {other:?}"),
                    }
                }
                wire[i].clear();
            }
        }
        // A record of connection 1 does not open with another connection's keys of the same
        // cipher, though this thread just had them keyed.
        let (mut server, _) = pair(1, cipher_of(1));
        let record = seal(&mut server, 1, 9);
        for other in [0, 1 + KEYED_PER_THREAD] {
            let (_, mut client) = pair(other, cipher_of(1));
            let mut input = record.clone();
            assert!(
                client.open_record(&mut input).is_err(),
                "opened with {other}"
            );
        }
        // The same records on a fresh thread, one connection at a time.
        let mut interleaved = Vec::new();
        let mut servers: Vec<_> = (0..CONNECTIONS).map(|i| pair(i, cipher_of(i)).0).collect();
        for round in 0..2 {
            for (i, server) in servers.iter_mut().enumerate() {
                interleaved.push(seal(server, i, round));
            }
        }
        let alone = std::thread::spawn(|| {
            let mut records = vec![Vec::new(); 2 * CONNECTIONS];
            for i in 0..CONNECTIONS {
                let (mut server, _) = pair(i, cipher_of(i));
                for round in 0..2 {
                    records[round * CONNECTIONS + i] = seal(&mut server, i, round);
                }
            }
            records
        })
        .join()
        .unwrap();
        assert_eq!(interleaved, alone);
    }
}
