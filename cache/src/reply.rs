//! Replies the cache composes from a stored entry for one request: 206
//! (single part or multipart/byteranges), 416 and 412 (RFC 9110 §14,
//! §15.3.7, §15.5.13, §15.5.17). They are data: a status, header fields
//! and body parts; the body parts that carry content are ranges of the
//! entry's shared body, never copies.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::conditional::Answer;
use crate::entry::{Entry, ReplyKind, NOT_MODIFIED_FIELDS};
use crate::message::standard_reason;
use crate::range::ByteRange;

/// How to send an [`Answer`].
#[derive(Debug)]
pub enum Reply<'e> {
    /// The stored bytes: [`Entry::reply_parts`] then [`Entry::write_age`].
    Stored(ReplyKind),
    /// A response composed for this request.
    Composed(ComposedReply<'e>),
}

/// One piece of a composed body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyPart {
    /// Bytes of the entry's body ([`Entry::body`]), shared: send
    /// `&entry.body()[range]` (or the `Arc` and the range) without copying.
    Stored(Range<usize>),
    /// Bytes composed for this reply (multipart delimiters and part heads).
    Owned(Box<[u8]>),
}

/// Which stored fields a composed reply repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repeat {
    /// All but Content-Length (single-part 206).
    AllButLength,
    /// All but Content-Length, Content-Type and Content-Range (multipart:
    /// §14.6 forbids Content-Range in the header section).
    AllButFraming,
    /// None (412, 416: not a representation of the entry).
    Nothing,
}

/// A 206, 412 or 416 built from an entry.
#[derive(Debug)]
pub struct ComposedReply<'e> {
    entry: &'e Entry,
    status: u16,
    repeat: Repeat,
    added: Vec<(&'static str, Vec<u8>)>,
    body: Vec<BodyPart>,
    body_len: usize,
}

impl Entry {
    /// The bytes for `answer` (from [`Entry::answer`]). Example for an
    /// HTTP/1 connection:
    /// `Reply::Stored(kind)` → `reply_parts(kind)` and the Age chunk;
    /// `Reply::Composed(r)` → `r.write_head(buf)`, the Age chunk, then each
    /// of `r.body_parts()` (a `Stored` range as a slice of the shared body).
    pub fn reply(&self, answer: &Answer) -> Reply<'_> {
        match answer {
            Answer::Stored(kind) => Reply::Stored(*kind),
            Answer::PreconditionFailed => Reply::Composed(self.empty_reply(412, Vec::new())),
            Answer::RangeNotSatisfiable => {
                let range = format!("bytes */{}", self.body().len()).into_bytes();
                Reply::Composed(self.empty_reply(416, vec![("Content-Range", range)]))
            }
            Answer::Partial(parts) => match parts.as_slice() {
                [] => Reply::Stored(ReplyKind::Full),
                [one] => Reply::Composed(self.single_part(*one)),
                many => Reply::Composed(self.multipart(many)),
            },
        }
    }

    fn empty_reply(
        &self,
        status: u16,
        mut added: Vec<(&'static str, Vec<u8>)>,
    ) -> ComposedReply<'_> {
        added.push(("Content-Length", b"0".to_vec()));
        ComposedReply {
            entry: self,
            status,
            repeat: Repeat::Nothing,
            added,
            body: Vec::new(),
            body_len: 0,
        }
    }

    fn single_part(&self, range: ByteRange) -> ComposedReply<'_> {
        let total = self.body().len();
        ComposedReply {
            entry: self,
            status: 206,
            repeat: Repeat::AllButLength,
            added: vec![
                ("Content-Range", content_range(range, total)),
                (
                    "Content-Length",
                    range.byte_count().to_string().into_bytes(),
                ),
            ],
            body: vec![BodyPart::Stored(range.as_slice_range())],
            body_len: range.byte_count(),
        }
    }

    /// multipart/byteranges (§14.6). The boundary is 64 bits from a keyed
    /// hash the client cannot predict, so a body cannot be made to contain
    /// it, and the selected bytes are not scanned for it (a scan would cost
    /// a pass over up to the whole body per request; the chance that a
    /// body holds it by accident is about its length / 2^64).
    fn multipart(&self, ranges: &[ByteRange]) -> ComposedReply<'_> {
        let body = self.body();
        let boundary = new_boundary();
        let content_type = self
            .fields()
            .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
            .map(|(_, v)| v);
        let mut parts = Vec::with_capacity(ranges.len() * 2 + 1);
        for (i, range) in ranges.iter().enumerate() {
            let mut head = Vec::with_capacity(96);
            if i > 0 {
                head.extend_from_slice(b"\r\n");
            }
            let _ = write!(head, "--{boundary}\r\n");
            if let Some(ct) = content_type {
                head.extend_from_slice(b"Content-Type: ");
                head.extend_from_slice(ct);
                head.extend_from_slice(b"\r\n");
            }
            head.extend_from_slice(b"Content-Range: ");
            head.extend_from_slice(&content_range(*range, body.len()));
            head.extend_from_slice(b"\r\n\r\n");
            parts.push(BodyPart::Owned(head.into()));
            parts.push(BodyPart::Stored(range.as_slice_range()));
        }
        parts.push(BodyPart::Owned(
            format!("\r\n--{boundary}--\r\n").into_bytes().into(),
        ));
        let body_len = parts
            .iter()
            .map(|p| match p {
                BodyPart::Stored(r) => r.len(),
                BodyPart::Owned(b) => b.len(),
            })
            .sum::<usize>();
        ComposedReply {
            entry: self,
            status: 206,
            repeat: Repeat::AllButFraming,
            added: vec![
                (
                    "Content-Type",
                    format!("multipart/byteranges; boundary={boundary}").into_bytes(),
                ),
                ("Content-Length", body_len.to_string().into_bytes()),
            ],
            body: parts,
            body_len,
        }
    }
}

impl Entry {
    /// The status of `kind`'s reply: the stored one, or 304.
    pub fn reply_status(&self, kind: ReplyKind) -> u16 {
        match kind {
            ReplyKind::Full | ReplyKind::HeadOnly => self.status(),
            ReplyKind::NotModified => 304,
        }
    }

    /// The header fields of `kind`'s reply in order, those [`Entry::reply_parts`]' head
    /// carries (Age excepted: per hit, [`Entry::age_value`]): codec-neutral, what an HTTP/2
    /// codec encodes.
    pub fn reply_fields(&self, kind: ReplyKind) -> impl Iterator<Item = (&[u8], &[u8])> {
        let not_modified = kind == ReplyKind::NotModified;
        self.fields()
            .filter(move |(name, _)| !not_modified || kept_in_not_modified(name))
    }
}

/// Whether a stored field named `name` is sent with a 304 (RFC 9110 §15.4.5).
pub(crate) fn kept_in_not_modified(name: &[u8]) -> bool {
    NOT_MODIFIED_FIELDS
        .iter()
        .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
}

impl<'e> ComposedReply<'e> {
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Header fields to send, in order (Age excepted: per hit, as for
    /// stored replies). Codec-neutral: an HTTP/2 codec encodes these.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let repeat = self.repeat;
        let stored = self
            .entry
            .fields()
            .filter(move |(name, _)| repeats(repeat, name));
        stored.chain(self.added.iter().map(|(n, v)| (n.as_bytes(), v.as_slice())))
    }

    /// The HTTP/1.1 status line and fields, each ending in CRLF, without the
    /// empty line (the Age chunk of [`Entry::write_age`] ends the head).
    pub fn write_head(&self, out: &mut Vec<u8>) {
        let _ = write!(
            out,
            "HTTP/1.1 {} {}\r\n",
            self.status,
            standard_reason(self.status)
        );
        for (name, value) in self.fields() {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }

    pub fn body_parts(&self) -> &[BodyPart] {
        &self.body
    }

    /// The bytes of one part (a slice of the entry's body, or owned bytes).
    pub fn part_bytes<'a>(&'a self, part: &'a BodyPart) -> &'a [u8] {
        match part {
            BodyPart::Stored(range) => self.entry.body().get(range.clone()).unwrap_or_default(),
            BodyPart::Owned(bytes) => bytes,
        }
    }

    /// Total body length (the Content-Length sent).
    pub fn body_len(&self) -> usize {
        self.body_len
    }

    /// The whole body, copied: for tests and logs, not the send path.
    pub fn body_to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body_len);
        for part in &self.body {
            out.extend_from_slice(self.part_bytes(part));
        }
        out
    }
}

fn repeats(repeat: Repeat, name: &[u8]) -> bool {
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    match repeat {
        Repeat::AllButLength => !is("content-length"),
        Repeat::AllButFraming => {
            !(is("content-length") || is("content-type") || is("content-range"))
        }
        Repeat::Nothing => false,
    }
}

fn content_range(range: ByteRange, total: usize) -> Vec<u8> {
    format!("bytes {}-{}/{}", range.first, range.last, total).into_bytes()
}

/// 16 hex digits from a per-process random key and a counter: unique per
/// reply, unpredictable to a client that would plant it in a body.
fn new_boundary() -> String {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = KEYS.get_or_init(RandomState::new).build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:016x}", hasher.finish())
}
