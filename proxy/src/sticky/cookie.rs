//! The sticky cookie's value: when it was issued and an HMAC-SHA256, keyed
//! by the `sticky { secret }`, over that time and the client's identity
//! (its address and User-Agent). A client cannot forge one without the
//! key, cannot move one to another address or browser, and cannot keep one
//! past `sess_lifetime`.
//!
//! Wire form: 16 hex digits of the issue time (milliseconds since the Unix
//! epoch) followed by 64 hex digits of the MAC, 80 characters in all.

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openssl::sha::Sha256;

/// Length of the random key used when no `secret` is configured.
const RANDOM_KEY_LEN: usize = 32;
/// SHA-256's block size (RFC 2104's B).
const BLOCK: usize = 64;
const TIME_HEX: usize = 16;
const MAC_LEN: usize = 32;
/// Length of a cookie value in characters.
pub const VALUE_LEN: usize = TIME_HEX + 2 * MAC_LEN;
/// How far in the future an issue time may lie (clock steps between
/// workers' readings) before the cookie is refused.
const CLOCK_SLACK: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub enum StickyError {
    /// OpenSSL could not produce random bytes or a MAC.
    Crypto(openssl::error::ErrorStack),
    /// The system clock is before 1970.
    Clock,
}

impl fmt::Display for StickyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StickyError::Crypto(e) => write!(
                f,
                "sticky cookie HMAC failed ({e}); check that OpenSSL provides SHA-256 and a random source"
            ),
            StickyError::Clock => f.write_str(
                "the system clock is before 1970; set the time (sticky cookies carry their issue time)",
            ),
        }
    }
}

impl std::error::Error for StickyError {}

impl From<openssl::error::ErrorStack> for StickyError {
    fn from(e: openssl::error::ErrorStack) -> Self {
        StickyError::Crypto(e)
    }
}

/// Who a cookie was issued to.
#[derive(Debug, Clone, Copy)]
pub struct ClientIdentity<'a> {
    pub addr: IpAddr,
    /// The request's User-Agent value (empty when absent).
    pub user_agent: &'a [u8],
}

/// What a presented cookie value turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Issued by us to this client, `age` ago, within its lifetime.
    Valid {
        issued_at: SystemTime,
        age: Duration,
    },
    /// Not 80 hex digits.
    Malformed,
    /// The MAC does not match: forged, another client's, or another key's.
    BadMac,
    /// Issued longer ago than `sess_lifetime`.
    Expired,
    /// Issued in the future (forged time with a valid MAC is impossible;
    /// this is a clock step larger than the slack).
    FromFuture,
}

/// HMAC-SHA256 (RFC 2104) with one key, on SHA-256 states that have already absorbed the
/// key's inner and outer pads: each MAC clones them and hashes only the message, with no key
/// object or algorithm lookup per request (through OpenSSL 3's `EVP_DigestSign` the check
/// cost ~15 us of proxy CPU per request on a loaded 2-core machine; benches/sticky_ab.sh).
#[derive(Clone)]
pub struct HmacKey {
    inner: Sha256,
    outer: Sha256,
}

impl fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the key.
        f.write_str("HmacKey")
    }
}

impl HmacKey {
    pub fn new(key: &[u8]) -> HmacKey {
        // K0: the key, hashed first when longer than a block, zero-padded to a block.
        let mut k0 = [0u8; BLOCK];
        if key.len() > BLOCK {
            k0[..32].copy_from_slice(&openssl::sha::sha256(key));
        } else {
            k0[..key.len()].copy_from_slice(key);
        }
        let pad = |byte: u8| {
            let mut h = Sha256::new();
            h.update(&k0.map(|k| k ^ byte));
            h
        };
        let (inner, outer) = (pad(0x36), pad(0x5c));
        k0.fill(0);
        HmacKey { inner, outer }
    }

    fn mac(&self, millis: u64, who: &ClientIdentity<'_>) -> [u8; MAC_LEN] {
        let mut s = self.inner.clone();
        s.update(&millis.to_be_bytes());
        // A family tag keeps an IPv4 address and an IPv6 one with the same
        // leading bytes apart; the User-Agent comes last, so the message
        // splits one way only.
        match who.addr {
            IpAddr::V4(a) => {
                s.update(&[4]);
                s.update(&a.octets());
            }
            IpAddr::V6(a) => {
                s.update(&[6]);
                s.update(&a.octets());
            }
        }
        s.update(who.user_agent);
        let mut o = self.outer.clone();
        o.update(&s.finish());
        o.finish()
    }
}

/// Issues and verifies cookie values with one key, or, in a fleet (`fleet`), with the key
/// the fleet agreed through Redis once this process knows it (crate::sticky::fleet_key):
/// cookies are then issued with the fleet's key, and those this process issued with its own
/// before it knew it stay valid here.
#[derive(Clone)]
pub struct CookieCodec {
    key: HmacKey,
    fleet: bool,
    lifetime: Option<Duration>,
}

impl fmt::Debug for CookieCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the key.
        f.debug_struct("CookieCodec")
            .field("fleet", &self.fleet)
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl CookieCodec {
    /// A codec keyed by `secret`, or by fresh random bytes when `None` (so
    /// cookies do not survive a restart, as in Tempesta). `lifetime` is
    /// `sess_lifetime` (`None`: cookies never expire).
    pub fn new(secret: Option<&str>, lifetime: Option<Duration>) -> Result<Self, StickyError> {
        let mut random = [0u8; RANDOM_KEY_LEN];
        let key: &[u8] = match secret {
            Some(s) => s.as_bytes(),
            None => {
                openssl::rand::rand_bytes(&mut random)?;
                &random
            }
        };
        let key = HmacKey::new(key);
        random.fill(0);
        Ok(CookieCodec {
            key,
            fleet: false,
            lifetime,
        })
    }

    /// This codec, using the fleet's key once the process knows it.
    pub fn in_fleet(mut self) -> Self {
        self.fleet = true;
        self
    }

    /// The key new cookies are issued with.
    fn issuing(&self) -> &HmacKey {
        match self.fleet.then(super::fleet_key).flatten() {
            Some(k) => k,
            None => &self.key,
        }
    }

    /// A fresh value for `who`, issued at `now`.
    pub fn issue(&self, who: &ClientIdentity<'_>, now: SystemTime) -> Result<String, StickyError> {
        let millis = unix_millis(now)?;
        let mac = self.issuing().mac(millis, who);
        let mut out = format!("{millis:016x}");
        for b in mac {
            out.push_str(&format!("{b:02x}"));
        }
        Ok(out)
    }

    /// Checks a presented value for `who` at `now`. The MAC comparison
    /// takes the same time wherever the first difference is.
    pub fn verify(
        &self,
        value: &[u8],
        who: &ClientIdentity<'_>,
        now: SystemTime,
    ) -> Result<Verdict, StickyError> {
        let Some((millis, mac)) = parse(value) else {
            return Ok(Verdict::Malformed);
        };
        let issuing = self.issuing();
        let ours = |k: &HmacKey| openssl::memcmp::eq(&k.mac(millis, who), &mac);
        // In a fleet, a cookie this process issued with its own key before it knew the
        // fleet's is checked with that key too (one more MAC, for bad cookies only).
        let fallback = !std::ptr::eq(issuing, &self.key);
        let valid = ours(issuing) || (fallback && ours(&self.key));
        if !valid {
            return Ok(Verdict::BadMac);
        }
        let issued_at = UNIX_EPOCH + Duration::from_millis(millis);
        let age = match now.duration_since(issued_at) {
            Ok(age) => age,
            Err(e) if e.duration() <= CLOCK_SLACK => Duration::ZERO,
            Err(_) => return Ok(Verdict::FromFuture),
        };
        if self.lifetime.is_some_and(|l| age > l) {
            return Ok(Verdict::Expired);
        }
        Ok(Verdict::Valid { issued_at, age })
    }
}

fn unix_millis(t: SystemTime) -> Result<u64, StickyError> {
    let d = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| StickyError::Clock)?;
    u64::try_from(d.as_millis()).map_err(|_| StickyError::Clock)
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// Splits a value into its issue time and MAC; `None` unless it is exactly
/// 80 lower-case hex digits.
fn parse(value: &[u8]) -> Option<(u64, [u8; MAC_LEN])> {
    if value.len() != VALUE_LEN {
        return None;
    }
    let mut millis = 0u64;
    for &c in &value[..TIME_HEX] {
        millis = (millis << 4) | u64::from(hex_digit(c)?);
    }
    let mut mac = [0u8; MAC_LEN];
    for (i, pair) in value[TIME_HEX..].chunks_exact(2).enumerate() {
        mac[i] = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
    }
    Some((millis, mac))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UA: &[u8] = b"Mozilla/5.0 test";

    fn who(addr: &str) -> ClientIdentity<'static> {
        ClientIdentity {
            addr: addr.parse().unwrap(),
            user_agent: UA,
        }
    }

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    #[test]
    fn an_issued_cookie_verifies_for_its_client() {
        let c = CookieCodec::new(Some("s3cret"), Some(Duration::from_secs(60))).unwrap();
        let v = c.issue(&who("10.0.0.1"), t(0)).unwrap();
        assert_eq!(v.len(), VALUE_LEN);
        assert_eq!(
            c.verify(v.as_bytes(), &who("10.0.0.1"), t(5)).unwrap(),
            Verdict::Valid {
                issued_at: t(0),
                age: Duration::from_secs(5)
            }
        );
        // The same secret on another worker or node accepts it too.
        let other_node = CookieCodec::new(Some("s3cret"), None).unwrap();
        assert!(matches!(
            other_node
                .verify(v.as_bytes(), &who("10.0.0.1"), t(5))
                .unwrap(),
            Verdict::Valid { .. }
        ));
    }

    /// The precomputed-pad HMAC agrees with OpenSSL's own, for short, block-sized and long keys.
    #[test]
    fn the_mac_is_hmac_sha256() {
        use openssl::hash::MessageDigest;
        use openssl::pkey::PKey;
        use openssl::sign::Signer;
        let me = who("10.0.0.1");
        for key in ["k".to_string(), "b".repeat(64), "l".repeat(200)] {
            let c = CookieCodec::new(Some(&key), None).unwrap();
            let value = c.issue(&me, t(0)).unwrap();
            let pkey = PKey::hmac(key.as_bytes()).unwrap();
            let mut s = Signer::new(MessageDigest::sha256(), &pkey).unwrap();
            let millis = u64::from_str_radix(&value[..TIME_HEX], 16).unwrap();
            for part in [&millis.to_be_bytes()[..], &[4], &[10, 0, 0, 1], UA] {
                s.update(part).unwrap();
            }
            let expected: String = s
                .sign_to_vec()
                .unwrap()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(&value[TIME_HEX..], expected, "key of {} bytes", key.len());
        }
    }

    #[test]
    fn attack_forged_cookies_are_refused() {
        let c = CookieCodec::new(Some("s3cret"), None).unwrap();
        let me = who("10.0.0.1");
        // Made up from scratch.
        let forged = format!("{:016x}{}", 1_700_000_000_000u64, "ab".repeat(MAC_LEN));
        assert_eq!(
            c.verify(forged.as_bytes(), &me, t(0)).unwrap(),
            Verdict::BadMac
        );
        // A real cookie with its time moved forward to dodge expiry.
        let real = c.issue(&me, t(0)).unwrap();
        let mut moved = format!("{:016x}", 1_700_000_100_000u64);
        moved.push_str(&real[TIME_HEX..]);
        assert_eq!(
            c.verify(moved.as_bytes(), &me, t(200)).unwrap(),
            Verdict::BadMac
        );
        // One flipped MAC bit.
        let mut flipped = real.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(c.verify(&flipped, &me, t(0)).unwrap(), Verdict::BadMac);
    }

    #[test]
    fn attack_a_cookie_moved_to_another_client_is_refused() {
        let c = CookieCodec::new(Some("s3cret"), None).unwrap();
        let v = c.issue(&who("10.0.0.1"), t(0)).unwrap();
        assert_eq!(
            c.verify(v.as_bytes(), &who("10.0.0.2"), t(0)).unwrap(),
            Verdict::BadMac
        );
        let other_ua = ClientIdentity {
            addr: "10.0.0.1".parse().unwrap(),
            user_agent: b"curl/8",
        };
        assert_eq!(
            c.verify(v.as_bytes(), &other_ua, t(0)).unwrap(),
            Verdict::BadMac
        );
        // IPv4 and IPv6 identities never collide.
        let v6 = c.issue(&who("::a00:1"), t(0)).unwrap();
        assert_eq!(
            c.verify(v6.as_bytes(), &who("10.0.0.1"), t(0)).unwrap(),
            Verdict::BadMac
        );
    }

    #[test]
    fn attack_a_cookie_of_another_secret_is_refused() {
        let ours = CookieCodec::new(Some("ours"), None).unwrap();
        let theirs = CookieCodec::new(Some("theirs"), None).unwrap();
        let v = theirs.issue(&who("10.0.0.1"), t(0)).unwrap();
        assert_eq!(
            ours.verify(v.as_bytes(), &who("10.0.0.1"), t(0)).unwrap(),
            Verdict::BadMac
        );
        // Two random keys (no secret configured) differ: a restart invalidates.
        let a = CookieCodec::new(None, None).unwrap();
        let b = CookieCodec::new(None, None).unwrap();
        let v = a.issue(&who("10.0.0.1"), t(0)).unwrap();
        assert!(matches!(
            a.verify(v.as_bytes(), &who("10.0.0.1"), t(0)).unwrap(),
            Verdict::Valid { .. }
        ));
        assert_eq!(
            b.verify(v.as_bytes(), &who("10.0.0.1"), t(0)).unwrap(),
            Verdict::BadMac
        );
    }

    #[test]
    fn attack_replay_after_expiry_is_refused() {
        let c = CookieCodec::new(Some("k"), Some(Duration::from_secs(900))).unwrap();
        let me = who("192.0.2.7");
        let v = c.issue(&me, t(0)).unwrap();
        assert!(matches!(
            c.verify(v.as_bytes(), &me, t(900)).unwrap(),
            Verdict::Valid { .. }
        ));
        assert_eq!(
            c.verify(v.as_bytes(), &me, t(901)).unwrap(),
            Verdict::Expired
        );
        // Issued "in the future" beyond the slack: a clock step, refused.
        assert_eq!(
            c.verify(v.as_bytes(), &me, t(0) - Duration::from_secs(5))
                .unwrap(),
            Verdict::FromFuture
        );
        assert!(matches!(
            c.verify(v.as_bytes(), &me, t(0) - Duration::from_millis(500))
                .unwrap(),
            Verdict::Valid { .. }
        ));
    }

    #[test]
    fn attack_truncated_and_garbage_values_are_malformed() {
        let c = CookieCodec::new(Some("k"), None).unwrap();
        let me = who("10.0.0.1");
        let v = c.issue(&me, t(0)).unwrap();
        for bad in [
            &v.as_bytes()[..VALUE_LEN - 1],
            &v.as_bytes()[..TIME_HEX],
            b"".as_slice(),
            v.to_uppercase().as_bytes(),
            format!("{v}0").as_bytes(),
            "\u{e9}".repeat(VALUE_LEN / 2).as_bytes(),
        ] {
            assert_eq!(
                c.verify(bad, &me, t(0)).unwrap(),
                Verdict::Malformed,
                "{bad:?}"
            );
        }
    }
}
