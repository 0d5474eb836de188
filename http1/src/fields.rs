//! Facts derived from the header fields, computed in one pass for both
//! roles: framing (Content-Length, Transfer-Encoding), Connection options,
//! Host, Expect and Upgrade; plus the per-field limits. The same pass
//! remembers where the few fields the proxy reads for every request are
//! (Content-Type, a method override, X-Forwarded-For), so that nothing scans the list by name
//! again on the request path.

use crate::byteset::{AUTHORITY, TCHAR};
use crate::error::ParseError;
use crate::limits::Limits;
use crate::span::{FieldSpan, HeaderSpans, Span};
use crate::{forwarded, forwarded_for};

/// Fields that ask the server to treat a request as another method, most
/// preferred first: when several are present, the first of this list wins.
pub const METHOD_OVERRIDE_FIELDS: [&str; 3] = [
    "X-HTTP-Method-Override",
    "X-HTTP-Method",
    "X-Method-Override",
];

/// What Transfer-Encoding said, all fields of that name taken as one list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransferCoding {
    /// No Transfer-Encoding field.
    Absent,
    /// Exactly one coding, `chunked`.
    Chunked,
}

/// Everything the parsers need from the fields.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FieldFacts {
    pub content_length: Option<u64>,
    pub transfer_coding: TransferCoding,
    pub connection_close: bool,
    pub connection_keep_alive: bool,
    pub connection_upgrade: bool,
    /// Connection names a field other than the standard options, which
    /// the serialisers must then drop.
    pub connection_names_fields: bool,
    pub host: Option<Span>,
    pub expect_continue: bool,
    pub upgrade_field: bool,
    /// The first Content-Type field's value.
    pub content_type: Option<Span>,
    /// The first field of the most preferred name in
    /// [`METHOD_OVERRIDE_FIELDS`] that is present.
    pub method_override: Option<MethodOverride>,
    /// Method-override fields (of any of those names, or repeated) with
    /// different values: which one an origin obeys is unknown.
    pub method_override_conflict: bool,
    /// The first X-Forwarded-For field's value (its first node is the client's address).
    pub forwarded_for: Option<Span>,
    /// An X-Forwarded-For field is not a list of node names (crate::forwarded_for).
    pub forwarded_for_malformed: bool,
    /// A Forwarded field does not read as Tempesta reads it (crate::forwarded).
    pub forwarded_malformed: bool,
}

/// Where a method-override field's value is, and which of
/// [`METHOD_OVERRIDE_FIELDS`] named it (its index: lower is preferred).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MethodOverride {
    pub rank: usize,
    pub value: Span,
}

impl FieldFacts {
    /// Keeps `value` of the field named `METHOD_OVERRIDE_FIELDS[rank]` unless
    /// a field of a preferred (or the same) name came first.
    fn offer_method_override(&mut self, rank: usize, value: Span) {
        if self.method_override.is_none_or(|kept| rank < kept.rank) {
            self.method_override = Some(MethodOverride { rank, value });
        }
    }
}

/// The index in [`METHOD_OVERRIDE_FIELDS`] of the field named `name`.
fn method_override_rank(name: &[u8]) -> Option<usize> {
    METHOD_OVERRIDE_FIELDS
        .iter()
        .position(|known| name.eq_ignore_ascii_case(known.as_bytes()))
}

/// How a head's fields lie in its buffer, for the length of a field's line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldLayout {
    /// As received on an HTTP/1 connection: `name: value` lines, the line measured as sent.
    Lines,
    /// Name and value end to end (a head another codec decoded): the line measured as
    /// HTTP/1.1 writes it, `name: value`.
    Pairs,
}

/// Scans every field once: limits, configured byte set, then the fields
/// that matter for framing and routing.
pub(crate) fn scan(
    buf: &[u8],
    fields: &HeaderSpans,
    limits: &Limits,
    layout: FieldLayout,
) -> Result<FieldFacts, ParseError> {
    let mut facts = FieldFacts::NONE;
    let mut transfer_encoding = TransferEncodingList::default();
    for field in fields.iter() {
        check_field(buf, field, limits, layout)?;
        facts.record(buf, field, &mut transfer_encoding, limits)?;
    }
    facts.transfer_coding = transfer_encoding.finish()?;
    Ok(facts)
}

/// The per-field limits: the line's length and the configured byte set.
fn check_field(
    buf: &[u8],
    field: &FieldSpan,
    limits: &Limits,
    layout: FieldLayout,
) -> Result<(), ParseError> {
    let line_len = match layout {
        FieldLayout::Lines => field.value.end().saturating_sub(field.name.start()),
        FieldLayout::Pairs => field.name.len() + ": ".len() + field.value.len(),
    };
    check_line(line_len, field.value.get(buf), limits)
}

/// The limits of one field line of `line_len` bytes with `value`.
pub(crate) fn check_line(line_len: usize, value: &[u8], limits: &Limits) -> Result<(), ParseError> {
    if line_len > limits.max_field_bytes {
        return Err(ParseError::HeaderFieldTooLong);
    }
    if let Some(allowed) = &limits.header_value_bytes {
        if !allowed.contains_all(value) {
            return Err(ParseError::HeaderByteNotAllowed);
        }
    }
    Ok(())
}

impl FieldFacts {
    /// The facts of a head without fields.
    const NONE: FieldFacts = FieldFacts {
        content_length: None,
        transfer_coding: TransferCoding::Absent,
        connection_close: false,
        connection_keep_alive: false,
        connection_upgrade: false,
        connection_names_fields: false,
        host: None,
        expect_continue: false,
        upgrade_field: false,
        content_type: None,
        method_override: None,
        method_override_conflict: false,
        forwarded_for: None,
        forwarded_for_malformed: false,
        forwarded_malformed: false,
    };

    /// Takes in one field, if its name is one that matters; Transfer-Encoding
    /// goes to `transfer_encoding`, read once all fields are seen.
    fn record(
        &mut self,
        buf: &[u8],
        field: &FieldSpan,
        transfer_encoding: &mut TransferEncodingList,
        limits: &Limits,
    ) -> Result<(), ParseError> {
        let name = field.name.get(buf);
        let value = field.value.get(buf);
        // Dispatch on length first: most fields are none of these and
        // are rejected by one integer comparison.
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => self.record_host(field.value, value)?,
            6 if name.eq_ignore_ascii_case(b"expect") => {
                self.expect_continue |= value.eq_ignore_ascii_case(b"100-continue");
            }
            7 if name.eq_ignore_ascii_case(b"upgrade") => self.upgrade_field = true,
            10 if name.eq_ignore_ascii_case(b"connection") => self.record_connection(value),
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                self.record_content_length(value)?;
            }
            12 if name.eq_ignore_ascii_case(b"content-type") => {
                self.content_type = self.content_type.or(Some(field.value));
            }
            9 if name.eq_ignore_ascii_case(b"forwarded") => {
                let nodes = limits
                    .xff_bytes
                    .as_ref()
                    .unwrap_or(&forwarded_for::NODE_BYTES);
                self.forwarded_malformed |= !forwarded::is_valid(value, nodes);
            }
            15 if name.eq_ignore_ascii_case(b"x-forwarded-for") => {
                self.forwarded_for = self.forwarded_for.or(Some(field.value));
                let nodes = limits
                    .xff_bytes
                    .as_ref()
                    .unwrap_or(&forwarded_for::NODE_BYTES);
                self.forwarded_for_malformed |= !forwarded_for::is_node_list(value, nodes);
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                transfer_encoding.add(value)?;
            }
            // X-HTTP-Method (13), X-Method-Override (17), X-HTTP-Method-Override (22).
            13 | 17 | 22 => {
                if let Some(rank) = method_override_rank(name) {
                    self.record_method_override(buf, rank, field.value);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Host: exactly one, of authority bytes.
    fn record_host(&mut self, span: Span, value: &[u8]) -> Result<(), ParseError> {
        if self.host.is_some() {
            return Err(ParseError::DuplicateHost);
        }
        if !AUTHORITY.contains_all(value) {
            return Err(ParseError::InvalidHost);
        }
        self.host = Some(span);
        Ok(())
    }

    /// Connection: the standard options, and whether it names other fields.
    fn record_connection(&mut self, value: &[u8]) {
        for option in list_elements(value) {
            if option.eq_ignore_ascii_case(b"close") {
                self.connection_close = true;
            } else if option.eq_ignore_ascii_case(b"keep-alive") {
                self.connection_keep_alive = true;
            } else if option.eq_ignore_ascii_case(b"upgrade") {
                self.connection_upgrade = true;
            } else {
                self.connection_names_fields = true;
            }
        }
    }

    /// Content-Length: every element of every such field the same number.
    fn record_content_length(&mut self, value: &[u8]) -> Result<(), ParseError> {
        for element in value.split(|&b| b == b',') {
            let length = parse_decimal(element.trim_ascii())?;
            match self.content_length {
                Some(seen) if seen != length => return Err(ParseError::ConflictingContentLength),
                _ => self.content_length = Some(length),
            }
        }
        Ok(())
    }

    /// A method-override field of rank `rank`; values that differ are a conflict.
    fn record_method_override(&mut self, buf: &[u8], rank: usize, value: Span) {
        // The kept value is always one of those seen, so a value
        // unlike any before differs from it.
        if self
            .method_override
            .is_some_and(|kept| kept.value.get(buf) != value.get(buf))
        {
            self.method_override_conflict = true;
        }
        self.offer_method_override(rank, value);
    }
}

/// The non-empty, OWS-trimmed elements of a comma-separated list.
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(|e| e.trim_ascii())
        .filter(|e| !e.is_empty())
}

/// `1*DIGIT`, nothing else (no sign, no spaces, no hex), without overflow.
fn parse_decimal(digits: &[u8]) -> Result<u64, ParseError> {
    if digits.is_empty() {
        return Err(ParseError::InvalidContentLength);
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(ParseError::InvalidContentLength);
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or(ParseError::InvalidContentLength)?;
    }
    Ok(n)
}

/// Transfer-Encoding fields, concatenated in order as one list.
#[derive(Default)]
struct TransferEncodingList {
    present: bool,
    codings: usize,
    chunked_seen: usize,
    last_is_chunked: bool,
}

impl TransferEncodingList {
    fn add(&mut self, value: &[u8]) -> Result<(), ParseError> {
        self.present = true;
        for coding in list_elements(value) {
            if !TCHAR.contains_all(coding) {
                // Parameters (`;q=`) and garbage alike: nothing this proxy
                // can frame, and ambiguous to whoever is downstream.
                return Err(ParseError::InvalidTransferEncoding);
            }
            self.codings += 1;
            self.last_is_chunked = coding.eq_ignore_ascii_case(b"chunked");
            if self.last_is_chunked {
                self.chunked_seen += 1;
            }
        }
        Ok(())
    }

    /// RFC 9112 §6.3: a request whose final coding is not chunked has no
    /// reliable length (400). Chunked twice is nonsense (400). Any other
    /// coding, even before a final chunked, is not supported here (501):
    /// the serialisers re-frame bodies and would lose it.
    fn finish(&self) -> Result<TransferCoding, ParseError> {
        if !self.present {
            return Ok(TransferCoding::Absent);
        }
        if self.codings == 0 || !self.last_is_chunked || self.chunked_seen > 1 {
            return Err(ParseError::InvalidTransferEncoding);
        }
        if self.codings > 1 {
            return Err(ParseError::UnsupportedTransferCoding);
        }
        Ok(TransferCoding::Chunked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_is_strict() {
        assert_eq!(parse_decimal(b"0"), Ok(0));
        assert_eq!(parse_decimal(b"0012"), Ok(12));
        assert_eq!(parse_decimal(b"18446744073709551615"), Ok(u64::MAX));
        for bad in [
            &b""[..],
            b"+1",
            b"-1",
            b"1 ",
            b"0x10",
            b"18446744073709551616",
        ] {
            assert_eq!(parse_decimal(bad), Err(ParseError::InvalidContentLength));
        }
    }

    fn coding(values: &[&[u8]]) -> Result<TransferCoding, ParseError> {
        let mut list = TransferEncodingList::default();
        for v in values {
            list.add(v)?;
        }
        list.finish()
    }

    #[test]
    fn transfer_encoding_table() {
        assert_eq!(coding(&[b"chunked"]), Ok(TransferCoding::Chunked));
        assert_eq!(coding(&[b"Chunked "]), Ok(TransferCoding::Chunked));
        assert_eq!(
            coding(&[b"gzip, chunked"]),
            Err(ParseError::UnsupportedTransferCoding)
        );
        assert_eq!(
            coding(&[b"gzip", b"chunked"]),
            Err(ParseError::UnsupportedTransferCoding)
        );
        for bad in [
            &[&b"chunked, gzip"[..]][..],
            &[b"xchunked"],
            &[b"chunked, chunked"],
            &[b"chunked", b"chunked"],
            &[b""],
            &[b"chunked;q=1"],
            &[b"\"chunked\""],
        ] {
            assert_eq!(
                coding(bad),
                Err(ParseError::InvalidTransferEncoding),
                "{bad:?}"
            );
        }
    }
}
