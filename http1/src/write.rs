//! Serialising heads for the other side of the proxy: a request for the
//! upstream, a response for the client.
//!
//! Both writers append to a caller-owned `Vec<u8>` (reused across
//! requests, so no allocation once it has grown) and:
//! - drop hop-by-hop fields (RFC 9110 §7.6.1): Connection and every field
//!   it names (except Host, which a client must not be able to strip),
//!   Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding,
//!   Upgrade, Proxy-Authenticate, Proxy-Authorization;
//! - drop Content-Length and write the framing the caller asks for, so an
//!   upstream or client only ever sees one unambiguous length;
//! - append to X-Forwarded-For and Via (merging earlier values into one
//!   field), then apply configured `set`/`add` edits;
//! - check what they wrote against [`Forwarding::limits`] and take it back
//!   when it does not fit (see [`OversizedHead`]).

use crate::byteset::{FIELD_VALUE, TCHAR};
use crate::canned::reason_phrase;
use crate::fields::list_elements;
use crate::fit::{check_written_head, OversizedHead};
use crate::limits::Limits;
use crate::message::BodyFraming;
use crate::request::RequestHead;
use crate::request_sink::{forward_request_fields, RequestText};
use crate::response::ResponseHead;
use crate::sink::{forward_response_fields, HeadText};
use crate::span::HeaderSpans;

/// A header edit from configuration that cannot be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidHeader {
    /// The name is empty or not a token.
    Name,
    /// The value has CR, LF, NUL or another control character.
    Value,
    /// The name is a hop-by-hop or framing field the writers manage.
    Reserved,
}

impl std::fmt::Display for InvalidHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InvalidHeader::Name => "header name is not a token",
            InvalidHeader::Value => "header value has a control character",
            InvalidHeader::Reserved => "header is hop-by-hop or framing, managed by the proxy",
        })
    }
}

impl std::error::Error for InvalidHeader {}

/// A configured field: name and value, owned.
type OwnedField = (Box<[u8]>, Box<[u8]>);

/// Configured header edits (Tempesta's `req_hdr_set`/`req_hdr_add` and
/// `resp_hdr_*`), validated once when the configuration loads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderEdits {
    set: Vec<OwnedField>,
    add: Vec<OwnedField>,
    /// Names of fields removed without a replacement.
    remove: Vec<Box<[u8]>>,
}

impl HeaderEdits {
    /// No edits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace every field named `name` (case-insensitive) by one with
    /// `value`.
    pub fn set(&mut self, name: &[u8], value: &[u8]) -> Result<&mut Self, InvalidHeader> {
        validate_edit(name, value)?;
        self.set.push((name.into(), value.into()));
        Ok(self)
    }

    /// Append a field, keeping any of the same name.
    pub fn add(&mut self, name: &[u8], value: &[u8]) -> Result<&mut Self, InvalidHeader> {
        validate_edit(name, value)?;
        self.add.push((name.into(), value.into()));
        Ok(self)
    }

    /// Remove every field named `name` (case-insensitive), writing none
    /// in its place (the proxy's own cookie, stripped before forwarding).
    pub fn remove(&mut self, name: &[u8]) -> Result<&mut Self, InvalidHeader> {
        validate_edit(name, b"")?;
        self.remove.push(name.into());
        Ok(self)
    }

    /// Appends `other`'s edits after these (both were validated when made).
    pub fn extend(&mut self, other: &HeaderEdits) {
        self.set.extend(other.set.iter().cloned());
        self.add.extend(other.add.iter().cloned());
        self.remove.extend(other.remove.iter().cloned());
    }

    /// Whether there are no edits.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    /// How many fields the edits write.
    pub fn len(&self) -> usize {
        self.set.len() + self.add.len()
    }

    /// Whether a received field named `name` is not copied (replaced or removed).
    pub(crate) fn replaces(&self, name: &[u8]) -> bool {
        self.set.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
            || self.remove.iter().any(|n| n.eq_ignore_ascii_case(name))
    }

    /// The fields the edits write, in order: the `set` ones, then the `add` ones.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.set
            .iter()
            .chain(self.add.iter())
            .map(|(name, value)| (&name[..], &value[..]))
    }
}

fn validate_edit(name: &[u8], value: &[u8]) -> Result<(), InvalidHeader> {
    if name.is_empty() || !TCHAR.contains_all(name) {
        return Err(InvalidHeader::Name);
    }
    if !FIELD_VALUE.contains_all(value) {
        return Err(InvalidHeader::Value);
    }
    if is_managed(name) {
        return Err(InvalidHeader::Reserved);
    }
    Ok(())
}

/// What to say in the Connection field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConnectionOption {
    /// Nothing: HTTP/1.1 persistence is the default.
    #[default]
    Default,
    /// `Connection: keep-alive`, for an HTTP/1.0 peer.
    KeepAlive,
    /// `Connection: close`.
    Close,
    /// `Connection: upgrade` and `Upgrade: websocket`: a WebSocket opening
    /// handshake (RFC 6455 §4) passed on, the request or its `101`. The
    /// received Upgrade and Connection fields are hop-by-hop and dropped;
    /// these are the proxy's own, for the one protocol it tunnels.
    UpgradeWebSocket,
}

/// What the proxy adds when it forwards a head.
#[derive(Clone, Copy, Debug)]
pub struct Forwarding<'a> {
    /// The client's address, appended to X-Forwarded-For (requests only).
    pub forwarded_for: Option<&'a [u8]>,
    /// The scheme of the client's own connection (`http` or `https`), written as
    /// X-Forwarded-Proto in place of any the client sent (requests only): the client knows
    /// nothing the proxy does not, and an application trusts this field to tell whether the
    /// request came over TLS.
    pub forwarded_proto: Option<&'a [u8]>,
    /// The proxy's pseudonym, appended to Via as `1.1 NAME`.
    pub via: Option<&'a [u8]>,
    /// Configured edits.
    pub edits: &'a HeaderEdits,
    /// The framing to announce for the body that will follow. For a
    /// response, `CloseDelimited` announces nothing and forces
    /// `Connection: close`.
    pub framing: BodyFraming,
    /// The Connection field to write.
    pub connection: ConnectionOption,
    /// The limits the written head must fit: the proxy's own parsing
    /// limits, so that a next hop enforcing the same ones accepts it.
    pub limits: &'a Limits,
}

/// Writes the request head to send upstream: `METHOD path HTTP/1.1`, Host
/// (taken from an absolute-form target when there was one), the
/// end-to-end fields, then the proxy's own.
///
/// When the result would not fit `forwarding.limits`, `out` is left as it
/// was and the error says which limit (answer the client 431).
pub fn write_request_head(
    out: &mut Vec<u8>,
    head: &RequestHead,
    buf: &[u8],
    forwarding: &Forwarding<'_>,
) -> Result<(), OversizedHead> {
    let start = out.len();
    out.reserve(head.head_len() + 128);
    forward_request_fields(&mut RequestText { out: &mut *out }, head, buf, forwarding);
    keep_if_fits(out, start, forwarding, head.headers().len())
}

/// Writes the response head to send to the client: an HTTP/1.1 status
/// line with the upstream's status and reason (the standard phrase if it
/// had none), the end-to-end fields, then the proxy's own.
///
/// When the result would not fit `forwarding.limits`, `out` is left as it
/// was and the error says which limit (answer the client 502).
pub fn write_response_head(
    out: &mut Vec<u8>,
    head: &ResponseHead,
    buf: &[u8],
    forwarding: &Forwarding<'_>,
) -> Result<(), OversizedHead> {
    let start = out.len();
    out.reserve(head.head_len() + 128);
    let written = forward_response_fields(HeadText { out: &mut *out }, head, buf, forwarding);
    if written.is_err() {
        out.truncate(start);
    }
    written.map(|_| ())
}

/// The reason phrase to send for `head`: the origin's, or the standard one when it sent
/// none.
pub(crate) fn reason_or_standard<'b>(head: &ResponseHead, buf: &'b [u8]) -> &'b [u8] {
    match head.reason(buf) {
        [] => reason_phrase(head.status()).as_bytes(),
        reason => reason,
    }
}

/// Fields a writer adds at most besides the received ones and the edits:
/// Host, X-Forwarded-For, X-Forwarded-Proto, Via, the framing field, Connection and Upgrade.
const ADDED_FIELDS_AT_MOST: usize = 7;

/// Checks the head written at `out[start..]`; takes it back if it does not fit.
fn keep_if_fits(
    out: &mut Vec<u8>,
    start: usize,
    forwarding: &Forwarding<'_>,
    received_fields: usize,
) -> Result<(), OversizedHead> {
    let fields_at_most = received_fields + forwarding.edits.len() + ADDED_FIELDS_AT_MOST;
    let written = out.get(start..).unwrap_or(&[]);
    let verdict = check_written_head(written, forwarding.limits, fields_at_most);
    if verdict.is_err() {
        out.truncate(start);
    }
    verdict
}

/// `HTTP/1.1 CODE REASON\r\n`, for responses the proxy makes itself (from
/// the cache, redirects). `status` is written as three digits.
pub fn write_status_line(out: &mut Vec<u8>, status: u16, reason: &[u8]) {
    out.extend_from_slice(b"HTTP/1.1 ");
    write_decimal(out, u64::from(status.clamp(100, 999)));
    out.push(b' ');
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
}

/// `Name: value\r\n`. The caller vouches for the bytes (use
/// [`HeaderEdits`] for anything from configuration); a value with CR or
/// LF is written as empty rather than let it split the head.
pub fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    if FIELD_VALUE.contains_all(value) {
        out.extend_from_slice(value);
    }
    out.extend_from_slice(b"\r\n");
}

/// The pieces of a chunked body as the writers frame it (RFC 9112 §7.1): for each chunk
/// [`ChunkSize`] then the data then [`CHUNK_END`]; at the end [`LAST_CHUNK`], the trailer
/// field lines ([`write_field`]) and [`TRAILER_END`]. Callers queue the pieces without
/// copying the data.
pub const CHUNK_END: &[u8] = b"\r\n";
/// The zero-size chunk that ends a chunked body's data.
pub const LAST_CHUNK: &[u8] = b"0\r\n";
/// The empty line that ends a chunked body's trailer section.
pub const TRAILER_END: &[u8] = b"\r\n";

/// A chunk's size line (`{:x}\r\n`), without an allocation.
pub struct ChunkSize {
    line: [u8; 18],
    len: usize,
}

impl ChunkSize {
    pub fn new(size: usize) -> ChunkSize {
        use std::io::Write as _;
        let mut line = [0u8; 18];
        let mut cursor = std::io::Cursor::new(&mut line[..]);
        // A usize in hexadecimal fits 16 digits, plus CRLF: the write cannot fall short.
        let _ = write!(cursor, "{size:x}\r\n");
        let len = cursor.position() as usize;
        ChunkSize { line, len }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.line.get(..self.len).unwrap_or(&[])
    }
}

/// The framing field for `framing`, if it needs one.
pub fn write_framing(out: &mut Vec<u8>, framing: BodyFraming) {
    match framing {
        BodyFraming::Length(length) => {
            out.extend_from_slice(b"Content-Length: ");
            write_decimal(out, length);
            out.extend_from_slice(b"\r\n");
        }
        BodyFraming::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        BodyFraming::None | BodyFraming::CloseDelimited => {}
    }
}

pub(crate) fn write_decimal(out: &mut Vec<u8>, mut n: u64) {
    // Digits are produced backwards into a stack buffer: u64::MAX has 20.
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        if let Some(slot) = digits.get_mut(start) {
            *slot = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || start == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(start..).unwrap_or(&[]));
}

/// Whether [`write_request_head`] copies the received field `name` of `head` to the
/// upstream: not a hop-by-hop or framing field, and not one the request's Connection field
/// names. The cache keys variants on these only (RFC 9111 §4.1): a field the origin never
/// saw cannot have chosen its answer.
pub fn is_forwarded_field(head: &RequestHead, buf: &[u8], name: &[u8]) -> bool {
    let named = head.connection_names_fields() && named_by_connection(buf, head.headers(), name);
    !is_managed(name) && !named
}

/// Hop-by-hop fields and the framing fields the writers re-create.
/// Dispatches on length and first letter so that most names cost two
/// comparisons.
#[inline]
pub(crate) fn is_managed(name: &[u8]) -> bool {
    let Some(first) = name.first() else {
        return false;
    };
    let candidate: &[u8] = match (name.len(), first.to_ascii_lowercase()) {
        (2, b't') => b"te",
        (7, b't') => b"trailer",
        (7, b'u') => b"upgrade",
        (10, b'c') => b"connection",
        (10, b'k') => b"keep-alive",
        (14, b'c') => b"content-length",
        (16, b'p') => b"proxy-connection",
        (17, b't') => b"transfer-encoding",
        (18, b'p') => b"proxy-authenticate",
        (19, b'p') => b"proxy-authorization",
        _ => return false,
    };
    name.eq_ignore_ascii_case(candidate)
}

/// Whether a Connection option names this field. Host is never dropped
/// this way: the upstream needs it, and a client must not be able to
/// strip it.
pub(crate) fn named_by_connection(buf: &[u8], fields: &HeaderSpans, name: &[u8]) -> bool {
    if name.eq_ignore_ascii_case(b"host") {
        return false;
    }
    fields
        .get_all(buf, "connection")
        .flat_map(list_elements)
        .any(|option| option.eq_ignore_ascii_case(name))
}
