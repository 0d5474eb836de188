//! The strictness httparse lacks, shared by both roles.
//!
//! httparse accepts a bare LF as a line terminator (RFC 9112 §2.2 lets a
//! server do so). This proxy refuses it: an upstream or a cache that
//! splits lines differently would see a different message. The check on a
//! successfully parsed head costs O(number of fields), not O(bytes): every
//! line break of a head httparse accepted is either one of the empty lines
//! it skips before the start line, the break just before a field name, or
//! one of the two at the very end.
//!
//! When httparse refuses a head, [`diagnose`] rescans it to name the
//! precise reason (bare CR, obs-fold, whitespace before a colon...) so
//! that logs and counters are useful; that scan only runs on bad input.

use crate::byteset::TCHAR;
use crate::error::ParseError;
use crate::span::HeaderSpans;

/// Which side sent the message; only used to pick error variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Request,
    Response,
}

/// Refuses any line break of a complete head that is not CRLF.
///
/// `start_line` is where the request or status line begins (after skipped
/// empty lines), `head_len` where the head ends.
pub(crate) fn check_line_breaks(
    buf: &[u8],
    start_line: usize,
    fields: &HeaderSpans,
    head_len: usize,
) -> Result<(), ParseError> {
    let leading = buf.get(..start_line).ok_or(ParseError::BareLf)?;
    if leading.chunks(2).any(|pair| pair != b"\r\n") {
        return Err(ParseError::BareLf);
    }
    for field in fields.iter() {
        let name_start = field.name.start();
        let before = name_start
            .checked_sub(2)
            .and_then(|from| buf.get(from..name_start));
        if before != Some(b"\r\n") {
            return Err(ParseError::BareLf);
        }
    }
    let tail = head_len
        .checked_sub(4)
        .and_then(|from| buf.get(from..head_len));
    if tail != Some(b"\r\n\r\n") {
        return Err(ParseError::BareLf);
    }
    Ok(())
}

/// Names the reason httparse refused a head.
pub(crate) fn diagnose(buf: &[u8], error: httparse::Error, role: Role) -> ParseError {
    if let Some(found) = scan_lines(buf) {
        return found;
    }
    match error {
        httparse::Error::HeaderName => ParseError::InvalidHeaderName,
        httparse::Error::HeaderValue => ParseError::InvalidHeaderValue,
        httparse::Error::TooManyHeaders => ParseError::TooManyHeaders,
        httparse::Error::Version => ParseError::InvalidVersion,
        httparse::Error::Status => ParseError::InvalidStatusLine,
        httparse::Error::NewLine | httparse::Error::Token => match role {
            Role::Request => ParseError::InvalidRequestLine,
            Role::Response => ParseError::InvalidStatusLine,
        },
    }
}

/// Walks the lines of a (possibly partial) head and reports the first
/// line-level defect: bare CR, bare LF, obs-fold, whitespace before colon.
fn scan_lines(buf: &[u8]) -> Option<ParseError> {
    let mut seen_start_line = false;
    let mut rest = buf;
    while !rest.is_empty() {
        let (line, terminated) = match rest.iter().position(|&b| b == b'\n') {
            Some(lf) => (rest.get(..lf).unwrap_or(&[]), true),
            None => (rest, false),
        };
        rest = rest.get(line.len() + 1..).unwrap_or(&[]);
        let content = match line.split_last() {
            Some((b'\r', content)) => content,
            _ if terminated => return Some(ParseError::BareLf),
            _ => line,
        };
        if content.contains(&b'\r') {
            return Some(ParseError::BareCr);
        }
        if content.is_empty() {
            if seen_start_line && terminated {
                // The blank line that ends the head: nothing after it is ours.
                return None;
            }
            continue;
        }
        if !seen_start_line {
            seen_start_line = true;
            continue;
        }
        if matches!(content.first(), Some(b' ' | b'\t')) {
            return Some(ParseError::ObsFold);
        }
        // `name<SP>:` — or, on the last and still incomplete line,
        // `name<SP>` with the colon not yet received.
        let name_len = content
            .iter()
            .position(|&b| !TCHAR.contains(b))
            .unwrap_or(content.len());
        let after_name = content.get(name_len..).unwrap_or(&[]);
        let after_blanks = after_name.trim_ascii_start();
        let blanks = after_name.len() - after_blanks.len();
        if name_len > 0
            && blanks > 0
            && (after_blanks.first() == Some(&b':') || (!terminated && after_blanks.is_empty()))
        {
            return Some(ParseError::WhitespaceBeforeColon);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_names_line_defects() {
        let cases: [(&[u8], Option<ParseError>); 6] = [
            (b"GET / HTTP/1.1\r\nA: b\r\n\r\n", None),
            (b"GET / HTTP/1.1\nA: b\r\n\r\n", Some(ParseError::BareLf)),
            (
                b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",
                Some(ParseError::BareCr),
            ),
            (
                b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
                Some(ParseError::ObsFold),
            ),
            (
                b"GET / HTTP/1.1\r\nA : b\r\n\r\n",
                Some(ParseError::WhitespaceBeforeColon),
            ),
            (b"\r\nGET / HTTP/1.1\r\nA: b\r\n\r\n\n", None),
        ];
        for (input, expected) in cases {
            assert_eq!(
                scan_lines(input),
                expected,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }
}
