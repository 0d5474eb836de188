//! Whether a head the writers produced fits the limits a parser applies.
//!
//! The proxy adds fields when it forwards (X-Forwarded-For, Via,
//! configured edits) and merges others, so a head received at the limits
//! can leave above them: 99 fields plus Via and X-Forwarded-For is 101
//! fields, and the next hop, if it enforces the same limits, refuses it
//! (an upstream answers 400/431 to a request the proxy accepted; a client
//! drops a response the proxy relayed). The writers therefore check their
//! own output against the limits the proxy parses with and refuse to
//! forward a head that does not fit: the proxy never sends what it would
//! refuse itself. The caller answers 431 to a client whose request would
//! not fit, and 502 for an upstream response that would not.

use std::fmt;

use crate::limits::Limits;

/// A written head that a parser with the same limits would refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OversizedHead {
    /// More header fields than `Limits::max_headers`.
    TooManyFields { fields: usize, limit: usize },
    /// A field line (`name: value`) longer than `Limits::max_field_bytes`;
    /// typically X-Forwarded-For or Via after merging earlier values.
    FieldTooLong { bytes: usize, limit: usize },
    /// The whole head larger than `Limits::max_head_bytes`.
    HeadTooLarge { bytes: usize, limit: usize },
}

impl OversizedHead {
    /// The status to answer a client with when its *request* would not
    /// fit (a response that would not fit is answered with 502).
    pub fn request_status(&self) -> u16 {
        431
    }
}

impl fmt::Display for OversizedHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OversizedHead::TooManyFields { fields, limit } => write!(
                f,
                "the forwarded head would have {fields} header fields, over the limit of \
                 {limit} (the proxy adds X-Forwarded-For, Via and configured header edits); \
                 raise http_header_cnt or send fewer fields"
            ),
            OversizedHead::FieldTooLong { bytes, limit } => write!(
                f,
                "a forwarded header field would be {bytes} bytes, over the limit of {limit} \
                 (X-Forwarded-For and Via merge earlier values into one field); raise \
                 http_hdr_len or send shorter fields"
            ),
            OversizedHead::HeadTooLarge { bytes, limit } => write!(
                f,
                "the forwarded head would be {bytes} bytes, over the limit of {limit} \
                 (the proxy adds X-Forwarded-For, Via and configured header edits); send \
                 a smaller head"
            ),
        }
    }
}

impl std::error::Error for OversizedHead {}

/// Checks a complete head written by this crate (start line, fields each
/// ended by CRLF, blank line) against `limits`. The measures are those of
/// the parsers or larger (a written line is never shorter than the span a
/// parser measures), so a head that passes here always parses.
///
/// `fields_at_most` is an upper bound on the fields written (received
/// fields plus what the writer may add). When it and the head's length are
/// within the limits the head cannot exceed them, and the bytes are not
/// scanned: that is every ordinary head, so forwarding stays one copy.
pub(crate) fn check_written_head(
    head: &[u8],
    limits: &Limits,
    fields_at_most: usize,
) -> Result<(), OversizedHead> {
    if head.len() > limits.max_head_bytes {
        return Err(OversizedHead::HeadTooLarge {
            bytes: head.len(),
            limit: limits.max_head_bytes,
        });
    }
    if fields_at_most <= limits.max_headers && head.len() <= limits.max_field_bytes {
        return Ok(());
    }
    let mut lines = 0usize;
    let mut longest_field = 0usize;
    let mut line_start = 0usize;
    for (at, _) in head.iter().enumerate().filter(|(_, &b)| b == b'\n') {
        // Lines end in CRLF: the line's bytes are [line_start, at - 1).
        let line_len = at.saturating_sub(line_start + 1);
        // The first line is the start line, whose limits are checked when
        // the request is parsed; the last is the blank line.
        if lines > 0 {
            longest_field = longest_field.max(line_len);
        }
        lines += 1;
        line_start = at + 1;
    }
    let fields = lines.saturating_sub(2);
    if fields > limits.max_headers {
        return Err(OversizedHead::TooManyFields {
            fields,
            limit: limits.max_headers,
        });
    }
    if longest_field > limits.max_field_bytes {
        return Err(OversizedHead::FieldTooLong {
            bytes: longest_field,
            limit: limits.max_field_bytes,
        });
    }
    Ok(())
}

/// Checks a head's measures (as [`crate::HeadMeasure`] counts them for its HTTP/1.1 text)
/// against `limits`: the same verdict, in the same order, as [`check_written_head`] gives
/// for the written text.
pub(crate) fn check_measured_head(
    measure: &crate::sink::HeadMeasure,
    limits: &Limits,
) -> Result<(), OversizedHead> {
    if measure.bytes > limits.max_head_bytes {
        return Err(OversizedHead::HeadTooLarge {
            bytes: measure.bytes,
            limit: limits.max_head_bytes,
        });
    }
    if measure.fields > limits.max_headers {
        return Err(OversizedHead::TooManyFields {
            fields: measure.fields,
            limit: limits.max_headers,
        });
    }
    if measure.longest_field > limits.max_field_bytes {
        return Err(OversizedHead::FieldTooLong {
            bytes: measure.longest_field,
            limit: limits.max_field_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_headers: usize, max_field_bytes: usize, max_head_bytes: usize) -> Limits {
        Limits {
            max_headers,
            max_field_bytes,
            max_head_bytes,
            ..Limits::default()
        }
    }

    /// Without the shortcut, so that the scan itself is tested.
    fn check_written_head_scanned(head: &[u8], limits: &Limits) -> Result<(), OversizedHead> {
        check_written_head(head, limits, usize::MAX)
    }

    #[test]
    fn the_shortcut_needs_both_bounds_within_the_limits() {
        let head = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n";
        // A loose bound still finds the real count by scanning.
        assert_eq!(check_written_head(head, &limits(2, 100, 100), 50), Ok(()));
        assert!(check_written_head(head, &limits(1, 100, 100), 50).is_err());
        // A head longer than a field may be could hold a long field: scanned.
        assert!(check_written_head(
            b"GET / HTTP/1.1\r\nA: 123456\r\n\r\n",
            &limits(9, 8, 100),
            1
        )
        .is_err());
    }

    #[test]
    fn counts_fields_between_start_line_and_blank_line() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\nVia: 1.1 p\r\n\r\n";
        assert_eq!(
            check_written_head_scanned(head, &limits(2, 100, 100)),
            Ok(())
        );
        assert_eq!(
            check_written_head_scanned(head, &limits(1, 100, 100)),
            Err(OversizedHead::TooManyFields {
                fields: 2,
                limit: 1
            })
        );
    }

    #[test]
    fn measures_field_lines_without_crlf_and_head_with_it() {
        let head = b"GET / HTTP/1.1\r\nHost: abc\r\n\r\n";
        assert_eq!(
            check_written_head_scanned(head, &limits(10, 9, head.len())),
            Ok(())
        );
        assert_eq!(
            check_written_head_scanned(head, &limits(10, 8, 100)),
            Err(OversizedHead::FieldTooLong { bytes: 9, limit: 8 })
        );
        assert_eq!(
            check_written_head_scanned(head, &limits(10, 100, head.len() - 1)),
            Err(OversizedHead::HeadTooLarge {
                bytes: head.len(),
                limit: head.len() - 1
            })
        );
    }

    #[test]
    fn forwarding_limits_are_the_defaults_or_larger() {
        let defaults = Limits::default();
        let small = limits(5, 30, 1000).for_forwarding();
        assert_eq!(small.max_headers, defaults.max_headers);
        assert_eq!(small.max_field_bytes, defaults.max_field_bytes);
        assert_eq!(small.max_head_bytes, defaults.max_head_bytes);
        let large = limits(300, 20_000, 64 * 1024).for_forwarding();
        assert_eq!(
            (
                large.max_headers,
                large.max_field_bytes,
                large.max_head_bytes
            ),
            (300, 20_000, 64 * 1024)
        );
    }

    #[test]
    fn the_start_line_is_not_a_field() {
        let head = b"GET /a-long-target-longer-than-the-field-limit HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(
            check_written_head_scanned(head, &limits(1, 7, 1000)),
            Ok(())
        );
    }
}
