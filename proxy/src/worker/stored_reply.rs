//! A stored entry's answer for HTTP/1.1 clients beyond the stored bytes themselves: the
//! 206 (one part or multipart/byteranges), 412 and 416 the cache composes per request, whose
//! selected bytes are queued as ranges of the shared stored body, never copied; and the
//! per-answer `Age` line.

use std::sync::Arc;
use std::time::SystemTime;

use super::h1::ReplyTo;
use crate::outbox::Outbox;

/// The status of a stored entry's answer (as `cache::Entry::reply` composes it).
pub(super) fn status(entry: &cache::Entry, answer: &cache::Answer) -> u16 {
    match answer {
        cache::Answer::Stored(cache::ReplyKind::NotModified) => 304,
        cache::Answer::PreconditionFailed => 412,
        cache::Answer::RangeNotSatisfiable => 416,
        cache::Answer::Partial(ranges) if !ranges.is_empty() => 206,
        cache::Answer::Stored(_) | cache::Answer::Partial(_) => entry.status(),
    }
}

/// A 206, 412 or 416 composed from a stored entry: its head, this client's connection
/// field and the Age, then its body parts, the selected ranges as slices of the shared body.
pub(super) fn write_composed(
    out: &mut Outbox,
    entry: &Arc<cache::Entry>,
    composed: &cache::ComposedReply<'_>,
    to: ReplyTo,
) -> u64 {
    let mut head = Vec::with_capacity(entry.head().len() + 64);
    composed.write_head(&mut head);
    out.push(&head);
    super::h1::write_connection(out, to);
    write_age(out, entry);
    for part in composed.body_parts() {
        match part {
            cache::BodyPart::Stored(range) => {
                out.push_shared_range(entry.body().clone(), range.clone())
            }
            cache::BodyPart::Owned(bytes) => out.push(bytes),
        }
    }
    composed.body_len() as u64
}

/// The per-answer `Age` line that ends a stored head, written from the stack: a hit
/// allocates nothing for its head.
#[inline]
pub(super) fn write_age(out: &mut Outbox, entry: &cache::Entry) {
    let mut age = [0u8; 40];
    let mut cursor = std::io::Cursor::new(&mut age[..]);
    entry.write_age(SystemTime::now(), &mut cursor);
    let len = cursor.position() as usize;
    out.push(age.get(..len).unwrap_or(&[]));
}
