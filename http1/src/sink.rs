//! A forwarded response head as a sequence of pieces (status, then each field in order)
//! handed to a [`FieldSink`], so that every protocol gets the same head without HTTP/1 text
//! in between: [`HeadText`] renders the pieces as HTTP/1.1 (what
//! [`write_response_head`](crate::write_response_head) sends), an HTTP/2 codec encodes them
//! as HEADERS, [`ResponseFields`] keeps them for the cache. [`forward_response_fields`]
//! decides the pieces once, whatever the sink.
//!
//! The limits a forwarded head must fit are judged on its size as HTTP/1.1 text
//! ([`HeadMeasure`]), whichever sink takes it: a response gets one verdict on either
//! protocol.

use crate::byteset::FIELD_VALUE;
use crate::fit::{check_measured_head, OversizedHead};
use crate::limits::Limits;
use crate::message::BodyFraming;
use crate::response::ResponseHead;
use crate::span::{FieldSpan, HeaderSpans, Span};
use crate::write::{
    is_managed, named_by_connection, reason_or_standard, ConnectionOption, Forwarding,
};

/// Where the pieces of a forwarded response head go: [`FieldSink::status`] once, then
/// [`FieldSink::field`] for each field in order, then [`FieldSink::end`].
pub trait FieldSink {
    /// The status code and reason phrase (the standard phrase when the origin sent none).
    fn status(&mut self, status: u16, reason: &[u8]);
    /// One field, as an HTTP/1.1 recipient would parse it from the written line.
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// The head is complete.
    fn end(&mut self) {}
}

impl<S: FieldSink + ?Sized> FieldSink for &mut S {
    #[inline]
    fn status(&mut self, status: u16, reason: &[u8]) {
        (**self).status(status, reason)
    }
    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        (**self).field(name, value)
    }
    #[inline]
    fn end(&mut self) {
        (**self).end()
    }
}

/// Both sinks get every piece (a client's codec and the cache's copy).
impl<A: FieldSink, B: FieldSink> FieldSink for (A, B) {
    #[inline]
    fn status(&mut self, status: u16, reason: &[u8]) {
        self.0.status(status, reason);
        self.1.status(status, reason);
    }
    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.0.field(name, value);
        self.1.field(name, value);
    }
    #[inline]
    fn end(&mut self) {
        self.0.end();
        self.1.end();
    }
}

/// No sink: the pieces are dropped (no cache copy wanted).
impl<S: FieldSink> FieldSink for Option<S> {
    #[inline]
    fn status(&mut self, status: u16, reason: &[u8]) {
        if let Some(sink) = self {
            sink.status(status, reason);
        }
    }
    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        if let Some(sink) = self {
            sink.field(name, value);
        }
    }
    #[inline]
    fn end(&mut self) {
        if let Some(sink) = self {
            sink.end();
        }
    }
}

/// The pieces rendered as HTTP/1.1 text, appended to a caller-owned buffer.
pub struct HeadText<'a> {
    pub out: &'a mut Vec<u8>,
}

impl FieldSink for HeadText<'_> {
    #[inline]
    fn status(&mut self, status: u16, reason: &[u8]) {
        crate::write::write_status_line(self.out, status, reason);
    }
    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
    }
    #[inline]
    fn end(&mut self) {
        self.out.extend_from_slice(b"\r\n");
    }
}

/// A head's size as HTTP/1.1 text: what the limits bound, on either protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeadMeasure {
    /// The whole head: start line, field lines, the empty line.
    pub bytes: usize,
    /// Field lines.
    pub fields: usize,
    /// The longest field line without its line end.
    pub longest_field: usize,
}

impl HeadMeasure {
    #[inline]
    fn status(&mut self, reason: &[u8]) {
        // `HTTP/1.1 NNN reason` and its line end.
        self.bytes += "HTTP/1.1 200 ".len() + reason.len() + 2;
    }

    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        let line = name.len() + ": ".len() + value.len();
        self.bytes += line + 2;
        self.fields += 1;
        self.longest_field = self.longest_field.max(line);
    }

    #[inline]
    fn end(&mut self) {
        self.bytes += 2;
    }

    /// Whether a parser with `limits` accepts a head of this size.
    pub fn check(&self, limits: &Limits) -> Result<(), OversizedHead> {
        check_measured_head(self, limits)
    }
}

/// A sink that measures what passes to the inner one.
struct Measured<S> {
    sink: S,
    measure: HeadMeasure,
}

impl<S: FieldSink> Measured<S> {
    #[inline]
    fn status(&mut self, status: u16, reason: &[u8]) {
        self.measure.status(reason);
        self.sink.status(status, reason);
    }
    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.measure.field(name, value);
        self.sink.field(name, value);
    }
    /// A field of the proxy's own: a value with CR, LF or another control is sent empty
    /// rather than let it split the head (configuration edits were validated already).
    #[inline]
    fn own_field(&mut self, name: &[u8], value: &[u8]) {
        let value = if FIELD_VALUE.contains_all(value) {
            value
        } else {
            &[]
        };
        self.field(name, value);
    }
}

/// Hands the head to send to the client for `head` (parsed from `buf`) to `sink`: the
/// status and reason (the standard phrase if the origin had none), the end-to-end fields,
/// Via, the configured edits, the framing field and Connection. Returns the head's size as
/// HTTP/1.1 text, or the limit of `forwarding.limits` it would exceed (answer 502; the sink
/// then holds a partial head, which the caller discards).
pub fn forward_response_fields<S: FieldSink>(
    sink: S,
    head: &ResponseHead,
    buf: &[u8],
    forwarding: &Forwarding<'_>,
) -> Result<HeadMeasure, OversizedHead> {
    let mut to = Measured {
        sink,
        measure: HeadMeasure::default(),
    };
    to.status(head.status(), reason_or_standard(head, buf));
    let fields = head.headers();
    let edits = forwarding.edits;
    let connection_names_fields = head.connection_names_fields();
    let mut earlier_via = false;
    for (name, value) in fields.fields(buf) {
        if forwarding.via.is_some() && name.eq_ignore_ascii_case(b"via") {
            earlier_via = true;
            continue;
        }
        let skip = is_managed(name)
            || (connection_names_fields && named_by_connection(buf, fields, name))
            || (!edits.is_empty() && edits.replaces(name));
        if !skip {
            to.field(name, value);
        }
    }
    if let Some(pseudonym) = forwarding.via {
        let mut via = Vec::with_capacity(64);
        if earlier_via {
            for value in fields.get_all(buf, "via").filter(|v| !v.is_empty()) {
                via.extend_from_slice(value);
                via.extend_from_slice(b", ");
            }
        }
        via.extend_from_slice(b"1.1 ");
        if FIELD_VALUE.contains_all(pseudonym) {
            via.extend_from_slice(pseudonym);
        }
        to.field(b"Via", &via);
    }
    for (name, value) in edits.fields() {
        to.own_field(name, value);
    }
    framing_field(&mut to, forwarding.framing);
    let connection = match forwarding.framing {
        BodyFraming::CloseDelimited => ConnectionOption::Close,
        _ => forwarding.connection,
    };
    connection_fields(&mut to, connection);
    to.measure.end();
    to.sink.end();
    to.measure.check(forwarding.limits)?;
    Ok(to.measure)
}

fn framing_field<S: FieldSink>(to: &mut Measured<S>, framing: BodyFraming) {
    match framing {
        BodyFraming::Length(length) => {
            let mut digits = Vec::with_capacity(20);
            crate::write::write_decimal(&mut digits, length);
            to.field(b"Content-Length", &digits);
        }
        BodyFraming::Chunked => to.field(b"Transfer-Encoding", b"chunked"),
        BodyFraming::None | BodyFraming::CloseDelimited => {}
    }
}

fn connection_fields<S: FieldSink>(to: &mut Measured<S>, connection: ConnectionOption) {
    match connection {
        ConnectionOption::Default => {}
        ConnectionOption::KeepAlive => to.field(b"Connection", b"keep-alive"),
        ConnectionOption::Close => to.field(b"Connection", b"close"),
        ConnectionOption::UpgradeWebSocket => {
            to.field(b"Connection", b"upgrade");
            to.field(b"Upgrade", b"websocket");
        }
    }
}

/// A response head kept as its pieces (status, reason, fields in order, in one buffer):
/// the neutral form the cache is filled from. Values are kept as an HTTP/1.1 parser reads
/// them from the written line (without surrounding spaces and tabs); [`ResponseFields::measure`]
/// is the size the written text has.
#[derive(Clone, Debug, Default)]
pub struct ResponseFields {
    status: u16,
    buf: Vec<u8>,
    reason: Span,
    fields: HeaderSpans,
    measure: HeadMeasure,
}

impl ResponseFields {
    pub fn new() -> ResponseFields {
        ResponseFields::default()
    }

    /// Empties it for another head, keeping its buffers.
    pub fn clear(&mut self) {
        *self = ResponseFields {
            buf: std::mem::take(&mut self.buf),
            ..ResponseFields::default()
        };
        self.buf.clear();
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    pub fn reason(&self) -> &[u8] {
        self.reason.get(&self.buf)
    }

    /// The fields, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.fields.fields(&self.buf)
    }

    /// The head's size as HTTP/1.1 text (the fields added after the sink's end included).
    pub fn measure(&self) -> HeadMeasure {
        self.measure
    }

    fn append(&mut self, bytes: &[u8]) -> Span {
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        Span::at(start, bytes.len()).unwrap_or(Span::EMPTY)
    }
}

impl FieldSink for ResponseFields {
    fn status(&mut self, status: u16, reason: &[u8]) {
        self.status = status;
        self.reason = self.append(reason);
        self.measure.status(reason);
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.measure.field(name, value);
        let name = self.append(name);
        let value = self.append(value.trim_ascii());
        self.fields.push(FieldSpan { name, value });
    }

    fn end(&mut self) {
        self.measure.end();
    }
}
