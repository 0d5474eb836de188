//! A stored or composed reply reaches an HTTP/2 client from the cache's status and fields
//! (`send_stored_head`), no longer from its HTTP/1 head parsed back (`head_fields`, kept here
//! as the oracle): for entries stored from varied responses, every kind of reply gives the
//! same status and the same field list, Age included, either way.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cache::{Answer, ByteRange, ExchangeTimes, Policy, ReplyKind};

use super::{head_fields, lowercase_fields, FieldList};

type Pair = (&'static str, &'static str);

const RESPONSES: [&[Pair]; 5] = [
    &[
        ("Cache-Control", "max-age=60"),
        ("Content-Type", "text/plain"),
    ],
    &[
        ("Cache-Control", "public, max-age=600"),
        ("ETag", "\"v1\""),
        ("Last-Modified", "Sat, 05 Dec 2026 08:00:00 GMT"),
        ("Vary", "Accept-Encoding"),
        ("X-Upper-Case", "Kept As Sent"),
        ("X-Multi", "a=1"),
        ("X-Multi", "b=2"),
    ],
    &[
        ("Cache-Control", "max-age=60"),
        ("Connection", "x-hop"),
        ("X-Hop", "1"),
        ("Keep-Alive", "timeout=5"),
        ("Expires", "Sat, 05 Dec 2026 10:00:00 GMT"),
        ("Content-Location", "/c"),
        ("Age", "7"),
    ],
    &[
        ("Cache-Control", "max-age=60"),
        ("Date", "Sat, 05 Dec 2026 09:00:00 GMT"),
        ("Content-Length", "999"),
        ("Transfer-Encoding", "chunked"),
        ("TE", "trailers"),
        ("Upgrade", "h2c"),
    ],
    &[
        ("Cache-Control", "max-age=60"),
        ("X-Empty", ""),
        ("X-Obs", "caf\u{e9}"),
    ],
];

fn entry(fields: &[Pair], status: u16) -> Arc<cache::Entry> {
    let headers: Vec<(&[u8], &[u8])> = fields
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect();
    let request = cache::Request::<(&[u8], &[u8])> {
        vhost: "site",
        scheme: "https",
        authority: b"site",
        method: "GET",
        uri: b"/x",
        headers: &[],
    };
    let response = cache::Response {
        status,
        reason: b"",
        headers: &headers,
        body_len: 0,
    };
    let now = SystemTime::now() - Duration::from_secs(3);
    let times = ExchangeTimes {
        request_time: now,
        response_time: now,
    };
    let body: Arc<[u8]> = Arc::from(&b"0123456789"[..]);
    let built = cache::Entry::build(&Policy::default(), &request, &response, body, times);
    Arc::new(built.expect("storable"))
}

/// The former way: the HTTP/1 head and its Age chunk, parsed back.
fn rendered(h1_head: &mut Vec<u8>, entry: &cache::Entry, now: SystemTime) -> (u16, FieldList) {
    entry.write_age(now, h1_head);
    head_fields(h1_head).expect("a stored head parses")
}

/// The neutral way, as `send_stored_head` lists the fields.
fn neutral<'f>(
    status: u16,
    fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    age: &[u8],
) -> (u16, FieldList) {
    let mut names = Vec::new();
    let mut list: FieldList = lowercase_fields(fields, &mut names)
        .into_iter()
        .map(|(name, value)| (names[name].to_vec(), value.to_vec()))
        .collect();
    list.push((b"age".to_vec(), age.to_vec()));
    (status, list)
}

#[test]
fn stored_and_composed_heads_are_the_same_as_their_http1_rendering() {
    let now = SystemTime::now();
    for fields in RESPONSES {
        for status in [200, 203, 404] {
            let entry = entry(fields, status);
            let mut digits = [0u8; 20];
            let age = entry.age_value(now, &mut digits).to_vec();
            for kind in [ReplyKind::Full, ReplyKind::HeadOnly, ReplyKind::NotModified] {
                let mut h1 = entry.reply_parts(kind).0.to_vec();
                let old = rendered(&mut h1, &entry, now);
                let new = neutral(entry.reply_status(kind), entry.reply_fields(kind), &age);
                assert_eq!(old, new, "{status} {kind:?} {fields:?}");
            }
            let answers = [
                Answer::PreconditionFailed,
                Answer::RangeNotSatisfiable,
                Answer::Partial(vec![ByteRange { first: 2, last: 4 }]),
                Answer::Partial(vec![
                    ByteRange { first: 0, last: 1 },
                    ByteRange { first: 5, last: 9 },
                ]),
            ];
            for answer in answers {
                let cache::Reply::Composed(composed) = entry.reply(&answer) else {
                    panic!("{answer:?} is composed");
                };
                let mut h1 = Vec::new();
                composed.write_head(&mut h1);
                let old = rendered(&mut h1, &entry, now);
                let new = neutral(composed.status(), composed.fields(), &age);
                assert_eq!(old, new, "{status} {answer:?} {fields:?}");
            }
        }
    }
}
