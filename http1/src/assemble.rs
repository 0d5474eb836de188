//! Request heads another codec decoded (an HTTP/2 header block): method, target and fields
//! laid end to end in one buffer, each checked as it comes with the byte classes the
//! HTTP/1.1 parser applies to the same piece of a request line or field line, and the whole
//! then judged by the parser's own checks (limits, target, host, framing). No HTTP/1 text is
//! written: a request gets one verdict whatever protocol carried it, without a render and a
//! reparse.

use crate::byteset::{ByteSet, FIELD_VALUE, TCHAR};
use crate::error::ParseError;
use crate::fields::FieldLayout;
use crate::limits::Limits;
use crate::message::Version;
use crate::request::{complete, Parts, RequestHead};
use crate::span::{FieldSpan, HeaderSpans, Span};

/// Bytes of a request target on the request line: any visible byte and obs-text (a space
/// would end the target, a control is refused), obs-text only as UTF-8, as the HTTP/1.1
/// parser (httparse) takes a target. The target's own rules come after.
const TARGET: ByteSet = ByteSet::new().with_range(0x21, 0x7e).with_range(0x80, 0xff);

/// What the request line adds to the head's size besides method and target: the spaces,
/// the version and its line end, and the empty line ending the head.
const REQUEST_LINE_EXTRA: usize = " ".len() + " HTTP/1.1\r\n".len() + "\r\n".len();

/// What a field line adds besides name and value: `": "` and the line end.
const FIELD_LINE_EXTRA: usize = ": ".len() + "\r\n".len();

/// The `Transfer-Encoding: chunked` line a body without a length is sent upstream with.
const CHUNKED_LINE: usize = "transfer-encoding: chunked\r\n".len();

/// An HTTP/1.1-equivalent request head assembled from decoded pieces: [`RequestBuilder::new`]
/// with the method and target, [`RequestBuilder::field`] for each field in order, then
/// [`RequestBuilder::finish`].
pub struct RequestBuilder {
    buf: Vec<u8>,
    method: Span,
    target: Span,
    fields: HeaderSpans,
    /// The head's size as HTTP/1.1 text, what `max_head_bytes` bounds on either protocol.
    wire_len: usize,
}

impl RequestBuilder {
    /// Starts a head with its method and target (origin form or `*`); `capacity` is a hint
    /// for the buffer (method, target and every name and value end to end).
    #[inline]
    pub fn new(
        method: &[u8],
        target: &[u8],
        capacity: usize,
    ) -> Result<RequestBuilder, ParseError> {
        if method.is_empty() || !TCHAR.contains_all(method) {
            return Err(ParseError::InvalidRequestLine);
        }
        if target.is_empty() || !TARGET.contains_all(target) || std::str::from_utf8(target).is_err()
        {
            return Err(ParseError::InvalidRequestLine);
        }
        let mut builder = RequestBuilder {
            buf: Vec::with_capacity(capacity.max(method.len() + target.len())),
            method: Span::EMPTY,
            target: Span::EMPTY,
            fields: HeaderSpans::default(),
            wire_len: method.len() + target.len() + REQUEST_LINE_EXTRA,
        };
        builder.method = builder.append(method)?;
        builder.target = builder.append(target)?;
        Ok(builder)
    }

    /// Adds a field: a token name, a value of field-value bytes (no CR, LF, NUL or other
    /// control but HTAB).
    #[inline]
    pub fn field(&mut self, name: &[u8], value: &[u8]) -> Result<(), ParseError> {
        if name.is_empty() || !TCHAR.contains_all(name) {
            return Err(ParseError::InvalidHeaderName);
        }
        if !FIELD_VALUE.contains_all(value) {
            return Err(ParseError::InvalidHeaderValue);
        }
        let name = self.append(name)?;
        let value = self.append(value)?;
        self.fields.push(FieldSpan { name, value });
        self.wire_len += name.len() + value.len() + FIELD_LINE_EXTRA;
        Ok(())
    }

    /// Judges the head as the HTTP/1.1 parser judges a complete one (`unframed_body`: a body
    /// follows without a Content-Length, chunked upstream). Returns the head, its spans over
    /// the returned buffer, as an HTTP/1.1 request.
    #[inline]
    pub fn finish(
        self,
        unframed_body: bool,
        limits: &Limits,
    ) -> Result<(RequestHead, Vec<u8>), ParseError> {
        let wire_len = self.wire_len + if unframed_body { CHUNKED_LINE } else { 0 };
        if wire_len > limits.max_head_bytes {
            return Err(ParseError::HeadTooLarge);
        }
        // The parser refuses a head past its field table; a caller may count more strictly
        // (HTTP/2 counts the client's list before cookie crumbs are joined).
        if self.fields.len() > limits.max_headers {
            return Err(ParseError::TooManyHeaders);
        }
        let parts = Parts {
            method: self.method,
            target: self.target,
            version: Version::Http11,
            fields: &self.fields,
            head_len: self.buf.len(),
            layout: FieldLayout::Pairs,
            unframed_body,
        };
        let judged = complete(&self.buf, &parts, limits)?;
        let head = judged.into_head(self.fields);
        Ok((head, self.buf))
    }

    /// Appends `bytes` to the buffer and returns where they are.
    #[inline]
    fn append(&mut self, bytes: &[u8]) -> Result<Span, ParseError> {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        Span::at(start, bytes.len()).ok_or(ParseError::HeadTooLarge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BodyFraming;

    type Pair<'a> = (&'a [u8], &'a [u8]);

    fn build(
        method: &[u8],
        target: &[u8],
        fields: &[Pair<'_>],
        unframed_body: bool,
    ) -> Result<(RequestHead, Vec<u8>), ParseError> {
        let mut b = RequestBuilder::new(method, target, 64)?;
        for (name, value) in fields {
            b.field(name, value)?;
        }
        b.finish(unframed_body, &Limits::default())
    }

    #[test]
    fn a_built_head_reads_as_a_parsed_one() {
        let fields: [Pair<'_>; 3] = [
            (b"host", b"a.example"),
            (b"content-length", b"5"),
            (b"x-http-method-override", b"PUT"),
        ];
        let (head, buf) = build(b"POST", b"/up?x", &fields, true).unwrap();
        assert_eq!(head.method_bytes(&buf), b"POST");
        assert_eq!(head.path(&buf), b"/up?x");
        assert_eq!(head.host(&buf), Some(&b"a.example"[..]));
        assert_eq!(head.framing(), BodyFraming::Length(5));
        assert_eq!(head.method_override(&buf), Some(&b"PUT"[..]));
        assert_eq!(head.headers().len(), 3);
        assert_eq!(head.head_len(), buf.len());
    }

    #[test]
    fn a_body_without_a_length_is_chunked() {
        let (head, _) = build(b"PUT", b"/", &[(b"host", b"a")], true).unwrap();
        assert_eq!(head.framing(), BodyFraming::Chunked);
        let (head, _) = build(b"GET", b"/", &[(b"host", b"a")], false).unwrap();
        assert_eq!(head.framing(), BodyFraming::None);
    }

    #[test]
    fn each_piece_is_checked_as_the_parser_checks_it() {
        let host: Pair<'_> = (b"host", b"a");
        let cases: [(&[u8], &[u8], Pair<'_>, ParseError); 7] = [
            (b"G T", b"/", host, ParseError::InvalidRequestLine),
            (b"GET", b"/a b", host, ParseError::InvalidRequestLine),
            (b"GET", b"/", (b"a b", b"v"), ParseError::InvalidHeaderName),
            (
                b"GET",
                b"/",
                (b"x", b"a\r\nb: c"),
                ParseError::InvalidHeaderValue,
            ),
            (b"GET", b"/", (b"x", b"a\0"), ParseError::InvalidHeaderValue),
            (b"GET", b"/#f", host, ParseError::InvalidTarget),
            (b"GET", b"/\x80", host, ParseError::InvalidRequestLine),
        ];
        for (method, target, field, want) in cases {
            let got = build(method, target, &[host, field], false).err();
            assert_eq!(got, Some(want), "{method:?} {target:?} {field:?}");
        }
    }

    #[test]
    fn more_fields_than_the_parser_takes_are_refused() {
        let limits = Limits {
            max_headers: 2,
            ..Limits::default()
        };
        let mut b = RequestBuilder::new(b"GET", b"/", 0).unwrap();
        for _ in 0..3 {
            b.field(b"x", b"v").unwrap();
        }
        assert_eq!(
            b.finish(false, &limits).err(),
            Some(ParseError::TooManyHeaders)
        );
    }

    #[test]
    fn the_head_size_counts_as_http1_text() {
        let limits = Limits {
            max_head_bytes: "GET / HTTP/1.1\r\nhost: a\r\n\r\n".len(),
            ..Limits::default()
        };
        let mut b = RequestBuilder::new(b"GET", b"/", 0).unwrap();
        b.field(b"host", b"a").unwrap();
        assert!(b.finish(false, &limits).is_ok());
        let mut b = RequestBuilder::new(b"GET", b"/", 0).unwrap();
        b.field(b"host", b"ab").unwrap();
        assert_eq!(
            b.finish(false, &limits).err(),
            Some(ParseError::HeadTooLarge)
        );
    }
}
