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
//! - **Idle datagrams.** A datagram that carries only PING, ACK, PADDING or other frames that
//!   open, close and deliver nothing (no STREAM, CRYPTO, RESET_STREAM, STOP_SENDING or
//!   CONNECTION_CLOSE frame) moves the connection nowhere, yet costs a datagram's work (a
//!   decryption, an ACK back for a PING): 10 to 15 us each, so one connection sending them
//!   without end could keep a worker busy. A client sends them in proportion to what we send
//!   (it acknowledges our packets, at most one ACK-only datagram each), and a few more as
//!   keep-alive: so each ack-eliciting datagram we send gives back [`IDLE_PER_SENT`], and time
//!   gives back [`IDLE_PER_SECOND`] up to [`IDLE_BURST`] (HTTP/2's PING budget, the `h2`
//!   crate's `max_pings_per_sec`). A datagram whose STREAM frames repeat bytes already
//!   received moves nothing either: STREAM frames count as moving only as far as the stream
//!   bytes the connection read can account for ([`STREAM_BYTES_PER_FRAME`], with
//!   [`STREAM_FRAME_SLACK`] for what quinn-proto holds unread). See [`IdleBudget`].
//!
//! Over any of these budgets the connection is closed with H3_EXCESSIVE_LOAD, as for rapid
//! reset. None is configurable: no client that follows RFC 9000 comes near them.
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

use quinn_proto::{ConnectionStats, FrameStats};

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

/// Idle datagrams a connection may send before anything gives some back, and the most time
/// gives back: a handshake's, a request's and their acknowledgements fit many times over, a
/// flood is cut within a few hundred datagrams (a 3 s PING flood from one aioquic client:
/// 0.04 CPU s of the proxy, 0.7 without the budget; docs/HTTP3.md).
pub const IDLE_BURST: u64 = 256;

/// Idle datagrams time gives back per second (up to [`IDLE_BURST`]): as HTTP/2's 100 PINGs a
/// second. Keep-alive PINGs come every few seconds (Chromium's every 15 s); a connection
/// that sends 100 a second costs a worker about 0.15 % of a core.
pub const IDLE_PER_SECOND: u32 = 100;

/// Idle datagrams each ack-eliciting datagram we send gives back: a client may acknowledge
/// every packet it receives with an ACK-only datagram (RFC 9000 §13.2.2 asks for one every
/// second one), twice that for its keep-alives and probes meanwhile.
pub const IDLE_PER_SENT: u64 = 2;

/// Stream bytes read per STREAM frame counted as moving the connection on. A frame that
/// brings new bytes brings one at least; clients write hundreds per frame (a datagram's
/// worth while they have data). A client of tiny interactive writes is covered by the
/// budget's refills; a flood of frames repeating old bytes reads nothing and is not.
pub const STREAM_BYTES_PER_FRAME: u64 = 16;

/// STREAM frames counted as moving before the bytes they brought are read: what quinn-proto
/// may hold unread (`h3_connection_window`'s default, 2 MiB, at [`STREAM_BYTES_PER_FRAME`]),
/// and the frames that end a stream with no data.
pub const STREAM_FRAME_SLACK: u64 = (2 << 20) / STREAM_BYTES_PER_FRAME + 1024;

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

/// A connection's budget of idle datagrams (the module's comment), kept from the
/// connection's counters (`ConnectionStats`): quinn-proto does not say what each datagram
/// carried, so the idle ones of a turn are the datagrams received beyond the frames that
/// move the connection on (a datagram that is not idle holds one at least), and the
/// ack-eliciting datagrams we sent are our datagrams, at most as many as our frames that
/// elicit an ACK.
pub struct IdleBudget {
    left: u64,
    /// The counts last taken: datagrams received, their frames that moved the connection
    /// on, datagrams sent, our ack-eliciting frames.
    seen: [u64; 4],
    /// Up to when time has given back its share (none before the first turn).
    refilled_to: Option<Instant>,
}

impl Default for IdleBudget {
    fn default() -> IdleBudget {
        IdleBudget {
            left: IDLE_BURST,
            seen: [0; 4],
            refilled_to: None,
        }
    }
}

impl IdleBudget {
    /// The connection's counts at `now` (and the stream bytes it read, `stream_bytes`):
    /// what was sent and the time passed give back, the idle datagrams received since the
    /// last call spend. False once they spent more than was left.
    pub fn spend(&mut self, stats: &ConnectionStats, stream_bytes: u64, now: Instant) -> bool {
        let read_for = stream_bytes / STREAM_BYTES_PER_FRAME + STREAM_FRAME_SLACK;
        let counts = [
            stats.udp_rx.datagrams,
            moving_frames(&stats.frame_rx) + stats.frame_rx.stream.min(read_for),
            stats.udp_tx.datagrams,
            eliciting_frames(&stats.frame_tx),
        ];
        let mut new = [0; 4];
        for ((n, seen), now) in new.iter_mut().zip(&mut self.seen).zip(counts) {
            *n = now.saturating_sub(*seen);
            *seen = now;
        }
        let [received, moving, sent, eliciting] = new;
        let given = sent.min(eliciting).saturating_mul(IDLE_PER_SENT);
        self.left = self.left.saturating_add(given);
        self.refill(now);
        let idle = received.saturating_sub(moving);
        let within = idle <= self.left;
        self.left = self.left.saturating_sub(idle);
        within
    }

    /// Time's share, one datagram per 1/[`IDLE_PER_SECOND`] s passed, up to [`IDLE_BURST`]:
    /// time kept at the cap gives nothing later (no banking while idle). What is short of a
    /// whole datagram waits for the next call.
    fn refill(&mut self, now: Instant) {
        let from = *self.refilled_to.get_or_insert(now);
        if self.left >= IDLE_BURST {
            self.refilled_to = Some(now);
            return;
        }
        let period = std::time::Duration::from_secs(1) / IDLE_PER_SECOND;
        let periods = now.saturating_duration_since(from).as_nanos() / period.as_nanos();
        let periods = u32::try_from(periods).unwrap_or(u32::MAX);
        self.left = (self.left + u64::from(periods)).min(IDLE_BURST);
        self.refilled_to = Some(match self.left >= IDLE_BURST {
            true => now,
            false => from + period * periods,
        });
    }
}

/// Frames received that move a connection on, STREAM frames aside (`IdleBudget::spend`
/// counts those by the bytes read): the handshake, a stream's or the connection's end. The
/// CRYPTO and reset frames have budgets of their own.
fn moving_frames(f: &FrameStats) -> u64 {
    let ends = f.reset_stream + f.stop_sending + f.connection_close;
    f.crypto + ends
}

/// Frames we sent that elicit an ACK (all but ACK, PADDING, CONNECTION_CLOSE): a
/// PATH_RESPONSE is not counted, since the client's PATH_CHALLENGE asked for it.
fn eliciting_frames(f: &FrameStats) -> u64 {
    let flow = f.max_data + f.max_stream_data + f.max_streams_bidi + f.max_streams_uni;
    let blocked = f.data_blocked + f.stream_data_blocked;
    let blocked = blocked + f.streams_blocked_bidi + f.streams_blocked_uni;
    let ids = f.new_connection_id + f.retire_connection_id + f.new_token;
    let streams = f.stream + f.reset_stream + f.stop_sending;
    let other = f.crypto + f.ping + f.path_challenge + u64::from(f.handshake_done);
    flow + blocked + ids + streams + other + f.datagram + f.ack_frequency + f.immediate_ack
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
/// (`frames_received_total`), all against their budgets, and its idle datagrams since the
/// last turn against theirs at `now`; over one, the connection is closed
/// (H3_EXCESSIVE_LOAD).
pub(super) fn spend_frames(
    h3: &mut H3Codec,
    now: Instant,
    (work, m): (&mut Vec<Work>, &QuicMetrics),
) {
    let stats = h3.quic.stats();
    let seen = [stats.frame_rx.acks, stats.frame_rx.crypto];
    for ((total, counted), now) in m.frames.iter().zip(&mut h3.frames_counted).zip(seen) {
        total.fetch_add(now.saturating_sub(*counted), Ordering::Relaxed);
        *counted = now;
    }
    if h3.quic.is_closed() {
        return;
    }
    let idle_within = h3.idle.spend(&stats, h3.stream_bytes_read, now);
    let kind = match frames_over(&stats) {
        Some(kind) => kind,
        None if !idle_within => QuicFlood::IdleDatagrams,
        None => return,
    };
    let why = match kind {
        QuicFlood::AckFrames => "more ACK frames than packets",
        QuicFlood::IdleDatagrams => "more idle datagrams than the connection's work allows",
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

    /// A connection's counts: `rx` datagrams received, `moving` of them with a STREAM frame,
    /// `tx` datagrams sent, each with a STREAM frame.
    fn traffic(rx: u64, moving: u64, tx: u64) -> ConnectionStats {
        let mut s = ConnectionStats::default();
        s.udp_rx.datagrams = rx;
        s.frame_rx.stream = moving;
        s.frame_rx.acks = rx;
        s.udp_tx.datagrams = tx;
        s.frame_tx.stream = tx;
        s
    }

    /// `budget` at `at`, each STREAM frame of `s` having brought a datagram's bytes.
    fn spend(budget: &mut IdleBudget, s: &ConnectionStats, at: Instant) -> bool {
        budget.spend(s, s.frame_rx.stream * 1200, at)
    }

    #[test]
    fn keep_alive_pings_for_an_hour_are_within_the_budget() {
        let (mut budget, t0) = (IdleBudget::default(), Instant::now());
        // One PING every 20 ms (50 a second, far more than any keep-alive), a turn each.
        for i in 0..180_000u32 {
            let at = t0 + Duration::from_millis(20) * i;
            assert!(
                spend(&mut budget, &traffic(u64::from(i), 0, 0), at),
                "PING {i}"
            );
        }
    }

    #[test]
    fn a_ping_flood_is_over_past_the_burst_and_times_share() {
        let (mut budget, t0) = (IdleBudget::default(), Instant::now());
        assert!(spend(&mut budget, &traffic(IDLE_BURST, 0, 0), t0));
        // 10 ms give one back: the next 2 datagrams are one too many.
        let later = t0 + Duration::from_millis(10);
        assert!(!spend(&mut budget, &traffic(IDLE_BURST + 2, 0, 0), later));
    }

    #[test]
    fn time_spent_idle_is_not_banked_past_the_burst() {
        let (mut budget, t0) = (IdleBudget::default(), Instant::now());
        assert!(spend(&mut budget, &traffic(0, 0, 0), t0));
        let hour = t0 + Duration::from_secs(3600);
        assert!(!spend(&mut budget, &traffic(IDLE_BURST + 1, 0, 0), hour));
    }

    #[test]
    fn a_download_acknowledged_packet_by_packet_is_within_the_budget() {
        let (mut budget, t0) = (IdleBudget::default(), Instant::now());
        // 102 400 datagrams sent in 256-datagram rounds, each acknowledged by one ACK-only
        // datagram in the next turn, no time passing.
        for round in 1..=400u64 {
            assert!(spend(
                &mut budget,
                &traffic((round - 1) * 256, 0, round * 256),
                t0
            ));
        }
        assert!(spend(&mut budget, &traffic(400 * 256, 0, 400 * 256), t0));
        // Datagrams of ours that elicit no ACK (ACK-only) give nothing back.
        let mut acks_only = traffic(IDLE_BURST + 1, 0, 1000);
        acks_only.frame_tx.stream = 0;
        acks_only.frame_tx.acks = 1000;
        assert!(!spend(&mut IdleBudget::default(), &acks_only, t0));
    }

    #[test]
    fn an_upload_spends_nothing() {
        let (mut budget, t0) = (IdleBudget::default(), Instant::now());
        assert!(spend(&mut budget, &traffic(1_000_000, 1_000_000, 0), t0));
        assert_eq!(budget.left, IDLE_BURST);
    }

    #[test]
    fn stream_frames_that_bring_nothing_new_are_idle_past_the_slack() {
        let (mut budget, t0) = (IdleBudget::default(), Instant::now());
        // A request's 300 bytes read, then datagrams of STREAM frames repeating them.
        let mut dup = traffic(0, 0, 0);
        for datagrams in 1..=STREAM_FRAME_SLACK {
            dup.udp_rx.datagrams = datagrams;
            dup.frame_rx.stream = datagrams;
            assert!(budget.spend(&dup, 300, t0), "{datagrams}");
        }
        dup.udp_rx.datagrams += IDLE_BURST + 100;
        dup.frame_rx.stream += IDLE_BURST + 100;
        assert!(!budget.spend(&dup, 300, t0));
        // The same frames with their bytes read are an upload.
        let mut upload = IdleBudget::default();
        assert!(upload.spend(&dup, dup.frame_rx.stream * STREAM_BYTES_PER_FRAME, t0));
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
