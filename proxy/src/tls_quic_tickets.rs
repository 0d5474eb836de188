//! Session tickets for QUIC handshakes (issue 33: "session tickets resume"): rustls seals the
//! session state it wants back with [`Ticketer`], whose keys are a ticket key ring of the
//! proxy's (`ktls::tickets`), as TCP's are. So the start vhost's `tls_tickets` rules QUIC's
//! tickets as well: `disable` sends none; `secret=S` derives the keys from S (every instance
//! with the same secret resumes the others' sessions); `keys=FILE` takes the key ring file,
//! re-read when it changes (`ticket_files.rs`); neither gives keys of this process only.
//!
//! The ring is QUIC's own (a derived ring's scope is `h3 NAME`; a key file's ring has the
//! file's keys, as TCP's has, but the MAC of a QUIC ticket covers a label TCP's lack), so a
//! TCP ticket never opens as a QUIC one or the reverse. One ring serves every vhost of the
//! QUIC listeners (rustls has one ticketer per configuration): a session resumes only under
//! the server name it was made for, which rustls checks on resumption (RFC 6066 §3). 0-RTT
//! stays off.
//!
//! A ticket is `key name (16) | IV (16) | AES-CBC(issued | state) | HMAC-SHA256(label | all
//! before) (32)`, the layout OpenSSL gives TCP's tickets, with the key's AES and HMAC halves.
//! `issued` (seconds since the epoch) bounds its age by `lifetime`, as OpenSSL's session
//! timeout does on TCP: rustls does not check a ticket's age, and a key stays in a ring (a
//! file's as long as it is listed, a derived one for two periods) longer than that.

use std::time::Duration;

use ktls::tickets::{RingHold, TicketKey, KEY_NAME_LEN};
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;
use openssl::symm::{Cipher, Crypter, Mode};

const IV_LEN: usize = 16;
const MAC_LEN: usize = 32;
/// What a QUIC ticket's MAC covers before the ticket: TCP's tickets, sealed with the same
/// keys from a key file, never pass as QUIC's.
const MAC_LABEL: &[u8] = b"ktls-proxy QUIC ticket\0";
/// The longest lifetime a ticket may announce (RFC 8446 §4.6.1: seven days).
const LIFETIME_MAX: u64 = 7 * 24 * 3600;
/// How far a ticket's issue time may be ahead of this node's clock (another node of the
/// fleet issued it).
const CLOCK_SKEW: u64 = 60;
/// The longest ticket opened: rustls's session state is a few hundred bytes (a resumption
/// secret, the server name, the ALPN, the certificate chain is not in it).
const TICKET_MAX: usize = 4096;

/// rustls's ticketer over one of the proxy's key rings. Owns the ring: it lives as long as
/// the QUIC configuration (and the connections made with it) that seals with it.
#[derive(Debug)]
pub struct Ticketer {
    ring: RingHold,
    lifetime: Duration,
}

impl Ticketer {
    pub fn new(ring: RingHold, lifetime: Duration) -> Ticketer {
        Ticketer { ring, lifetime }
    }
}

fn now_secs() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_secs())
}

fn cipher(key: &TicketKey) -> Cipher {
    match key.cipher {
        ktls::tickets::TicketCipher::Aes256Cbc => Cipher::aes_256_cbc(),
        ktls::tickets::TicketCipher::Aes128Cbc => Cipher::aes_128_cbc(),
    }
}

fn mac(key: &TicketKey, sealed: &[u8]) -> Option<Vec<u8>> {
    let pkey = PKey::hmac(key.hmac_key()).ok()?;
    let mut signer = Signer::new(MessageDigest::sha256(), &pkey).ok()?;
    signer.update(MAC_LABEL).ok()?;
    signer.update(sealed).ok()?;
    signer.sign_to_vec().ok()
}

fn crypt(key: &TicketKey, mode: Mode, iv: &[u8], input: &[u8]) -> Option<Vec<u8>> {
    let cipher = cipher(key);
    let mut c = Crypter::new(cipher, mode, key.aes_key(), Some(iv)).ok()?;
    let mut out = vec![0; input.len() + cipher.block_size()];
    let n = c.update(input, &mut out).ok()?;
    let end = c.finalize(&mut out[n..]).ok()?;
    out.truncate(n + end);
    Some(out)
}

impl rustls::server::ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.lifetime.as_secs().min(LIFETIME_MAX)).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        // None (a ring a reload freed, no randomness): rustls sends no ticket.
        let key = ktls::tickets::current_key(self.ring.id())?;
        let mut iv = [0u8; IV_LEN];
        openssl::rand::rand_bytes(&mut iv).ok()?;
        let mut dated = Vec::with_capacity(8 + plain.len());
        dated.extend_from_slice(&now_secs().to_be_bytes());
        dated.extend_from_slice(plain);
        let mut ticket = Vec::with_capacity(KEY_NAME_LEN + IV_LEN + dated.len() + 16 + MAC_LEN);
        ticket.extend_from_slice(&key.name);
        ticket.extend_from_slice(&iv);
        ticket.extend_from_slice(&crypt(&key, Mode::Encrypt, &iv, &dated)?);
        let tag = mac(&key, &ticket)?;
        ticket.extend_from_slice(&tag);
        Some(ticket)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        // The client's bytes: bounded, authenticated before anything is decrypted, compared
        // in constant time.
        if ticket.len() > TICKET_MAX || ticket.len() < KEY_NAME_LEN + IV_LEN + 16 + MAC_LEN {
            return None;
        }
        let (sealed, tag) = ticket.split_at(ticket.len() - MAC_LEN);
        let name: &[u8; KEY_NAME_LEN] = sealed[..KEY_NAME_LEN].try_into().ok()?;
        let (key, _current) = ktls::tickets::find_key(self.ring.id(), name)?;
        let expected = mac(&key, sealed)?;
        if !openssl::memcmp::eq(&expected, tag) {
            return None;
        }
        let iv = &sealed[KEY_NAME_LEN..KEY_NAME_LEN + IV_LEN];
        let mut dated = crypt(&key, Mode::Decrypt, iv, &sealed[KEY_NAME_LEN + IV_LEN..])?;
        let issued = u64::from_be_bytes(dated.get(..8)?.try_into().ok()?);
        let now = now_secs();
        let lifetime = self.lifetime.as_secs().min(LIFETIME_MAX);
        if issued > now + CLOCK_SKEW || now.saturating_sub(issued) > lifetime {
            return None;
        }
        dated.drain(..8);
        Some(dated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;

    fn ticketer(secret: &[u8], scope: &[u8]) -> Ticketer {
        let lifetime = Duration::from_secs(3600);
        let ring = ktls::tickets::register(Some(secret), scope, lifetime).expect("ring");
        Ticketer::new(ring, lifetime)
    }

    #[test]
    fn a_ticket_opens_with_the_same_keys_only() {
        let (a, b) = (ticketer(b"s", b"h3 site"), ticketer(b"s", b"h3 site"));
        let ticket = a.encrypt(b"session state").expect("sealed");
        assert_eq!(b.decrypt(&ticket).as_deref(), Some(&b"session state"[..]));
        assert_eq!(ticketer(b"other", b"h3 site").decrypt(&ticket), None);
        assert_eq!(ticketer(b"s", b"h3 other").decrypt(&ticket), None);
    }

    #[test]
    fn a_ticket_older_than_its_lifetime_does_not_open() {
        let lifetime = Duration::from_secs(1);
        let ring = ktls::tickets::register(Some(b"s"), b"h3 site", lifetime).expect("ring");
        let t = Ticketer::new(ring, lifetime);
        let ticket = t.encrypt(b"state").expect("sealed");
        assert!(t.decrypt(&ticket).is_some());
        std::thread::sleep(Duration::from_millis(2100));
        assert_eq!(t.decrypt(&ticket), None);
        let week = Ticketer::new(
            ktls::tickets::register(None, b"h3 site", Duration::from_secs(30 * 86400))
                .expect("ring"),
            Duration::from_secs(30 * 86400),
        );
        assert_eq!(week.lifetime(), 604_800);
    }

    #[test]
    fn a_changed_or_cut_ticket_does_not_open() {
        let t = ticketer(b"s", b"h3 site");
        let ticket = t.encrypt(&[7u8; 300]).expect("sealed");
        for at in [0, KEY_NAME_LEN, KEY_NAME_LEN + IV_LEN + 5, ticket.len() - 1] {
            let mut bad = ticket.clone();
            bad[at] ^= 1;
            assert_eq!(t.decrypt(&bad), None, "byte {at} flipped");
        }
        for len in [0, 10, KEY_NAME_LEN + IV_LEN + MAC_LEN, ticket.len() - 1] {
            assert_eq!(t.decrypt(&ticket[..len]), None, "cut to {len}");
        }
        assert_eq!(t.decrypt(&vec![0u8; TICKET_MAX + 1]), None);
    }
}
