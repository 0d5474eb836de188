//! Tempesta's client fingerprints: `tft` (TLS, from the ClientHello: [`Tft`]) and `tfh`
//! (HTTP, from a request head: [`Tfh`]), both 64-bit values computed as Tempesta computes
//! them, so a hash read in Tempesta's log names the same client here.
//!
//! No sockets here: the worker computes `tft` when a handshake completes (from the
//! ClientHello that `ktls::hello` captured) and `tfh` when a request head is complete.

mod tfh;
mod tft;

pub use tfh::{RequestShape, Tfh};
pub use tft::{Handshake, Tft};
