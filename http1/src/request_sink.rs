//! A forwarded request head as a sequence of pieces (method and target, then each field in
//! order, then the framing and the Connection option) handed to a [`RequestSink`], so that
//! the proxy decides once what an upstream request carries (hop-by-hop fields dropped,
//! X-Forwarded-For, X-Forwarded-Proto, Via, configured edits, the framing) and each protocol
//! only renders it: [`RequestText`] as HTTP/1.1 (what
//! [`write_request_head`](crate::write_request_head) sends), an HTTP/2 codec as HEADERS.
//! [`RequestMeasure`] sizes the head as HTTP/1.1 text, the limits' one measure on either
//! protocol.

use crate::byteset::FIELD_VALUE;
use crate::fields::list_elements;
use crate::message::BodyFraming;
use crate::request::{RequestHead, TargetForm};
use crate::sink::HeadMeasure;
use crate::span::HeaderSpans;
use crate::write::{is_managed, named_by_connection, ConnectionOption, Forwarding};

/// Where the pieces of a forwarded request head go, in this order: [`RequestSink::start`];
/// fields ([`RequestSink::field`], or a joined one from [`RequestSink::value_start`],
/// [`RequestSink::value_part`]s and [`RequestSink::value_end`]); [`RequestSink::framing`];
/// [`RequestSink::connection`]; [`RequestSink::end`]. A `Host` field, when there is one, is
/// the request's authority (HTTP/2's `:authority`).
pub trait RequestSink {
    /// The method and the target: the origin-form path (an absolute-form target's path), or
    /// `*`.
    fn start(&mut self, method: &[u8], target: &[u8]);
    /// One field, name as received (any case).
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// A field whose value follows in parts (earlier values joined with the proxy's own).
    fn value_start(&mut self, name: &[u8]);
    fn value_part(&mut self, part: &[u8]);
    fn value_end(&mut self);
    /// The client said it accepts trailers (`TE: trailers`). TE is hop-by-hop: HTTP/1.1
    /// drops it (its `Connection: TE` would have to come with it); HTTP/2 carries exactly
    /// this value (RFC 9113 §8.2.2), which gRPC servers require.
    fn te_trailers(&mut self) {}
    /// The framing of the body that follows.
    fn framing(&mut self, framing: BodyFraming);
    /// The Connection option.
    fn connection(&mut self, connection: ConnectionOption);
    /// The head is complete.
    fn end(&mut self);
}

/// Both sinks get every piece.
impl<A: RequestSink, B: RequestSink> RequestSink for (A, B) {
    fn start(&mut self, method: &[u8], target: &[u8]) {
        self.0.start(method, target);
        self.1.start(method, target);
    }
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.0.field(name, value);
        self.1.field(name, value);
    }
    fn value_start(&mut self, name: &[u8]) {
        self.0.value_start(name);
        self.1.value_start(name);
    }
    fn value_part(&mut self, part: &[u8]) {
        self.0.value_part(part);
        self.1.value_part(part);
    }
    fn value_end(&mut self) {
        self.0.value_end();
        self.1.value_end();
    }
    fn te_trailers(&mut self) {
        self.0.te_trailers();
        self.1.te_trailers();
    }
    fn framing(&mut self, framing: BodyFraming) {
        self.0.framing(framing);
        self.1.framing(framing);
    }
    fn connection(&mut self, connection: ConnectionOption) {
        self.0.connection(connection);
        self.1.connection(connection);
    }
    fn end(&mut self) {
        self.0.end();
        self.1.end();
    }
}

/// The pieces rendered as HTTP/1.1 text, appended to a caller-owned buffer.
pub struct RequestText<'a> {
    pub out: &'a mut Vec<u8>,
}

impl RequestSink for RequestText<'_> {
    #[inline]
    fn start(&mut self, method: &[u8], target: &[u8]) {
        self.out.extend_from_slice(method);
        self.out.push(b' ');
        self.out.extend_from_slice(target);
        self.out.extend_from_slice(b" HTTP/1.1\r\n");
    }
    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
    }
    #[inline]
    fn value_start(&mut self, name: &[u8]) {
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
    }
    #[inline]
    fn value_part(&mut self, part: &[u8]) {
        self.out.extend_from_slice(part);
    }
    #[inline]
    fn value_end(&mut self) {
        self.out.extend_from_slice(b"\r\n");
    }
    #[inline]
    fn framing(&mut self, framing: BodyFraming) {
        crate::write::write_framing(self.out, framing);
    }
    #[inline]
    fn connection(&mut self, connection: ConnectionOption) {
        match connection {
            ConnectionOption::Default => {}
            ConnectionOption::KeepAlive => self.field(b"Connection", b"keep-alive"),
            ConnectionOption::Close => self.field(b"Connection", b"close"),
            ConnectionOption::UpgradeWebSocket => {
                self.field(b"Connection", b"upgrade");
                self.field(b"Upgrade", b"websocket");
            }
        }
    }
    #[inline]
    fn end(&mut self) {
        self.out.extend_from_slice(b"\r\n");
    }
}

/// The head's size as HTTP/1.1 text ([`RequestText`] would write this much), for another
/// rendering to be held to the same limits.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestMeasure {
    pub measure: HeadMeasure,
    /// The joined field being measured.
    open_line: usize,
}

impl RequestSink for RequestMeasure {
    fn start(&mut self, method: &[u8], target: &[u8]) {
        self.measure.bytes += method.len() + 1 + target.len() + " HTTP/1.1\r\n".len();
    }
    fn field(&mut self, name: &[u8], value: &[u8]) {
        let line = name.len() + 2 + value.len();
        self.measure.bytes += line + 2;
        self.measure.fields += 1;
        self.measure.longest_field = self.measure.longest_field.max(line);
    }
    fn value_start(&mut self, name: &[u8]) {
        self.open_line = name.len() + 2;
    }
    fn value_part(&mut self, part: &[u8]) {
        self.open_line += part.len();
    }
    fn value_end(&mut self) {
        let line = std::mem::take(&mut self.open_line);
        self.measure.bytes += line + 2;
        self.measure.fields += 1;
        self.measure.longest_field = self.measure.longest_field.max(line);
    }
    fn framing(&mut self, framing: BodyFraming) {
        match framing {
            BodyFraming::Length(n) => {
                let mut digits = [0u8; 20];
                let len = decimal_len(n, &mut digits);
                self.field(b"Content-Length", digits.get(..len).unwrap_or(&[]));
            }
            BodyFraming::Chunked => self.field(b"Transfer-Encoding", b"chunked"),
            BodyFraming::None | BodyFraming::CloseDelimited => {}
        }
    }
    fn connection(&mut self, connection: ConnectionOption) {
        match connection {
            ConnectionOption::Default => {}
            ConnectionOption::KeepAlive => self.field(b"Connection", b"keep-alive"),
            ConnectionOption::Close => self.field(b"Connection", b"close"),
            ConnectionOption::UpgradeWebSocket => {
                self.field(b"Connection", b"upgrade");
                self.field(b"Upgrade", b"websocket");
            }
        }
    }
    fn end(&mut self) {
        self.measure.bytes += 2;
    }
}

/// `n` in decimal into `digits`, without an allocation; its length.
pub fn decimal_len(mut n: u64, digits: &mut [u8; 20]) -> usize {
    // Digits are produced backwards, then moved to the front: u64::MAX has 20.
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || start == 0 {
            break;
        }
    }
    digits.copy_within(start.., 0);
    digits.len() - start
}

/// Hands the head to send upstream for `head` (parsed from or built over `buf`) to `sink`:
/// method and target; Host (from an absolute-form target, or empty for an HTTP/1.0 request
/// without one); the end-to-end fields (hop-by-hop ones, those the Connection field names and
/// those the edits replace dropped); X-Forwarded-For with the client appended; the proxy's
/// X-Forwarded-Proto; Via with the proxy's pseudonym appended; the configured edits; the
/// framing; the Connection option. Where the pieces go does not change what they are.
pub fn forward_request_fields<S: RequestSink>(
    sink: &mut S,
    head: &RequestHead,
    buf: &[u8],
    forwarding: &Forwarding<'_>,
) {
    let target: &[u8] = match head.target_form() {
        TargetForm::Asterisk => b"*",
        TargetForm::Origin | TargetForm::Absolute => head.path(buf),
    };
    sink.start(head.method_bytes(buf), target);
    let host_from_target = head.host_from_target();
    // HTTP/1.1 requires Host: from an absolute-form target it replaces the received field;
    // an HTTP/1.0 request without any gets an empty one (RFC 9112 §3.2: the authority is
    // unknown).
    if host_from_target || head.host(buf).is_none() {
        own_field(sink, b"Host", head.host(buf).unwrap_or(&[]));
    }
    let copy = CopyRules {
        connection_names_fields: head.connection_names_fields(),
        drop_host: host_from_target,
        forwarded_for: forwarding.forwarded_for.is_some(),
        forwarded_proto: forwarding.forwarded_proto.is_some(),
        via: forwarding.via.is_some(),
    };
    let held = copy_fields(sink, buf, head.headers(), &copy, forwarding.edits);
    if held.te_trailers {
        sink.te_trailers();
    }
    if let Some(client) = forwarding.forwarded_for {
        let earlier = held.forwarded_for.then_some(head.headers());
        joined(
            sink,
            buf,
            earlier,
            (b"X-Forwarded-For", "x-forwarded-for"),
            b"",
            client,
        );
    }
    if let Some(scheme) = forwarding.forwarded_proto {
        own_field(sink, b"X-Forwarded-Proto", scheme);
    }
    if let Some(pseudonym) = forwarding.via {
        let earlier = held.via.then_some(head.headers());
        joined(sink, buf, earlier, (b"Via", "via"), b"1.1 ", pseudonym);
    }
    for (name, value) in forwarding.edits.fields() {
        own_field(sink, name, value);
    }
    sink.framing(forwarding.framing);
    sink.connection(forwarding.connection);
    sink.end();
}

/// A field of the proxy's own: a value with CR or LF is sent empty rather than let it split
/// the head (configuration edits were validated already).
#[inline]
fn own_field<S: RequestSink>(sink: &mut S, name: &[u8], value: &[u8]) {
    let value = if FIELD_VALUE.contains_all(value) {
        value
    } else {
        &[]
    };
    sink.field(name, value);
}

/// Which received fields are not copied as they are.
struct CopyRules {
    connection_names_fields: bool,
    drop_host: bool,
    forwarded_for: bool,
    /// The received X-Forwarded-Proto is dropped: the writer sets its own.
    forwarded_proto: bool,
    via: bool,
}

/// Which merged fields were held back by [`copy_fields`], and whether the client accepts
/// trailers.
#[derive(Default)]
struct HeldBack {
    forwarded_for: bool,
    via: bool,
    te_trailers: bool,
}

fn copy_fields<S: RequestSink>(
    sink: &mut S,
    buf: &[u8],
    fields: &HeaderSpans,
    rules: &CopyRules,
    edits: &crate::write::HeaderEdits,
) -> HeldBack {
    let mut held = HeldBack::default();
    for (name, value) in fields.fields(buf) {
        if rules.forwarded_for && name.eq_ignore_ascii_case(b"x-forwarded-for") {
            held.forwarded_for = true;
            continue;
        }
        if rules.via && name.eq_ignore_ascii_case(b"via") {
            held.via = true;
            continue;
        }
        if is_managed(name) {
            if name.len() == 2 && name.eq_ignore_ascii_case(b"te") {
                held.te_trailers |=
                    list_elements(value).any(|e| e.eq_ignore_ascii_case(b"trailers"));
            }
            continue;
        }
        let skip = (rules.forwarded_proto && name.eq_ignore_ascii_case(b"x-forwarded-proto"))
            || (rules.drop_host && name.eq_ignore_ascii_case(b"host"))
            || (rules.connection_names_fields && named_by_connection(buf, fields, name))
            || (!edits.is_empty() && edits.replaces(name));
        if !skip {
            sink.field(name, value);
        }
    }
    held
}

/// One field holding every received value of `name` (when `earlier` holds some),
/// comma-joined, then `prefix` + `own`.
fn joined<S: RequestSink>(
    sink: &mut S,
    buf: &[u8],
    earlier: Option<&HeaderSpans>,
    (name, lower): (&[u8], &str),
    prefix: &[u8],
    own: &[u8],
) {
    sink.value_start(name);
    if let Some(fields) = earlier {
        for value in fields.get_all(buf, lower) {
            if !value.is_empty() {
                sink.value_part(value);
                sink.value_part(b", ");
            }
        }
    }
    sink.value_part(prefix);
    if FIELD_VALUE.contains_all(own) {
        sink.value_part(own);
    }
    sink.value_end();
}
