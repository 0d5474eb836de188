//! Response heads another codec decoded (an HTTP/2 origin's HEADERS): status and fields laid
//! end to end in one buffer, each field checked with the byte classes the HTTP/1.1 parser
//! applies, the whole judged by the parser's own field checks and limits. The relay then
//! reads it as it reads a parsed head, without HTTP/1 text written and parsed again.
//!
//! The framing is the other codec's: its body ends with the stream, so a response without
//! a Content-Length is announced [`BodyFraming::Chunked`] (what a forwarder relaying it to an
//! HTTP/1.1 client writes), never close-delimited.

use crate::byteset::{FIELD_VALUE, TCHAR};
use crate::error::ParseError;
use crate::fields::{self, FieldLayout};
use crate::limits::Limits;
use crate::message::{BodyFraming, Version};
use crate::response::ResponseHead;
use crate::span::{FieldSpan, HeaderSpans, Span};

/// What the status line and the empty line add to the head's size as HTTP/1.1 text:
/// `HTTP/1.1 NNN ` and its line end, then the empty line.
const STATUS_LINE_EXTRA: usize = "HTTP/1.1 200 ".len() + "\r\n".len() + "\r\n".len();

/// What a field line adds besides name and value: `": "` and the line end.
const FIELD_LINE_EXTRA: usize = ": ".len() + "\r\n".len();

/// An HTTP/1.1-equivalent response head assembled from decoded pieces:
/// [`ResponseBuilder::new`] with the status, [`ResponseBuilder::field`] for each field in
/// order, then [`ResponseBuilder::finish`].
pub struct ResponseBuilder {
    buf: Vec<u8>,
    status: u16,
    fields: HeaderSpans,
    /// The head's size as HTTP/1.1 text (no reason phrase: the standard one is written).
    wire_len: usize,
}

impl ResponseBuilder {
    /// Starts a head with its status (100..=599); `capacity` is a hint for the buffer.
    pub fn new(status: u16, capacity: usize) -> Result<ResponseBuilder, ParseError> {
        if !(100..=599).contains(&status) {
            return Err(ParseError::InvalidStatusLine);
        }
        Ok(ResponseBuilder {
            buf: Vec::with_capacity(capacity),
            status,
            fields: HeaderSpans::default(),
            wire_len: STATUS_LINE_EXTRA,
        })
    }

    /// Adds a field: a token name, a value of field-value bytes.
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

    /// Judges the head as the HTTP/1.1 parser judges a complete one (`request_is_head`: no
    /// body follows whatever the fields say). Returns the head, its spans over the returned
    /// buffer.
    pub fn finish(
        self,
        limits: &Limits,
        request_is_head: bool,
    ) -> Result<(ResponseHead, Vec<u8>), ParseError> {
        if self.wire_len > limits.max_head_bytes {
            return Err(ParseError::HeadTooLarge);
        }
        if self.fields.len() > limits.max_headers {
            return Err(ParseError::TooManyHeaders);
        }
        let facts = fields::scan(&self.buf, &self.fields, limits, FieldLayout::Pairs)?;
        let status = self.status;
        let bodiless =
            request_is_head || (100..200).contains(&status) || status == 204 || status == 304;
        let framing = match facts.content_length {
            _ if bodiless => BodyFraming::None,
            Some(length) => BodyFraming::Length(length),
            None => BodyFraming::Chunked,
        };
        let head = ResponseHead::assembled(
            (Version::Http11, status, Span::EMPTY),
            self.fields,
            facts,
            framing,
            self.buf.len(),
        );
        Ok((head, self.buf))
    }

    fn append(&mut self, bytes: &[u8]) -> Result<Span, ParseError> {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        Span::at(start, bytes.len()).ok_or(ParseError::HeadTooLarge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(
        status: u16,
        fields: &[(&[u8], &[u8])],
        is_head: bool,
    ) -> Result<(ResponseHead, Vec<u8>), ParseError> {
        let mut b = ResponseBuilder::new(status, 64)?;
        for (name, value) in fields {
            b.field(name, value)?;
        }
        b.finish(&Limits::default(), is_head)
    }

    #[test]
    fn a_built_head_reads_as_a_parsed_one() {
        let (head, buf) = build(
            200,
            &[(b"content-type", b"text/plain"), (b"content-length", b"5")],
            false,
        )
        .unwrap();
        assert_eq!(head.status(), 200);
        assert_eq!(head.header(&buf, "Content-Type"), Some(&b"text/plain"[..]));
        assert_eq!(head.framing(), BodyFraming::Length(5));
        assert_eq!(head.forward_framing(), BodyFraming::Length(5));
        assert!(head.keep_alive());
    }

    #[test]
    fn the_stream_ends_the_body_so_no_length_is_chunked_never_close_delimited() {
        let (head, _) = build(200, &[(b"grpc-encoding", b"identity")], false).unwrap();
        assert_eq!(head.framing(), BodyFraming::Chunked);
        let (head, _) = build(200, &[(b"content-length", b"9")], true).unwrap();
        assert_eq!(
            (head.framing(), head.forward_framing()),
            (BodyFraming::None, BodyFraming::Length(9))
        );
        let (head, _) = build(304, &[], false).unwrap();
        assert_eq!(head.framing(), BodyFraming::None);
    }

    #[test]
    fn what_the_parser_refuses_is_refused() {
        assert_eq!(
            build(99, &[], false).err(),
            Some(ParseError::InvalidStatusLine)
        );
        assert_eq!(
            build(200, &[(b"a b", b"1")], false).err(),
            Some(ParseError::InvalidHeaderName)
        );
        assert_eq!(
            build(200, &[(b"a", b"1\r\n")], false).err(),
            Some(ParseError::InvalidHeaderValue)
        );
        let cl = build(
            200,
            &[(b"content-length", b"1"), (b"content-length", b"2")],
            false,
        );
        assert!(cl.is_err());
        let huge = vec![b'a'; 70_000];
        assert!(build(200, &[(b"x", &huge)], false).is_err());
    }
}
