//! Request heads (server role): parse, refuse, and derive the facts the
//! proxy needs once.

use std::mem::MaybeUninit;

use crate::byteset::AUTHORITY;
use crate::error::ParseError;
use crate::fields::{self, FieldFacts, FieldLayout, TransferCoding};
use crate::limits::Limits;
use crate::message::{BodyFraming, Method, Version};
use crate::span::{FieldSpan, HeaderSpans, Span};
use crate::strict::{self, Role};

/// httparse's header array lives on the stack (uninitialised, so it costs
/// nothing to set up) up to this many fields; a larger configured limit
/// falls back to a heap array for the rare head that needs it.
pub(crate) const STACK_FIELDS: usize = 128;

/// Longest method token assumed when judging an incomplete request line.
const MAX_METHOD_BYTES: usize = 32;

/// The form of the request target (RFC 9112 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetForm {
    /// `/path?query`
    Origin,
    /// `http://authority/path?query`
    Absolute,
    /// `*` (OPTIONS only)
    Asterisk,
}

/// A parsed request head. Spans refer to the buffer given to
/// [`parse_request`]; pass that same buffer to the accessors.
#[derive(Clone, Debug)]
pub struct RequestHead {
    method: Method,
    method_span: Span,
    version: Version,
    target_form: TargetForm,
    target: Span,
    path: Span,
    authority: Option<Span>,
    host: Option<Span>,
    fields: HeaderSpans,
    facts: FieldFacts,
    framing: BodyFraming,
    head_len: usize,
}

impl RequestHead {
    /// The method.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The method token as sent (useful for [`Method::Other`]).
    pub fn method_bytes<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        self.method_span.get(buf)
    }

    /// HTTP/1.0 or HTTP/1.1.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Origin, absolute or asterisk form.
    pub fn target_form(&self) -> TargetForm {
        self.target_form
    }

    /// The request target exactly as sent.
    pub fn target<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        self.target.get(buf)
    }

    /// The target in origin form (path and query), what an upstream is
    /// sent: the target itself for origin form, the part after the
    /// authority for absolute form (`/` when that is empty), `*` for
    /// asterisk form.
    pub fn path<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        match self.path.get(buf) {
            [] => b"/",
            path => path,
        }
    }

    /// The host the request is for: the authority of an absolute-form
    /// target if there is one (RFC 9112 §3.2.2), else the Host field. May
    /// include a port. `None` only for an HTTP/1.0 request without either.
    pub fn host<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        self.host.map(|span| span.get(buf))
    }

    /// The Host field's value (never more than one: a second is refused),
    /// whatever the target's form.
    pub fn host_field<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        self.facts.host.map(|span| span.get(buf))
    }

    /// The first Content-Type field's value, found during the parse.
    pub fn content_type<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        self.facts.content_type.map(|span| span.get(buf))
    }

    /// The value of the method-override field that wins by
    /// [`crate::METHOD_OVERRIDE_FIELDS`]'s order of preference (the first
    /// field of that name), found during the parse.
    pub fn method_override<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        self.facts.method_override.map(|o| o.value.get(buf))
    }

    /// The first X-Forwarded-For field's value, found during the parse (every such field
    /// is a list of node names: a malformed one is refused by the parse).
    pub fn forwarded_for<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        self.facts.forwarded_for.map(|span| span.get(buf))
    }

    /// Whether method-override fields name different methods (several
    /// names, or one name repeated): an origin may obey any of them.
    pub fn method_override_conflict(&self) -> bool {
        self.facts.method_override_conflict
    }

    /// Whether the host comes from an absolute-form target, so the
    /// serialiser must replace the Host field with it.
    pub(crate) fn host_from_target(&self) -> bool {
        self.authority.is_some()
    }

    /// The header fields, in order.
    pub fn headers(&self) -> &HeaderSpans {
        &self.fields
    }

    /// The value of the first field named `name` (case-insensitive).
    pub fn header<'b>(&self, buf: &'b [u8], name: &str) -> Option<&'b [u8]> {
        self.fields.get(buf, name)
    }

    /// How the body is framed: `None`, `Length` or `Chunked` (requests are
    /// never close-delimited).
    pub fn framing(&self) -> BodyFraming {
        self.framing
    }

    /// Whether the client wants the connection kept open after this
    /// exchange: HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with
    /// `Connection: keep-alive`.
    pub fn keep_alive(&self) -> bool {
        match self.version {
            Version::Http11 => !self.facts.connection_close,
            Version::Http10 => self.facts.connection_keep_alive && !self.facts.connection_close,
        }
    }

    /// `Expect: 100-continue` on an HTTP/1.1 request with a body.
    pub fn expect_continue(&self) -> bool {
        self.facts.expect_continue && self.version == Version::Http11 && self.framing.has_body()
    }

    /// An Upgrade field announced by `Connection: upgrade`. The
    /// serialisers drop Upgrade (it is hop-by-hop), which RFC 9110 §7.8
    /// allows: the request then gets an ordinary response.
    pub fn upgrade(&self) -> bool {
        self.facts.upgrade_field && self.facts.connection_upgrade
    }

    /// Length of the head in bytes; the body (or the next pipelined
    /// request) starts there.
    pub fn head_len(&self) -> usize {
        self.head_len
    }

    pub(crate) fn connection_names_fields(&self) -> bool {
        self.facts.connection_names_fields
    }
}

/// Parses a request head at the start of `buf`.
///
/// `Ok(None)`: incomplete, read more (refused with 431 once `buf` exceeds
/// `limits.max_head_bytes`, or 414 when the request line alone is too
/// long). `Ok(Some((head, len)))`: the head is `buf[..len]`; what follows
/// is the body or the next request.
pub fn parse_request(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(RequestHead, usize)>, ParseError> {
    let capacity = limits.max_headers.min(STACK_FIELDS);
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_FIELDS];
    let mut request = httparse::Request::new(&mut []);
    let storage = stack.get_mut(..capacity).unwrap_or(&mut []);
    let status = httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut request,
        buf,
        storage,
    );
    match status {
        Err(httparse::Error::TooManyHeaders) if limits.max_headers > STACK_FIELDS => {
            parse_with_heap_fields(buf, limits)
        }
        other => finish(buf, limits, &request, other),
    }
}

/// The rare path for a configured field limit above [`STACK_FIELDS`].
fn parse_with_heap_fields(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(RequestHead, usize)>, ParseError> {
    let mut heap = vec![httparse::EMPTY_HEADER; limits.max_headers];
    let mut request = httparse::Request::new(&mut heap);
    let status = httparse::ParserConfig::default().parse_request(&mut request, buf);
    finish(buf, limits, &request, status)
}

fn finish(
    buf: &[u8],
    limits: &Limits,
    request: &httparse::Request<'_, '_>,
    status: httparse::Result<usize>,
) -> Result<Option<(RequestHead, usize)>, ParseError> {
    match status {
        Err(error) => Err(strict::diagnose(buf, error, Role::Request)),
        Ok(httparse::Status::Partial) => {
            incomplete_within_limits(buf, limits, request)?;
            Ok(None)
        }
        Ok(httparse::Status::Complete(head_len)) => {
            let head = build(buf, limits, request, head_len)?;
            Ok(Some((head, head_len)))
        }
    }
}

/// Bounds what a client may make us buffer before its head is complete.
fn incomplete_within_limits(
    buf: &[u8],
    limits: &Limits,
    request: &httparse::Request<'_, '_>,
) -> Result<(), ParseError> {
    if request.path.is_none() {
        let line_budget = limits
            .max_uri_bytes
            .saturating_add(MAX_METHOD_BYTES + " HTTP/1.1\r\n".len());
        if buf.len() > line_budget && !buf.contains(&b'\n') {
            return Err(ParseError::UriTooLong);
        }
    }
    if buf.len() > limits.max_head_bytes {
        return Err(ParseError::HeadTooLarge);
    }
    Ok(())
}

fn build(
    buf: &[u8],
    limits: &Limits,
    request: &httparse::Request<'_, '_>,
    head_len: usize,
) -> Result<RequestHead, ParseError> {
    if head_len > limits.max_head_bytes {
        return Err(ParseError::HeadTooLarge);
    }
    let method_bytes = request.method.unwrap_or("").as_bytes();
    let method_span = Span::of(buf, method_bytes).ok_or(ParseError::InvalidRequestLine)?;
    let target_bytes = request.path.unwrap_or("").as_bytes();
    let target = Span::of(buf, target_bytes).ok_or(ParseError::InvalidRequestLine)?;
    let version = request
        .version
        .and_then(Version::from_minor)
        .ok_or(ParseError::InvalidVersion)?;

    let mut fields = HeaderSpans::default();
    for header in request.headers.iter() {
        let name = Span::of(buf, header.name.as_bytes());
        let value = Span::of(buf, header.value);
        match (name, value) {
            (Some(name), Some(value)) => fields.push(FieldSpan { name, value }),
            _ => return Err(ParseError::InvalidHeaderValue),
        }
    }
    strict::check_line_breaks(buf, method_span.start(), &fields, head_len)?;
    let parts = Parts {
        method: method_span,
        target,
        version,
        fields: &fields,
        head_len,
        layout: FieldLayout::Lines,
        unframed_body: false,
    };
    let judged = complete(buf, &parts, limits)?;
    Ok(judged.into_head(fields))
}

/// A request head's pieces, located in its buffer and checked byte by byte (by httparse and
/// the line checks for HTTP/1, by [`crate::RequestBuilder`] for a head another codec decoded):
/// what [`complete`] judges as a whole.
pub(crate) struct Parts<'f> {
    pub method: Span,
    pub target: Span,
    pub version: Version,
    pub fields: &'f HeaderSpans,
    pub head_len: usize,
    pub layout: FieldLayout,
    /// A body follows without a length of its own (an HTTP/2 stream without
    /// content-length): chunked, as the upstream receives it.
    pub unframed_body: bool,
}

/// A judged head but its fields, which move once, from the caller into the
/// [`RequestHead`] (moved through here as well, they cost an HTTP/1 request a 600-byte copy).
pub(crate) struct Judged {
    method: Method,
    method_span: Span,
    version: Version,
    target: Span,
    head_len: usize,
    target_form: TargetForm,
    path: Span,
    authority: Option<Span>,
    host: Option<Span>,
    facts: FieldFacts,
    framing: BodyFraming,
}

impl Judged {
    /// The head, with `fields` (those it was judged with).
    #[inline]
    pub(crate) fn into_head(self, fields: HeaderSpans) -> RequestHead {
        RequestHead {
            method: self.method,
            method_span: self.method_span,
            version: self.version,
            target_form: self.target_form,
            target: self.target,
            path: self.path,
            authority: self.authority,
            host: self.host,
            fields,
            facts: self.facts,
            framing: self.framing,
            head_len: self.head_len,
        }
    }
}

/// The checks of a request head past its bytes, whichever codec read it: method, target,
/// field facts and limits, host, framing.
// Always inlined: called once per request from the parser and from the builder, and a
// call of its own cost a keep-alive cache hit ~90 instructions (benches/ab/request_cost.sh).
#[inline(always)]
pub(crate) fn complete(
    buf: &[u8],
    parts: &Parts<'_>,
    limits: &Limits,
) -> Result<Judged, ParseError> {
    let method = Method::from_bytes(parts.method.get(buf));
    if method == Method::Connect {
        return Err(ParseError::ConnectNotSupported);
    }
    let (target_form, path, authority) =
        classify_target(method, parts.target, parts.target.get(buf), limits)?;

    let mut facts = fields::scan(buf, parts.fields, limits, parts.layout)?;
    if facts.forwarded_for_malformed {
        return Err(ParseError::InvalidForwardedFor);
    }
    if facts.forwarded_malformed {
        return Err(ParseError::InvalidForwarded);
    }
    refuse_content_without_body(buf, method, &facts, limits)?;
    let host = match (authority, facts.host) {
        (_, None) if parts.version == Version::Http11 => return Err(ParseError::MissingHost),
        (Some(authority), _) => Some(authority),
        (None, host) => host,
    };
    if parts.unframed_body && facts.content_length.is_none() {
        // The body goes upstream with `Transfer-Encoding: chunked`: judged as that field
        // would be among the others (its limits too: the proxy never sends a head it
        // would refuse).
        if facts.transfer_coding == TransferCoding::Chunked {
            return Err(ParseError::InvalidTransferEncoding);
        }
        fields::check_line("transfer-encoding: chunked".len(), b"chunked", limits)?;
        facts.transfer_coding = TransferCoding::Chunked;
    }
    let framing = request_framing(&facts, parts.version, limits)?;
    Ok(Judged {
        method,
        method_span: parts.method,
        version: parts.version,
        target: parts.target,
        head_len: parts.head_len,
        target_form,
        path,
        authority,
        host,
        facts,
        framing,
    })
}

/// Tempesta's rule for methods without a body (fw/http_parser.c,
/// `tfw_http_parse_check_bodyless_meth` and `check_bodyless_meth`): a GET, HEAD, DELETE or
/// TRACE request, or one whose method-override field names one of them, may carry neither
/// content (Content-Length above 0) nor a Content-Type field (allowed by
/// `http_allow_empty_body_content_type`). RFC 9110 §9.3 gives such content no meaning and
/// lets a server reject it; a body the origin may ignore is where one reader's request ends
/// and another's begins (request smuggling). A chunked body is not judged here, as in
/// Tempesta, whose check looks at the two fields only.
fn refuse_content_without_body(
    buf: &[u8],
    method: Method,
    facts: &FieldFacts,
    limits: &Limits,
) -> Result<(), ParseError> {
    let content = facts.content_length.is_some_and(|n| n > 0)
        || (facts.content_type.is_some() && !limits.allow_content_type_without_body);
    if !content {
        return Ok(());
    }
    let bodyless = |m: Method| {
        matches!(
            m,
            Method::Get | Method::Head | Method::Delete | Method::Trace
        )
    };
    let overridden = facts
        .method_override
        .map(|o| Method::from_bytes(o.value.get(buf).trim_ascii()));
    if bodyless(method) || overridden.is_some_and(bodyless) {
        return Err(ParseError::ContentOnBodylessMethod);
    }
    Ok(())
}

/// Checks the target and splits it into form, origin-form part and
/// authority.
fn classify_target(
    method: Method,
    target: Span,
    bytes: &[u8],
    limits: &Limits,
) -> Result<(TargetForm, Span, Option<Span>), ParseError> {
    if bytes.len() > limits.max_uri_bytes {
        return Err(ParseError::UriTooLong);
    }
    if let Some(allowed) = &limits.uri_bytes {
        if !allowed.contains_all(bytes) {
            return Err(ParseError::UriByteNotAllowed);
        }
    }
    // A fragment is never part of a request target (RFC 9112 §3.2); two
    // parties could disagree on where the path ends.
    if bytes.contains(&b'#') {
        return Err(ParseError::InvalidTarget);
    }
    match bytes {
        [b'/', ..] => Ok((TargetForm::Origin, target, None)),
        b"*" if method == Method::Options => Ok((TargetForm::Asterisk, target, None)),
        _ => {
            let scheme_len = absolute_scheme_len(bytes).ok_or(ParseError::InvalidTarget)?;
            let after_scheme = bytes.get(scheme_len..).unwrap_or(&[]);
            let authority_len = after_scheme
                .iter()
                .position(|&b| b == b'/' || b == b'?')
                .unwrap_or(after_scheme.len());
            let authority_bytes = after_scheme.get(..authority_len).unwrap_or(&[]);
            let rest = after_scheme.get(authority_len..).unwrap_or(&[]);
            // Userinfo must be treated as an error (RFC 9110 §4.2.4); a
            // query with an empty path is legal but so rare that refusing
            // it keeps the origin form a plain sub-slice.
            if authority_bytes.is_empty() || rest.first() == Some(&b'?') {
                return Err(ParseError::InvalidTarget);
            }
            if authority_bytes.contains(&b'@') {
                return Err(ParseError::InvalidTarget);
            }
            if !AUTHORITY.contains_all(authority_bytes) {
                return Err(ParseError::InvalidHost);
            }
            let authority = target.sub(scheme_len, authority_len);
            let path = target.sub(scheme_len + authority_len, rest.len());
            Ok((TargetForm::Absolute, path, Some(authority)))
        }
    }
}

/// Length of `http://` or `https://` (any case) at the start of `target`.
fn absolute_scheme_len(target: &[u8]) -> Option<usize> {
    [&b"http://"[..], b"https://"]
        .into_iter()
        .find_map(|scheme| {
            let prefix = target.get(..scheme.len())?;
            prefix.eq_ignore_ascii_case(scheme).then_some(scheme.len())
        })
}

/// RFC 9112 §6.3 for requests, with this proxy's refusals.
fn request_framing(
    facts: &FieldFacts,
    version: Version,
    limits: &Limits,
) -> Result<BodyFraming, ParseError> {
    match (facts.transfer_coding, facts.content_length) {
        (TransferCoding::Chunked, _) if version == Version::Http10 => {
            Err(ParseError::TransferEncodingInHttp10)
        }
        (TransferCoding::Chunked, Some(_)) => Err(ParseError::ContentLengthWithTransferEncoding),
        (TransferCoding::Chunked, None) => Ok(BodyFraming::Chunked),
        (TransferCoding::Absent, Some(length)) => match limits.max_body_bytes {
            Some(max) if length > max => Err(ParseError::BodyTooLarge),
            _ => Ok(BodyFraming::Length(length)),
        },
        (TransferCoding::Absent, None) => Ok(BodyFraming::None),
    }
}
