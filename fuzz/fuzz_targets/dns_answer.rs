//! Fuzz the resolver's reading of a DNS server's datagram (`proxy::resolve::dns`): the
//! simple-dns parser and the proxy's selection of A, AAAA and SRV records from it, as the
//! resolver thread feeds them (a `resolver` is configured, but its answers, or forged ones
//! on its port, are bytes from the network).
//!
//! Input: byte 0 picks the question's kind; bytes 1-2 are its id; the rest is the datagram.
//! Invariants, besides never panicking: an answer is taken only for the question asked (its
//! id), and what is taken is bounded by the datagram (no record without bytes for it).
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use proxy::resolve::dns::{judge_answer, Kind};

fuzz_target!(|data: &[u8]| {
    let [kind, id_hi, id_lo, datagram @ ..] = data else {
        return;
    };
    let kind = match kind % 3 {
        0 => Kind::A,
        1 => Kind::Aaaa,
        _ => Kind::Srv,
    };
    let id = u16::from_be_bytes([*id_hi, *id_lo]);
    for name in ["origin.example", "_http._tcp.origin.example"] {
        if let Some(Ok(records)) = judge_answer(datagram, id, name, kind) {
            // The header's id is bytes 0-1 of the datagram.
            assert_eq!(datagram.get(..2), Some(&id.to_be_bytes()[..]));
            // A record takes at least 11 bytes beside its name (type, class, TTL, length).
            let taken = records.addrs.len() + records.additional.len() + records.srv.len();
            assert!(taken * 11 <= datagram.len());
        }
    }
});
