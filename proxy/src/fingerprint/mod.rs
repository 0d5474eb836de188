//! Tempesta's client fingerprints and the limits keyed by them: `tft` (TLS, from the
//! ClientHello: [`Tft`]) and `tfh` (HTTP, from a request head: [`Tfh`]), both 64-bit values
//! computed as Tempesta computes them, so a hash read in Tempesta's log limits the same
//! client here. FoxIO's JA4 ([`Ja4`]) is computed for the access log only.
//!
//! No sockets here: the worker computes `tft` when a handshake completes (from the
//! ClientHello that `ktls::hello` captured) and `tfh` when a request head is complete, and
//! asks [`Fingerprints`] whether the connection, record or request is over its limit or on
//! the blocklist.

mod fleet;
mod ja4;
mod limits;
mod tfh;
mod tft;

pub use fleet::{Counter, FingerprintDelta, Kind};
pub use ja4::Ja4;
pub use limits::{Fingerprints, Verdict};
pub use tfh::{RequestShape, Tfh};
pub use tft::{Handshake, Tft};
