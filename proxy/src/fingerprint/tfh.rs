//! `tfh`, Tempesta's HTTP client fingerprint: 64 bits computed from a request head, laid
//! out as Tempesta's `HttpTfh` in memory on x86-64:
//!
//! | bits  | field |
//! |-------|-------|
//! | 0-5   | 0 (padding) |
//! | 6     | a Referer field is present |
//! | 7-12  | the number of fields (63 and more: 63); over HTTP/2 the pseudo-headers count |
//! | 13-17 | the number of cookies, over every Cookie field (31 and more: 31) |
//! | 18-22 | the method, by Tempesta's numbering (`tfw_http_meth_t`) |
//! | 23    | HTTP/2 |
//! | 32-63 | the fields in order, `h = h * 11 + v` (u32, wrapping), where `v` is Tempesta's id of a field it knows by name and otherwise the first 4 bytes of the field, read as a little-endian number |
//!
//! "The first 4 bytes of the field" are those of the name, then (names shorter than 4
//! bytes) of what Tempesta stores after it: the `:` and the value over HTTP/1.1, the value
//! over HTTP/2.
//!
//! Differences from Tempesta, both from the proxy's protocol-neutral request head: over
//! HTTP/2 the pseudo-headers are hashed in the order RFC 9113 §8.3.1 lists them
//! (`:method`, `:scheme`, `:authority`, `:path`), not the client's, and a cookie split
//! into several fields counts as one field.

/// An HTTP fingerprint (Tempesta's `tfh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tfh(pub u64);

impl std::fmt::Display for Tfh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

const MAX_FIELDS: u64 = 63;
const MAX_COOKIES: u64 = 31;

/// Tempesta's ids of the pseudo-headers (`TFW_HTTP_HDR_H2_*`) in RFC 9113's order.
const PSEUDO_IDS: [u32; 4] = [0, 1, 2, 3];

/// Tempesta's id of a request field it parses by name (`tfw_http_hdr_t`), if any.
fn field_id(name: &[u8]) -> Option<u32> {
    const IDS: [(&str, u32); 15] = [
        ("host", 4),
        ("content-length", 5),
        ("content-type", 7),
        ("expect", 8),
        ("user-agent", 9),
        ("cookie", 10),
        ("referer", 11),
        ("if-none-match", 12),
        ("x-tempesta-cache", 13),
        ("connection", 15),
        ("x-forwarded-for", 17),
        ("forwarded", 18),
        ("keep-alive", 19),
        ("transfer-encoding", 20),
        ("upgrade", 22),
    ];
    IDS.iter()
        .find(|(known, _)| known.as_bytes().eq_ignore_ascii_case(name))
        .map(|&(_, id)| id)
}

/// Tempesta's number of a method (`tfw_http_meth_t`); 17 for one it does not know.
fn method_id(method: &[u8]) -> u64 {
    const METHODS: [&[u8]; 16] = [
        b"COPY",
        b"DELETE",
        b"GET",
        b"HEAD",
        b"LOCK",
        b"MKCOL",
        b"MOVE",
        b"OPTIONS",
        b"PATCH",
        b"POST",
        b"PROPFIND",
        b"PROPPATCH",
        b"PUT",
        b"TRACE",
        b"UNLOCK",
        b"PURGE",
    ];
    METHODS
        .iter()
        .position(|m| *m == method)
        .map_or(17, |i| i as u64 + 1)
}

/// The first 4 bytes of a field as Tempesta stores it, little-endian.
fn raw_field_value(name: &[u8], value: &[u8], h2: bool) -> u32 {
    let separator: &[u8] = if h2 { b"" } else { b":" };
    let mut bytes = [0u8; 4];
    for (slot, byte) in bytes
        .iter_mut()
        .zip(name.iter().chain(separator).chain(value))
    {
        *slot = *byte;
    }
    u32::from_le_bytes(bytes)
}

/// The number of `name=value` pairs of a Cookie field's value.
fn cookies_in(value: &[u8]) -> u64 {
    value
        .split(|&b| b == b';')
        .filter(|pair| pair.iter().any(|b| !b.is_ascii_whitespace()))
        .count() as u64
}

/// A request head, as the fingerprint reads it.
#[derive(Debug, Clone, Copy)]
pub struct RequestShape<'a, F> {
    pub method: &'a [u8],
    /// The request came over HTTP/2: `fields` start with the `host` field the proxy built
    /// from `:authority` (hashed as the pseudo-headers instead).
    pub h2: bool,
    pub fields: F,
}

impl Tfh {
    /// The fingerprint of a request head.
    pub fn of<'a, F>(shape: RequestShape<'a, F>) -> Tfh
    where
        F: Iterator<Item = (&'a [u8], &'a [u8])>,
    {
        let mut sum = 0u32;
        let mut fields = 0u64;
        let mut cookies = 0u64;
        let mut referer = false;
        let step = |sum: &mut u32, v: u32| *sum = sum.wrapping_mul(11).wrapping_add(v);
        if shape.h2 {
            for id in PSEUDO_IDS {
                step(&mut sum, id);
            }
            fields += PSEUDO_IDS.len() as u64;
        }
        for (name, value) in shape.fields.skip(usize::from(shape.h2)) {
            fields += 1;
            let id = field_id(name);
            match id {
                Some(10) => cookies += cookies_in(value),
                Some(11) => referer = true,
                _ => {}
            }
            let v = id.unwrap_or_else(|| raw_field_value(name, value, shape.h2));
            step(&mut sum, v);
        }
        let low = u64::from(referer) << 6
            | fields.min(MAX_FIELDS) << 7
            | cookies.min(MAX_COOKIES) << 13
            | method_id(shape.method) << 18
            | u64::from(shape.h2) << 23;
        Tfh(low | u64::from(sum) << 32)
    }
}

#[cfg(test)]
#[path = "tfh_tests.rs"]
mod tests;
