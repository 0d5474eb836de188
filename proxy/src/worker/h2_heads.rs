//! The field lists of the HEADERS an HTTP/2 client gets for what an HTTP/1.1 upstream sent
//! or the cache stored: a relayed response head (its pieces, as the upstream reader parsed
//! them with the proxy's edits, collected by [`RelayedFields`]), a stored or composed reply (from the cache's status and
//! fields, no HTTP/1 text), an interim (1xx) head (as the upstream reader parsed it), and
//! the trailer section of a chunked body. HTTP/2 names are
//! lowercase and a message carries no connection-specific field (RFC 9113 §8.2); a trailer
//! section also loses the fields RFC 9110 §6.5.1 says cannot be trailers.

use super::h2::H2Codec;

/// A field list for the `h2` crate's senders, owning its bytes.
pub type FieldList = Vec<(Vec<u8>, Vec<u8>)>;

/// Fields an HTTP/2 message must not carry (RFC 9113 §8.2.2). `te` is allowed in a request
/// with `trailers` only; in a response it means nothing.
fn is_connection_specific(name: &[u8]) -> bool {
    matches!(
        name,
        b"connection"
            | b"keep-alive"
            | b"proxy-connection"
            | b"transfer-encoding"
            | b"upgrade"
            | b"te"
    )
}

/// Response trailer fields not relayed to an HTTP/2 client: besides the connection-specific
/// ones, what RFC 9110 §6.5.1 lists as needed before the content or as controlling the
/// message: framing, routing, request modifiers, authentication (cookies among them),
/// response control data and how to process the content. A client must not get through a
/// trailer what a response head would have said differently (a later `content-type`, a
/// `set-cookie` the cache never saw).
const NOT_RELAYED_TRAILERS: &[&[u8]] = &[
    b"age",
    b"authorization",
    b"cache-control",
    b"content-encoding",
    b"content-length",
    b"content-range",
    b"content-type",
    b"cookie",
    b"date",
    b"expect",
    b"expires",
    b"host",
    b"location",
    b"max-forwards",
    b"pragma",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"range",
    b"retry-after",
    b"set-cookie",
    b"trailer",
    b"vary",
    b"warning",
    b"www-authenticate",
];

/// Whether a response trailer field named `name` (lowercase) reaches an HTTP/2 client.
fn trailer_relayed(name: &[u8]) -> bool {
    let conditional = name.starts_with(b"if-");
    !is_connection_specific(name) && !conditional && !NOT_RELAYED_TRAILERS.contains(&name)
}

#[cfg(test)]
/// The status and the HTTP/2 field list of an HTTP/1-form response head, as a relayed head
/// was rendered and parsed back before issue 31: the oracle of the differential tests. None
/// when it does not parse.
pub fn head_fields(h1_head: &[u8]) -> Option<(u16, FieldList)> {
    let limits = http1::Limits {
        max_head_bytes: h1_head.len().max(1),
        max_headers: 1024,
        max_field_bytes: h1_head.len().max(1),
        ..http1::Limits::default()
    };
    let Ok(Some((head, _))) = http1::parse_response(h1_head, &limits, false) else {
        return None;
    };
    Some((head.status(), relayable_fields(&head, h1_head)))
}

/// The HTTP/2 field list of a parsed response head: names lowercased, without the
/// connection-specific fields and those `Connection` names.
fn relayable_fields(head: &http1::ResponseHead, buf: &[u8]) -> FieldList {
    let all: FieldList = head
        .headers()
        .fields(buf)
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_vec()))
        .collect();
    let named = connection_options(all.iter().map(|(n, v)| (&n[..], &v[..])));
    all.into_iter()
        .filter(|(name, _)| !is_connection_specific(name) && !named.contains(name))
        .collect()
}

/// The options of the `Connection` fields among `fields` (lowercase names), lowercased: the
/// fields they name are hop-by-hop too (RFC 9110 §7.6.1). The writer removed those of the
/// origin's head from a relayed final head (its own `Connection: close` can still name one);
/// an interim head comes as received.
fn connection_options<'f>(fields: impl Iterator<Item = (&'f [u8], &'f [u8])>) -> Vec<Vec<u8>> {
    fields
        .filter(|(name, _)| *name == b"connection")
        .flat_map(|(_, value)| value.split(|&b| b == b','))
        .map(|option| option.trim_ascii().to_ascii_lowercase())
        .collect()
}

/// The HEADERS of a relayed final response head, collected from its pieces as the upstream
/// reader parsed them with the proxy's edits (`h1::relayed_head_fields`), no HTTP/1 text in
/// between: names lowercased, values as a recipient parses them, all in one buffer.
#[derive(Default)]
pub struct RelayedFields {
    status: u16,
    buf: Vec<u8>,
    fields: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
}

impl http1::FieldSink for RelayedFields {
    fn status(&mut self, status: u16, _reason: &[u8]) {
        self.status = status;
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        let start = self.buf.len();
        self.buf.extend(name.iter().map(u8::to_ascii_lowercase));
        let name_end = self.buf.len();
        self.buf.extend_from_slice(value.trim_ascii());
        self.fields
            .push((start..name_end, name_end..self.buf.len()));
    }
}

impl RelayedFields {
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The fields an HTTP/2 client gets: without the connection-specific ones and those a
    /// `Connection` field names.
    pub fn relayable(&self) -> Vec<(&[u8], &[u8])> {
        let mut all: Vec<(&[u8], &[u8])> = self
            .fields
            .iter()
            .map(|(name, value)| {
                let at = |range: &std::ops::Range<usize>| {
                    self.buf.get(range.clone()).unwrap_or_default()
                };
                (at(name), at(value))
            })
            .collect();
        let named = connection_options(all.iter().copied());
        all.retain(|(name, _)| !is_connection_specific(name) && !named.iter().any(|n| n == name));
        all
    }
}

/// The fields of a validated chunked trailer section (`name: value\r\n` lines, as
/// `http1::ChunkedDecoder::trailer_section` keeps them) that an HTTP/2 client gets.
pub fn trailer_fields(section: &[u8]) -> FieldList {
    section
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let name = line.get(..colon)?.to_ascii_lowercase();
            let value = line.get(colon + 1..)?.trim_ascii();
            Some((name, value.to_vec()))
        })
        .filter(|(name, _)| trailer_relayed(name))
        .collect()
}

/// The trailers another codec decoded (an HTTP/2 origin's: lowercase names, checked
/// values) that an HTTP/2 or HTTP/3 client gets, as [`trailer_fields`] gives a section's.
pub fn decoded_trailer_fields(fields: &[h2::Field]) -> FieldList {
    fields
        .iter()
        .filter(|f| trailer_relayed(&f.name))
        .map(|f| (f.name.clone(), f.value.clone()))
        .collect()
}

/// The fields an HTTP/2 client gets of a head given as fields: the lowercase names end to
/// end in `names`, each kept field as its name's range there and its value;
/// connection-specific fields left out.
fn lowercase_fields<'f>(
    fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    names: &mut Vec<u8>,
) -> Vec<(std::ops::Range<usize>, &'f [u8])> {
    let mut kept = Vec::with_capacity(16);
    for (name, value) in fields {
        let start = names.len();
        names.extend(name.iter().map(u8::to_ascii_lowercase));
        if is_connection_specific(names.get(start..).unwrap_or_default()) {
            names.truncate(start);
            continue;
        }
        kept.push((start..names.len(), value));
    }
    kept
}

/// Borrowed pairs of `list`, as the `h2` crate's senders take them.
pub fn borrowed(list: &FieldList) -> Vec<(&[u8], &[u8])> {
    list.iter().map(|(n, v)| (&n[..], &v[..])).collect()
}

impl H2Codec {
    /// Sends a relayed final response head (its pieces collected in `head`: edits applied,
    /// hop-by-hop fields removed) as HEADERS, its body to follow.
    pub fn send_relayed_head(&mut self, stream: u32, head: &RelayedFields) -> Result<(), ()> {
        self.conn
            .send_headers(stream, head.status, &head.relayable(), false)
            .map_err(|_| ())
    }

    /// Sends a head of the cache's (a stored or composed reply: status and fields, the
    /// per-hit `age` last) as HEADERS, straight from its fields: names lowercased,
    /// connection-specific fields left out (the cache stores none), no HTTP/1 text on the way.
    pub fn send_stored_head<'f>(
        &mut self,
        stream: u32,
        status: u16,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        age: &[u8],
        end_stream: bool,
    ) -> Result<(), ()> {
        let mut names = Vec::with_capacity(256);
        let kept = lowercase_fields(fields, &mut names);
        let mut pairs: Vec<(&[u8], &[u8])> = kept
            .iter()
            .map(|(name, value)| (names.get(name.clone()).unwrap_or_default(), *value))
            .collect();
        pairs.push((b"age", age));
        self.conn
            .send_headers(stream, status, &pairs, end_stream)
            .map_err(|_| ())
    }

    /// An upstream's interim head (1xx, not 101) on `stream`, before its final response, as
    /// the upstream reader parsed it from `input`. False when it could not be sent (it is then
    /// dropped: the final response follows).
    pub fn send_interim(&mut self, stream: u32, head: &http1::ResponseHead, input: &[u8]) -> bool {
        let fields = relayable_fields(head, input);
        self.conn
            .send_interim(stream, head.status(), &borrowed(&fields))
            .is_ok()
    }

    /// The proxy's own `100 Continue` on `stream` (`Expect: 100-continue`).
    pub fn send_continue(&mut self, stream: u32) -> bool {
        self.conn.send_interim(stream, 100, &[]).is_ok()
    }

    /// The trailer section of `stream`'s relayed chunked body: its relayable fields go out
    /// as the final HEADERS (with END_STREAM) once the body has; none left, nothing changes.
    pub fn relay_trailers(&mut self, stream: u32, section: &[u8]) {
        let fields = trailer_fields(section);
        if !fields.is_empty() {
            self.set_trailers(stream, fields);
        }
    }
}

#[cfg(test)]
#[path = "h2_stored_tests.rs"]
mod stored_tests;

#[cfg(test)]
#[path = "h2_relayed_tests.rs"]
mod relayed_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &FieldList) -> Vec<String> {
        list.iter()
            .map(|(n, v)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(n),
                    String::from_utf8_lossy(v)
                )
            })
            .collect()
    }

    #[test]
    fn trailers_keep_end_to_end_fields_only() {
        let section = b"X-Checksum: abc \r\nGrpc-Status:0\r\nContent-Length: 5\r\n\
            Connection: close\r\nSet-Cookie: s=1\r\nIf-Match: *\r\nTransfer-Encoding: gzip\r\n\
            Content-Type: text/html\r\nTE: trailers\r\nServer-Timing: db;dur=53\r\n";
        assert_eq!(
            names(&trailer_fields(section)),
            ["x-checksum=abc", "grpc-status=0", "server-timing=db;dur=53"]
        );
        assert!(trailer_fields(b"").is_empty());
    }

    #[test]
    fn heads_lose_connection_specific_fields_and_get_lowercase_names() {
        let head = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\
            Connection: x-hop\r\nKeep-Alive: 5\r\nX-Hop: 1\r\n\r\n";
        let (status, fields) = head_fields(head).unwrap();
        assert_eq!(status, 103);
        assert_eq!(names(&fields), ["link=</a.css>; rel=preload"]);
        assert!(head_fields(b"not a head\r\n\r\n").is_none());
    }

    #[test]
    fn an_interim_head_as_parsed_gives_the_fields_of_its_bytes_parsed_again() {
        let heads: [&[u8]; 3] = [
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\
              Connection: x-hop, Keep-Alive\r\nKeep-Alive: 5\r\nX-Hop: 1\r\nX-Kept: A\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"HTTP/1.1 102 Processing\r\nUpgrade: h2c\r\nTE: x\r\nLink: <b>\r\nLink: <c>\r\n\r\n",
        ];
        for raw in heads {
            let (head, _) = http1::parse_response(raw, &http1::Limits::default(), false)
                .unwrap()
                .unwrap();
            let again = head_fields(raw).unwrap();
            assert_eq!((head.status(), relayable_fields(&head, raw)), again);
        }
    }
}
