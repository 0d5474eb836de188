//! Process-wide counters of the record layer's rare events (errors, KeyUpdates), read by the
//! proxy's metrics. Relaxed atomics: each is an independent tally.

use std::sync::atomic::{AtomicU64, Ordering};

use super::error::RecordError;

/// Labels of [`RecordError::label`], in the order of `ERRORS`.
const LABELS: [&str; 8] = [
    "bad_record_mac",
    "record_overflow",
    "unexpected_message",
    "decode_error",
    "illegal_parameter",
    "sequence_exhausted",
    "peer_alert",
    "internal_error",
];

static ERRORS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
static KEY_UPDATES_RECEIVED: AtomicU64 = AtomicU64::new(0);
static KEY_UPDATES_SENT: AtomicU64 = AtomicU64::new(0);

pub(crate) fn count_error(e: &RecordError) {
    let label = e.label();
    if let Some(i) = LABELS.iter().position(|l| *l == label) {
        ERRORS[i].fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn count_key_update(sent: bool) {
    if sent {
        KEY_UPDATES_SENT.fetch_add(1, Ordering::Relaxed);
    } else {
        KEY_UPDATES_RECEIVED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Connections the record layer closed, by reason label.
pub fn errors() -> Vec<(&'static str, u64)> {
    LABELS
        .iter()
        .zip(ERRORS.iter())
        .map(|(label, n)| (*label, n.load(Ordering::Relaxed)))
        .collect()
}

/// KeyUpdates (received from peers, sent by us).
pub fn key_updates() -> (u64, u64) {
    (
        KEY_UPDATES_RECEIVED.load(Ordering::Relaxed),
        KEY_UPDATES_SENT.load(Ordering::Relaxed),
    )
}
