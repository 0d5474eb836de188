//! Responses on an HTTP/3 request stream, as the exchange core writes them through the
//! client's codec (`client/codec.rs`, `Codec::H3`): the proxy's own replies (status pages,
//! redirects, local pages, stored responses whole or composed), relayed heads, interim
//! heads, body bytes and trailers, each QPACK-encoded or framed into the stream's bytes.
//! A stored body is not copied: its DATA frame's head is ours, its payload the cache's bytes
//! (`H3Codec::push_shared`), as HTTP/2 shares it.

use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use super::codec::H3Codec;
use crate::worker::h1::{LocalPage, Reply};
use crate::worker::h2_heads::{trailer_fields, RelayedFields};

type Pairs<'a> = Vec<(&'a [u8], &'a [u8])>;

/// A head on `stream`: HEADERS with `status` and `fields`. False when it cannot be sent
/// (over the peer's field section limit): the stream is then reset by the caller's end.
fn head(c: &mut H3Codec, stream: u32, status: u16, fields: &[(&[u8], &[u8])]) -> bool {
    let mut out = Vec::with_capacity(128);
    // Alt-Svc advertises this very service to TCP clients (`h3_alt_svc`): not repeated here.
    let kept: Pairs = fields
        .iter()
        .copied()
        .filter(|(n, _)| *n != b"alt-svc")
        .collect();
    if c.h3.send_headers(&mut out, status, &kept).is_err() {
        return false;
    }
    c.push(stream, out);
    true
}

/// Body bytes on `stream` as one DATA frame.
pub fn data(c: &mut H3Codec, stream: u32, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let mut out = Vec::with_capacity(bytes.len() + 9);
    h3::write::data(&mut out, bytes);
    c.push(stream, out);
}

/// `range` of a stored body on `stream` as one DATA frame, the payload shared with the
/// cache entry (held by quinn-proto until the client acknowledges it).
fn shared_data(c: &mut H3Codec, stream: u32, body: &Arc<[u8]>, range: Range<usize>) {
    if range.is_empty() || body.get(range.clone()).is_none() {
        return;
    }
    let mut head = Vec::with_capacity(9);
    h3::write::data_head(&mut head, range.len() as u64);
    c.push(stream, head);
    c.push_shared(stream, Bytes::from_owner(body.clone()).slice(range));
}

/// A reply of the proxy's own on `stream`; returns the body bytes.
pub fn reply(c: &mut H3Codec, stream: u32, reply: &Reply<'_>, date: &str, head_only: bool) -> u64 {
    let status = reply.status();
    let sent = match reply {
        Reply::Status(status) if *status != 200 && !http1::error_body_is_empty(*status) => {
            let page = format!("{} {}\n", status, http1::reason_phrase(*status));
            let page = LocalPage {
                status: *status,
                fields: &[(b"content-type", b"text/plain")],
                body: page.as_bytes(),
            };
            local(c, stream, &page, date, head_only)
        }
        Reply::Status(_) => {
            head(
                c,
                stream,
                status,
                &[(b"server", b"ktls-proxy"), (b"content-length", b"0")],
            );
            0
        }
        Reply::Redirect { location, .. } => {
            let fields: [(&[u8], &[u8]); 4] = [
                (b"location", location.as_bytes()),
                (b"content-length", b"0"),
                (b"date", date.as_bytes()),
                (b"server", b"ktls-proxy"),
            ];
            head(c, stream, status, &fields);
            0
        }
        Reply::Local(page) => local(c, stream, page, date, head_only),
        Reply::Stored { entry, answer } => stored(c, stream, entry, answer),
    };
    c.end(stream);
    sent
}

fn local(c: &mut H3Codec, stream: u32, page: &LocalPage<'_>, date: &str, head_only: bool) -> u64 {
    let len = page.body.len().to_string();
    let mut fields: Pairs = page.fields.to_vec();
    fields.extend_from_slice(&[
        (b"content-length", len.as_bytes()),
        (b"date", date.as_bytes()),
        (b"server", b"ktls-proxy"),
    ]);
    if !head(c, stream, page.status, &fields) || head_only {
        return 0;
    }
    data(c, stream, page.body);
    page.body.len() as u64
}

/// A stored response, or what the cache composes from it (206, 412, 416).
fn stored(
    c: &mut H3Codec,
    stream: u32,
    entry: &std::sync::Arc<cache::Entry>,
    answer: &cache::Answer,
) -> u64 {
    let mut digits = [0u8; 20];
    let age = entry.age_value(SystemTime::now(), &mut digits).to_vec();
    let lower = |fields: &mut dyn Iterator<Item = (&[u8], &[u8])>| -> Vec<(Vec<u8>, Vec<u8>)> {
        fields
            .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
            .collect()
    };
    match entry.reply(answer) {
        cache::Reply::Stored(kind) => {
            let (_, body) = entry.reply_parts(kind);
            let body_len = body.len();
            let mut fields = lower(&mut entry.reply_fields(kind));
            fields.push((b"age".to_vec(), age));
            let pairs: Pairs = fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
            if !head(c, stream, entry.reply_status(kind), &pairs) {
                return 0;
            }
            // The body of a full reply is the entry's whole body (`reply_parts`).
            shared_data(c, stream, entry.body(), 0..body_len);
            body_len as u64
        }
        cache::Reply::Composed(composed) => {
            let mut fields = lower(&mut composed.fields());
            fields.push((b"age".to_vec(), age));
            let pairs: Pairs = fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
            if !head(c, stream, composed.status(), &pairs) {
                return 0;
            }
            for part in composed.body_parts() {
                match part {
                    cache::BodyPart::Stored(range) => {
                        shared_data(c, stream, entry.body(), range.clone())
                    }
                    cache::BodyPart::Owned(bytes) => data(c, stream, bytes),
                }
            }
            composed.body_len() as u64
        }
    }
}

/// A relayed final head (edits applied, hop-by-hop fields removed).
pub fn relayed_head(c: &mut H3Codec, stream: u32, fields: &RelayedFields) -> Result<(), ()> {
    match head(c, stream, fields.status(), &fields.relayable()) {
        true => Ok(()),
        false => Err(()),
    }
}

/// An interim head (1xx, not 101) as the upstream reader parsed it.
pub fn interim(c: &mut H3Codec, stream: u32, parsed: &http1::ResponseHead, input: &[u8]) -> bool {
    let fields: Vec<(Vec<u8>, Vec<u8>)> = (parsed.headers().fields(input))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
        .filter(|(n, _)| n != b"connection" && n != b"keep-alive")
        .collect();
    let pairs: Pairs = fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
    head(c, stream, parsed.status(), &pairs)
}

/// A relayed chunked body's trailer section: its end-to-end fields as trailing HEADERS.
pub fn trailers(c: &mut H3Codec, stream: u32, section: &[u8]) {
    fields_as_trailers(c, stream, &trailer_fields(section));
}

/// End-to-end trailer fields (an h2 origin's, decoded) as trailing HEADERS.
pub fn fields_as_trailers(c: &mut H3Codec, stream: u32, fields: &[(Vec<u8>, Vec<u8>)]) {
    if fields.is_empty() {
        return;
    }
    let pairs: Pairs = fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
    let mut out = Vec::new();
    if c.h3.send_trailers(&mut out, &pairs).is_ok() {
        c.push(stream, out);
    }
}

/// The proxy's own `100 Continue` (`Expect: 100-continue`).
pub fn continue_100(c: &mut H3Codec, stream: u32) -> bool {
    head(c, stream, 100, &[])
}
