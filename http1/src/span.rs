//! Positions of parsed pieces inside the caller's buffer.
//!
//! Heads do not borrow the buffer they were parsed from: they hold
//! offsets, so the event loop can keep a head while it goes on reading into
//! (or past) the same buffer. Every accessor takes the buffer back; a span
//! that does not fit the buffer given yields an empty slice, never a panic.

use std::ops::Range;

/// A byte range of the buffer a head was parsed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// The empty span at offset 0.
    pub const EMPTY: Span = Span { start: 0, len: 0 };

    /// Offset of the first byte.
    pub fn start(&self) -> usize {
        self.start as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the span has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset one past the last byte.
    pub fn end(&self) -> usize {
        self.start().saturating_add(self.len())
    }

    /// The span as a range of offsets.
    pub fn range(&self) -> Range<usize> {
        self.start()..self.end()
    }

    /// The bytes of this span in `buf` (empty if `buf` is too short, which
    /// only happens when it is not the buffer the head was parsed from).
    #[inline]
    pub fn get<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        buf.get(self.range()).unwrap_or(&[])
    }

    /// The span of `part` inside `buf`, when `part` is a sub-slice of it.
    pub(crate) fn of(buf: &[u8], part: &[u8]) -> Option<Span> {
        let start = (part.as_ptr() as usize).checked_sub(buf.as_ptr() as usize)?;
        let end = start.checked_add(part.len())?;
        if end > buf.len() {
            return None;
        }
        Some(Span {
            start: u32::try_from(start).ok()?,
            len: u32::try_from(part.len()).ok()?,
        })
    }

    /// `len` bytes from `offset` bytes into this span, clamped to the span.
    /// `len` bytes from `start`, if both fit the span's width.
    pub(crate) fn at(start: usize, len: usize) -> Option<Span> {
        Some(Span {
            start: u32::try_from(start).ok()?,
            len: u32::try_from(len).ok()?,
        })
    }

    pub(crate) fn sub(&self, offset: usize, len: usize) -> Span {
        let offset = offset.min(self.len());
        let len = len.min(self.len() - offset);
        // Both fit in u32 because they are bounded by `self.len`.
        Span {
            start: self.start.saturating_add(offset as u32),
            len: len as u32,
        }
    }
}

/// One header field: where its name and its value are. The value has no
/// leading or trailing whitespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldSpan {
    /// The field name.
    pub name: Span,
    /// The field value.
    pub value: Span,
}

/// How many fields are kept inline before spilling to the heap: more than
/// a typical browser request carries, so those never allocate.
const INLINE_FIELDS: usize = 32;

/// The header fields of a head, in order, as spans.
#[derive(Clone)]
pub struct HeaderSpans {
    inline: [FieldSpan; INLINE_FIELDS],
    inline_len: usize,
    spill: Vec<FieldSpan>,
}

impl Default for HeaderSpans {
    fn default() -> Self {
        HeaderSpans {
            inline: [FieldSpan::default(); INLINE_FIELDS],
            inline_len: 0,
            spill: Vec::new(),
        }
    }
}

impl std::fmt::Debug for HeaderSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl HeaderSpans {
    #[inline]
    pub(crate) fn push(&mut self, field: FieldSpan) {
        match self.inline.get_mut(self.inline_len) {
            Some(slot) => {
                *slot = field;
                self.inline_len += 1;
            }
            None => self.spill.push(field),
        }
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.inline_len + self.spill.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fields' spans, in order.
    pub fn iter(&self) -> impl Iterator<Item = &FieldSpan> + Clone + '_ {
        self.inline
            .get(..self.inline_len)
            .unwrap_or(&[])
            .iter()
            .chain(self.spill.iter())
    }

    /// The fields as `(name, value)` byte slices of `buf`, in order.
    pub fn fields<'s, 'b: 's>(
        &'s self,
        buf: &'b [u8],
    ) -> impl Iterator<Item = (&'b [u8], &'b [u8])> + 's {
        self.iter()
            .map(move |f| (f.name.get(buf), f.value.get(buf)))
    }

    /// The value of the first field named `name` (ASCII case-insensitive).
    pub fn get<'b>(&self, buf: &'b [u8], name: &str) -> Option<&'b [u8]> {
        self.get_all(buf, name).next()
    }

    /// The values of every field named `name` (ASCII case-insensitive).
    pub fn get_all<'s, 'b: 's, 'n: 's>(
        &'s self,
        buf: &'b [u8],
        name: &'n str,
    ) -> impl Iterator<Item = &'b [u8]> + 's {
        self.fields(buf)
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_of_sub_slice_and_foreign_slice() {
        let buf = b"hello world";
        let span = Span::of(buf, &buf[6..]).unwrap();
        assert_eq!(span.get(buf), b"world");
        assert_eq!(Span::of(buf, b"elsewhere"), None);
        assert_eq!(span.get(b"short"), b"");
        assert_eq!(span.sub(1, 100).get(buf), b"orld");
    }

    #[test]
    fn spills_past_inline_capacity() {
        let buf = b"ab";
        let mut spans = HeaderSpans::default();
        for _ in 0..40 {
            spans.push(FieldSpan {
                name: Span::of(buf, &buf[..1]).unwrap(),
                value: Span::of(buf, &buf[1..]).unwrap(),
            });
        }
        assert_eq!(spans.len(), 40);
        assert_eq!(spans.fields(buf).count(), 40);
        assert_eq!(spans.get(buf, "A"), Some(&b"b"[..]));
    }
}
