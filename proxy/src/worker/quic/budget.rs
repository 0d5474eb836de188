//! What a QUIC peer may make quinn-proto handle for it without moving its connection on
//! (issue 33, "Under attack"): frames that are legal one at a time and cheap each, but that a
//! peer can pack a datagram with, or keep sending for as long as its connection lives.
//!
//! - **ACK frames.** A peer acknowledges in one ACK frame per packet, and a datagram holds at
//!   most three packets (Initial, Handshake, 1-RTT coalesced), one 1-RTT packet once the
//!   handshake is done. quinn-proto walks every ACK frame it decodes (its ranges against the
//!   packets in flight, loss detection when one acknowledges something new), and a 1200-byte
//!   packet holds about 200 of the smallest. A connection may have received at most
//!   [`ACKS_PER_DATAGRAM`] per datagram, plus [`ACK_SLACK`] for its handshake.
//! - **CRYPTO frames.** A client sends CRYPTO data only for its handshake: its ClientHello
//!   (split into a few frames by some clients) and its Finished, plus what it retransmits.
//!   None after the handshake (QUIC has no TLS KeyUpdate, and we ask for no client
//!   certificate). quinn-proto holds out-of-order CRYPTO data up to `h3_crypto_buffer` per
//!   encryption level and drops what it has read already, but handles every frame, and each
//!   one is ack-eliciting (an ACK back). A connection may send [`CRYPTO_FRAMES_MAX`] in its life.
//!
//! Over either budget the connection is closed with H3_EXCESSIVE_LOAD, as for rapid reset.
//! Neither is configurable: no client that follows RFC 9000 comes near them.
//!
//! The reset budget (`codec.rs` `RESET_BUDGET`) is spent here too: by exchanges the client
//! stops (STOP_SENDING) and by those whose request stream it resets (RESET_STREAM) before
//! the request is complete, which drops them.
//!
//! A handshake has the TCP handshake's client turn ([`CLIENT_TURN`], 10 s): by the time
//! quinn-proto accepts a connection its first flight (the ClientHello) is in and our answer
//! is on its way, so what is left is the client's one turn (its Finished). A handshake not
//! done by then is cut; before, it lived `keepalive_timeout` (QUIC's idle timer).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use quinn_proto::ConnectionStats;

use super::codec::H3Codec;
use super::conn::Work;
use crate::metrics_quic::{QuicFlood, QuicMetrics};

/// H3_REQUEST_INCOMPLETE (RFC 9114 §4.1.2): the client's stream ended before its request.
const H3_REQUEST_INCOMPLETE: u64 = 0x10d;

/// ACK frames per datagram received a connection may have sent, on average over its life.
pub const ACKS_PER_DATAGRAM: u64 = 2;

/// ACK frames a connection may send above [`ACKS_PER_DATAGRAM`] (its handshake's datagrams
/// may carry three).
pub const ACK_SLACK: u64 = 64;

/// CRYPTO frames a connection may send in its life (a handshake takes a few, a handful more
/// with retransmissions).
pub const CRYPTO_FRAMES_MAX: u64 = 256;

/// The time a QUIC client has to complete its handshake from the connection's accept: TCP's
/// client turn (`client/handshake_deadline.rs`).
pub const CLIENT_TURN: Duration = crate::worker::client::CLIENT_TURN;

/// Which budget, if any, the frames `stats` counts are over.
pub fn frames_over(stats: &ConnectionStats) -> Option<QuicFlood> {
    let acks_allowed = stats
        .udp_rx
        .datagrams
        .saturating_mul(ACKS_PER_DATAGRAM)
        .saturating_add(ACK_SLACK);
    if stats.frame_rx.acks > acks_allowed {
        return Some(QuicFlood::AckFrames);
    }
    if stats.frame_rx.crypto > CRYPTO_FRAMES_MAX {
        return Some(QuicFlood::CryptoFrames);
    }
    None
}

/// The deadline of a handshake that started at `now`.
pub fn handshake_deadline(now: Instant) -> Instant {
    now + CLIENT_TURN
}

/// Whether a connection with `deadline` (none once its handshake is done) is past it at
/// `now` with its handshake still in progress.
pub fn handshake_overdue(deadline: Option<Instant>, handshaking: bool, now: Instant) -> bool {
    handshaking && deadline.is_some_and(|d| now >= d)
}

/// `stopped` exchanges were stopped or abandoned by the client: they spend its
/// [`RESET_BUDGET`](super::codec::RESET_BUDGET); the connection is closed (H3_EXCESSIVE_LOAD) when it runs out.
pub(super) fn spend_resets(
    h3: &mut H3Codec,
    stopped: u32,
    (work, m): (&mut Vec<Work>, &QuicMetrics),
) {
    if stopped == 0 {
        return;
    }
    h3.resets_left = h3.resets_left.saturating_sub(stopped);
    if h3.resets_left > 0 || h3.quic.is_closed() {
        return;
    }
    let why = "streams stopped faster than they complete";
    excessive_load(h3, (QuicFlood::StreamResets, why), (work, m));
}

/// The connection's ACK and CRYPTO frames so far: the new ones counted
/// (`frames_received_total`), all against their budgets; over one, the connection is closed
/// (H3_EXCESSIVE_LOAD).
pub(super) fn spend_frames(h3: &mut H3Codec, (work, m): (&mut Vec<Work>, &QuicMetrics)) {
    let stats = h3.quic.stats();
    let seen = [stats.frame_rx.acks, stats.frame_rx.crypto];
    for ((total, counted), now) in m.frames.iter().zip(&mut h3.frames_counted).zip(seen) {
        total.fetch_add(now.saturating_sub(*counted), Ordering::Relaxed);
        *counted = now;
    }
    if h3.quic.is_closed() {
        return;
    }
    let Some(kind) = frames_over(&stats) else {
        return;
    };
    let why = match kind {
        QuicFlood::AckFrames => "more ACK frames than packets",
        _ => "more CRYPTO frames than a handshake takes",
    };
    excessive_load(h3, (kind, why), (work, m));
}

/// Closes the connection for flood `kind` (H3_EXCESSIVE_LOAD, `why` as the reason): counted,
/// its exchanges dropped, and what this turn read for new ones left undone.
fn excessive_load(
    h3: &mut H3Codec,
    (kind, why): (QuicFlood, &'static str),
    (work, m): (&mut Vec<Work>, &QuicMetrics),
) {
    m.quic_flood(kind);
    h3.close_excessive(m, ("h3_error", why), Instant::now());
    work.retain(|w| {
        !matches!(
            w,
            Work::Request { .. } | Work::Data { .. } | Work::Trailers { .. }
        )
    });
    work.extend(h3.reset_all().into_iter().map(Work::Drop));
}

/// Request streams the client reset (RESET_STREAM) before their request was complete: the
/// exchange can never have its whole request, so it is dropped, or not made when its head
/// came in this same turn, and the stream is stopped with H3_REQUEST_INCOMPLETE (RFC 9114
/// §4.1.2). Each spends the reset budget as a STOP_SENDING does (returned: how many). A
/// stream whose response was already complete (answered without the rest of its request)
/// goes on.
pub(super) fn reset_requests(h3: &mut H3Codec, work: &mut Vec<Work>) -> u32 {
    let reset: Vec<u64> = (h3.streams.iter())
        .filter(|(_, s)| s.reset)
        .map(|(&id, _)| id)
        .collect();
    let mut abandoned = 0;
    for raw in reset {
        let queued = work
            .iter()
            .position(|w| matches!(w, Work::Request { stream, .. } if u64::from(*stream) == raw));
        let Some(s) = h3.streams.get_mut(&raw) else {
            continue;
        };
        if let Some(at) = queued {
            work.remove(at);
            h3.cancel(raw, H3_REQUEST_INCOMPLETE);
            abandoned += 1;
        } else if s.exchange.is_some() {
            work.extend(h3.cancel(raw, H3_REQUEST_INCOMPLETE).map(Work::Drop));
            abandoned += 1;
        } else if s.out.is_empty() && !s.fin {
            // No request was made of it (its head was not complete): our side is reset too,
            // or QUIC would keep the stream, and the client's credit for it, until the end.
            h3.cancel(raw, H3_REQUEST_INCOMPLETE);
        } else {
            s.reset = false;
        }
    }
    abandoned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(datagrams: u64, acks: u64, crypto: u64) -> ConnectionStats {
        let mut s = ConnectionStats::default();
        s.udp_rx.datagrams = datagrams;
        s.frame_rx.acks = acks;
        s.frame_rx.crypto = crypto;
        s
    }

    #[test]
    fn one_ack_per_datagram_is_within_the_budget_for_any_length_of_life() {
        assert_eq!(frames_over(&stats(1_000_000, 1_000_000, 4)), None);
        assert_eq!(frames_over(&stats(3, 9, 6)), None);
    }

    #[test]
    fn a_datagram_packed_with_ack_frames_is_over() {
        // About 200 of the smallest ACK frames fit in one 1200-byte packet.
        assert_eq!(frames_over(&stats(2, 200, 2)), Some(QuicFlood::AckFrames));
        assert_eq!(
            frames_over(&stats(0, ACK_SLACK + 1, 0)),
            Some(QuicFlood::AckFrames)
        );
    }

    #[test]
    fn crypto_frames_past_a_handshakes_worth_are_over() {
        assert_eq!(frames_over(&stats(10, 0, CRYPTO_FRAMES_MAX)), None);
        let over = stats(10_000, 0, CRYPTO_FRAMES_MAX + 1);
        assert_eq!(frames_over(&over), Some(QuicFlood::CryptoFrames));
    }

    #[test]
    fn a_handshake_is_overdue_only_past_its_deadline_and_while_in_progress() {
        let t0 = Instant::now();
        let deadline = Some(handshake_deadline(t0));
        assert!(!handshake_overdue(
            deadline,
            true,
            t0 + Duration::from_secs(9)
        ));
        assert!(handshake_overdue(deadline, true, t0 + CLIENT_TURN));
        assert!(!handshake_overdue(deadline, false, t0 + CLIENT_TURN));
        assert!(!handshake_overdue(None, true, t0 + CLIENT_TURN));
    }
}
