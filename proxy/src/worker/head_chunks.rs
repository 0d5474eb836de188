//! frang's head-chunk count (`http_header_chunk_cnt`, `client_header_timeout`) for an
//! HTTP/2 connection, whose reads carry frames of several heads: per head, as on HTTP/1.1.

use std::time::Instant;

/// Counts the pieces of heads one read pass carried (`http_header_chunk_cnt`,
/// `client_header_timeout`), as an HTTP/1.1 read is counted: a head spread over several
/// reads counts one chunk per read that carried part of it, and a head whole in one read
/// none. A pass may finish one head (`completed`: it produced a request or trailers) and
/// begin the next (`head_after`): the finished head's count ends with it, and the new one
/// starts its own, so counts never run on from one head into the next.
pub(super) fn head_chunks(
    limits: &mut crate::frang::ConnLimits,
    now: Instant,
    head_before: bool,
    completed: bool,
    head_after: bool,
) -> Result<(), crate::frang::Violation> {
    let mut verdict = Ok(());
    if head_before {
        verdict = limits.on_head_chunk(now);
    }
    if completed || !head_after {
        limits.head_complete();
    }
    if head_after && (completed || !head_before) && verdict.is_ok() {
        verdict = limits.on_head_chunk(now);
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(chunks: u32) -> crate::frang::ConnLimits {
        let global = config::FrangGlobal {
            http_header_chunk_cnt: Some(chunks),
            ..Default::default()
        };
        crate::frang::ConnLimits::new(&global)
    }

    /// Back-to-back HEADERS cut by the reads mid-frame: each pass finishes one head and
    /// begins the next. Every head is in two pieces, so a limit of 3 never trips, however
    /// many heads follow (before, the count ran on across heads: blocked at the fourth read).
    #[test]
    fn head_chunks_start_again_with_each_head() {
        let mut l = limits(3);
        let now = Instant::now();
        assert!(head_chunks(&mut l, now, false, false, true).is_ok());
        for _ in 0..20 {
            assert!(head_chunks(&mut l, now, true, true, true).is_ok());
        }
        assert!(head_chunks(&mut l, now, true, true, false).is_ok());
    }

    /// One head in four reads is four chunks: over a limit of 3.
    #[test]
    fn a_head_in_more_reads_than_the_limit_is_refused() {
        let mut l = limits(3);
        let now = Instant::now();
        assert!(head_chunks(&mut l, now, false, false, true).is_ok());
        assert!(head_chunks(&mut l, now, true, false, true).is_ok());
        assert!(head_chunks(&mut l, now, true, false, true).is_ok());
        assert!(head_chunks(&mut l, now, true, true, false).is_err());
        // A head whole in one read counts nothing.
        let mut l = limits(1);
        for _ in 0..10 {
            assert!(head_chunks(&mut l, now, false, true, false).is_ok());
        }
    }
}
