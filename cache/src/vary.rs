//! Vary (RFC 9111 §4.1): the request fields a stored response varies on,
//! kept normalised at store time, and matching a later request against them.

use crate::headers::{self, HeaderPair};
use crate::message::{Request, Response};

/// One `Vary`-named request field and the normalised value it had when the
/// response was stored (`None`: the request did not carry it).
#[derive(Debug)]
pub(crate) struct VaryField {
    pub(crate) name: Box<str>,
    pub(crate) value: Option<Box<[u8]>>,
}

/// Whether `req_headers` carry the same values for every stored field:
/// case-insensitive names, list elements compared after trimming, over all
/// of a field's lines; the values of [`CASELESS_VALUES`] without case. A
/// field the stored request lacked must be absent.
pub(crate) fn matches<H: HeaderPair>(fields: &[VaryField], req_headers: &[H]) -> bool {
    fields.iter().all(|field| match &field.value {
        None => !headers::has(req_headers, &field.name),
        Some(stored) => {
            let caseless = caseless_values(field.name.as_bytes());
            let same = |a: &[u8], b: &[u8]| {
                if caseless {
                    a.eq_ignore_ascii_case(b)
                } else {
                    a == b
                }
            };
            let mut theirs = headers::list_elements(req_headers, &field.name);
            // The stored elements are separated by LF, which no field value can hold: split
            // again as lists, an element with an unclosed quote would swallow the commas of
            // the elements after it, and `"x` + `y` would match a single `"x,y`.
            let mut ours = stored
                .split(|&b| b == ELEMENT_SEPARATOR)
                .filter(|e| !e.is_empty());
            headers::has(req_headers, &field.name)
                && loop {
                    match (ours.next(), theirs.next()) {
                        (None, None) => break true,
                        (Some(a), Some(b)) if same(a, b) => {}
                        _ => break false,
                    }
                }
        }
    })
}

/// Request fields whose values compare without case when a stored response
/// varies on them (RFC 9111 §4.1 allows normalising): language ranges
/// (RFC 4647 §2), content-codings (RFC 9110 §8.4.1) and charsets
/// (RFC 9110 §8.3.2). Their order is kept: an origin may read it as a
/// preference (RFC 9110 §12.5.4), so `en, de` and `de, en` stay apart.
const CASELESS_VALUES: [&str; 3] = ["accept-language", "accept-encoding", "accept-charset"];

fn caseless_values(name: &[u8]) -> bool {
    CASELESS_VALUES
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
}

/// Between the stored elements of a field: LF, which a field value never holds (both
/// request parsers refuse it), unlike the comma, which a quoted string may.
const ELEMENT_SEPARATOR: u8 = b'\n';

/// Request field values named by Vary, normalised to trimmed list elements
/// joined by [`ELEMENT_SEPARATOR`] (lower case for [`CASELESS_VALUES`]); `None`
/// if the request lacks the field.
fn normalised_value<H: HeaderPair>(req_headers: &[H], name: &[u8]) -> Option<Box<[u8]>> {
    let name = std::str::from_utf8(name).ok()?;
    if !headers::has(req_headers, name) {
        return None;
    }
    let mut out = Vec::new();
    for (i, element) in headers::list_elements(req_headers, name).enumerate() {
        if i > 0 {
            out.push(ELEMENT_SEPARATOR);
        }
        out.extend_from_slice(element);
    }
    if caseless_values(name.as_bytes()) {
        out.make_ascii_lowercase();
    }
    Some(out.into())
}

/// The request's values of the fields the response's Vary names.
pub(crate) fn vary_fields<Q: HeaderPair, R: HeaderPair>(
    req: &Request<'_, Q>,
    resp: &Response<'_, R>,
) -> Box<[VaryField]> {
    headers::list_elements(resp.headers, "vary")
        .map(|name| VaryField {
            name: String::from_utf8_lossy(name).to_ascii_lowercase().into(),
            value: normalised_value(req.headers, name),
        })
        .collect()
}
