//! Response heads (upstream role).

use std::mem::MaybeUninit;

use crate::error::ParseError;
use crate::fields::{self, FieldFacts, FieldLayout, TransferCoding};
use crate::limits::Limits;
use crate::message::{BodyFraming, Version};
use crate::request::STACK_FIELDS;
use crate::span::{FieldSpan, HeaderSpans, Span};
use crate::strict::{self, Role};

/// A parsed response head. Spans refer to the buffer given to
/// [`parse_response`].
#[derive(Clone, Debug)]
pub struct ResponseHead {
    version: Version,
    status: u16,
    reason: Span,
    fields: HeaderSpans,
    facts: FieldFacts,
    framing: BodyFraming,
    head_len: usize,
}

impl ResponseHead {
    /// HTTP/1.0 or HTTP/1.1.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The status code, 100..=599.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The reason phrase as sent (empty when absent, or when it had
    /// obs-text, which httparse does not return).
    pub fn reason<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        self.reason.get(buf)
    }

    /// The header fields, in order.
    pub fn headers(&self) -> &HeaderSpans {
        &self.fields
    }

    /// The value of the first field named `name` (case-insensitive).
    pub fn header<'b>(&self, buf: &'b [u8], name: &str) -> Option<&'b [u8]> {
        self.fields.get(buf, name)
    }

    /// How to read the body that follows (RFC 9112 §6.3).
    pub fn framing(&self) -> BodyFraming {
        self.framing
    }

    /// The Content-Length field, even where it does not frame a body (a
    /// response to HEAD, a 304): it then tells the representation's size.
    pub fn content_length(&self) -> Option<u64> {
        self.facts.content_length
    }

    /// What a forwarder should announce to its client when it relays this
    /// response's body unchanged: the framing, except that a bodiless
    /// response to HEAD or a 304 keeps its Content-Length.
    pub fn forward_framing(&self) -> BodyFraming {
        match (self.framing, self.facts.content_length) {
            (BodyFraming::None, Some(length)) if self.status >= 200 && self.status != 204 => {
                BodyFraming::Length(length)
            }
            (framing, _) => framing,
        }
    }

    /// Whether the upstream connection can carry another request after
    /// this response: not for a close-delimited body, not with
    /// `Connection: close`, and for HTTP/1.0 only with `keep-alive`.
    pub fn keep_alive(&self) -> bool {
        if self.framing == BodyFraming::CloseDelimited || self.facts.connection_close {
            return false;
        }
        match self.version {
            Version::Http11 => true,
            Version::Http10 => self.facts.connection_keep_alive,
        }
    }

    /// An interim 1xx response: another head follows, except after a `101`,
    /// which switches the connection to the protocol its Upgrade names.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status)
    }

    /// An Upgrade field announced by `Connection: upgrade` (what a `101`
    /// switching to that protocol carries).
    pub fn upgrade(&self) -> bool {
        self.facts.upgrade_field && self.facts.connection_upgrade
    }

    /// Length of the head in bytes.
    pub fn head_len(&self) -> usize {
        self.head_len
    }

    pub(crate) fn connection_names_fields(&self) -> bool {
        self.facts.connection_names_fields
    }

    /// A head assembled from another codec's pieces (`assemble_response.rs`).
    pub(crate) fn assembled(
        (version, status, reason): (Version, u16, Span),
        fields: HeaderSpans,
        facts: FieldFacts,
        framing: BodyFraming,
        head_len: usize,
    ) -> ResponseHead {
        ResponseHead {
            version,
            status,
            reason,
            fields,
            facts,
            framing,
            head_len,
        }
    }
}

/// Parses a response head at the start of `buf`. `request_is_head`: the
/// request was HEAD, so no body follows whatever the fields say.
///
/// The same strictness as requests applies, with one choice specific to
/// responses: Content-Length together with Transfer-Encoding is refused
/// (RFC 9112 lets a recipient let TE win, but an upstream sending both is
/// broken or being exploited, and the proxy answers 502 rather than guess).
/// Identical Content-Length duplicates are folded in both roles; the
/// serialisers always write a single value of their own.
pub fn parse_response(
    buf: &[u8],
    limits: &Limits,
    request_is_head: bool,
) -> Result<Option<(ResponseHead, usize)>, ParseError> {
    let capacity = limits.max_headers.min(STACK_FIELDS);
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_FIELDS];
    let mut response = httparse::Response::new(&mut []);
    let storage = stack.get_mut(..capacity).unwrap_or(&mut []);
    let status = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        storage,
    );
    match status {
        Err(httparse::Error::TooManyHeaders) if limits.max_headers > STACK_FIELDS => {
            let mut heap = vec![httparse::EMPTY_HEADER; limits.max_headers];
            let mut response = httparse::Response::new(&mut heap);
            let status = httparse::ParserConfig::default().parse_response(&mut response, buf);
            finish(buf, limits, &response, status, request_is_head)
        }
        other => finish(buf, limits, &response, other, request_is_head),
    }
}

fn finish(
    buf: &[u8],
    limits: &Limits,
    response: &httparse::Response<'_, '_>,
    status: httparse::Result<usize>,
    request_is_head: bool,
) -> Result<Option<(ResponseHead, usize)>, ParseError> {
    match status {
        Err(error) => Err(strict::diagnose(buf, error, Role::Response)),
        Ok(httparse::Status::Partial) if buf.len() > limits.max_head_bytes => {
            Err(ParseError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(head_len)) => {
            let head = build(buf, limits, response, head_len, request_is_head)?;
            Ok(Some((head, head_len)))
        }
    }
}

fn build(
    buf: &[u8],
    limits: &Limits,
    response: &httparse::Response<'_, '_>,
    head_len: usize,
    request_is_head: bool,
) -> Result<ResponseHead, ParseError> {
    if head_len > limits.max_head_bytes {
        return Err(ParseError::HeadTooLarge);
    }
    let version = response
        .version
        .and_then(Version::from_minor)
        .ok_or(ParseError::InvalidVersion)?;
    let status = response
        .code
        .filter(|code| (100..=599).contains(code))
        .ok_or(ParseError::InvalidStatusLine)?;
    // httparse returns a static "" for a reason with obs-text; that is not
    // inside `buf`, and is kept as empty.
    let reason = response
        .reason
        .and_then(|reason| Span::of(buf, reason.as_bytes()))
        .unwrap_or(Span::EMPTY);

    let mut fields = HeaderSpans::default();
    for header in response.headers.iter() {
        let name = Span::of(buf, header.name.as_bytes());
        let value = Span::of(buf, header.value);
        match (name, value) {
            (Some(name), Some(value)) => fields.push(FieldSpan { name, value }),
            _ => return Err(ParseError::InvalidHeaderValue),
        }
    }
    let start_line = buf.iter().position(|&b| b == b'H').unwrap_or(0);
    strict::check_line_breaks(buf, start_line, &fields, head_len)?;

    let facts = fields::scan(buf, &fields, limits, FieldLayout::Lines)?;
    let framing = response_framing(&facts, version, status, request_is_head)?;
    Ok(ResponseHead {
        version,
        status,
        reason,
        fields,
        facts,
        framing,
        head_len,
    })
}

/// RFC 9112 §6.3, in order: no body for HEAD, 1xx, 204, 304; then
/// Transfer-Encoding; then Content-Length; else until close.
fn response_framing(
    facts: &FieldFacts,
    version: Version,
    status: u16,
    request_is_head: bool,
) -> Result<BodyFraming, ParseError> {
    if facts.transfer_coding == TransferCoding::Chunked && facts.content_length.is_some() {
        return Err(ParseError::ContentLengthWithTransferEncoding);
    }
    if request_is_head || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(BodyFraming::None);
    }
    match (facts.transfer_coding, facts.content_length) {
        (TransferCoding::Chunked, _) if version == Version::Http10 => {
            Err(ParseError::TransferEncodingInHttp10)
        }
        (TransferCoding::Chunked, _) => Ok(BodyFraming::Chunked),
        (TransferCoding::Absent, Some(length)) => Ok(BodyFraming::Length(length)),
        (TransferCoding::Absent, None) => Ok(BodyFraming::CloseDelimited),
    }
}
