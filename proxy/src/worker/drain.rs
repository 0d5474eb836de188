//! A graceful stop's bounds: how long it waits for in-flight requests, and its last call.

use std::time::{Duration, Instant};

/// How long a graceful stop waits for in-flight requests.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A graceful stop's last call: for this long an idle HTTP/1 keep-alive connection stays
/// open, and a request it brings is answered with `Connection: close`. Closing it at once
/// would lose a request the client sent just before the close reached it (it cannot tell
/// that request was never read, and nothing says it may be retried unless idempotent); the
/// clients of a busy connection send their next request well within this.
pub(super) const DRAIN_LAST_CALL: Duration = Duration::from_millis(500);

/// The longest a draining worker sleeps, so that the last call ends on time.
pub(super) const DRAIN_POLL: Duration = Duration::from_millis(50);

/// Whether the last call of a graceful stop draining since `draining` is over: idle HTTP/1
/// connections close.
pub(super) fn last_call_over(draining: Option<Instant>) -> bool {
    draining.is_some_and(|since| since.elapsed() >= DRAIN_LAST_CALL)
}
