//! Byte ranges (RFC 9110 §14): parsing the `Range` field and resolving it
//! against the length of a stored representation. Both steps are pure and
//! bounded: a peer chooses the field, never how much work or memory the
//! answer costs (at most [`MAX_RANGE_SPECS`] parts, at most about one
//! representation's worth of bytes in total).

/// More range-specs than this and the field is ignored (a full 200 is
/// sent): RFC 9110 §14.2 lets a server ignore a Range that looks like a
/// denial-of-service attempt, and no real client asks for this many.
pub const MAX_RANGE_SPECS: usize = 64;

/// One `range-spec` of a `bytes` Range field (RFC 9110 §14.1.1), before
/// the representation's length is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `first-` or `first-last` (inclusive); `last: None` is open-ended.
    FromTo { first: u64, last: Option<u64> },
    /// `-n`: the last n bytes.
    Suffix(u64),
}

/// Why a Range field is not acted on; every case means "send the whole
/// representation" (RFC 9110 §14.2: a server MAY ignore Range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// Not `bytes` (an origin MUST ignore units it does not understand,
    /// a proxy MAY; this cache answers only byte ranges).
    UnknownUnit,
    /// Not a valid ranges-specifier (§14.1.1), including `last < first`.
    Malformed,
    /// More than [`MAX_RANGE_SPECS`] range-specs.
    TooMany,
}

/// An inclusive byte range inside a representation of known length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub first: usize,
    pub last: usize,
}

impl ByteRange {
    /// How many bytes the range covers (at least one).
    pub fn byte_count(&self) -> usize {
        self.last - self.first + 1
    }

    /// The range as a slice index into the body.
    pub fn as_slice_range(&self) -> std::ops::Range<usize> {
        self.first..self.last + 1
    }
}

/// What a Range field means for a representation of a given length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeResolution {
    /// Send the full representation with 200 (§14.2 allows ignoring).
    Ignore,
    /// 206 with these parts, in the order the client listed them (§14.6
    /// SHOULD), unsatisfiable specs dropped. One part: a single-part 206.
    Satisfiable(Vec<ByteRange>),
    /// 416 with `Content-Range: bytes */len` (§15.5.17).
    NotSatisfiable,
}

/// Parses a Range field value. Only the `bytes` unit (case-insensitive,
/// §14.1) is understood; list elements may be empty and surrounded by
/// optional whitespace (the `#` rule), positions are 1*DIGIT and saturate
/// instead of overflowing (a huge position is simply past the end).
pub fn parse_range(value: &[u8]) -> Result<Vec<RangeSpec>, RangeError> {
    let value = value.trim_ascii();
    let eq = value
        .iter()
        .position(|&b| b == b'=')
        .ok_or(RangeError::Malformed)?;
    let (unit, set) = value.split_at(eq);
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return if is_token(unit) {
            Err(RangeError::UnknownUnit)
        } else {
            Err(RangeError::Malformed)
        };
    }
    let set = set.get(1..).unwrap_or_default();
    let mut specs = Vec::new();
    for element in set.split(|&b| b == b',') {
        let element = element.trim_ascii();
        if element.is_empty() {
            continue;
        }
        if specs.len() == MAX_RANGE_SPECS {
            return Err(RangeError::TooMany);
        }
        specs.push(parse_spec(element)?);
    }
    if specs.is_empty() {
        return Err(RangeError::Malformed);
    }
    Ok(specs)
}

fn parse_spec(element: &[u8]) -> Result<RangeSpec, RangeError> {
    let dash = element
        .iter()
        .position(|&b| b == b'-')
        .ok_or(RangeError::Malformed)?;
    let (first, last) = element.split_at(dash);
    let last = last.get(1..).unwrap_or_default();
    if first.is_empty() {
        return digits(last).map(RangeSpec::Suffix);
    }
    let first = digits(first)?;
    let last = if last.is_empty() {
        None
    } else {
        Some(digits(last)?)
    };
    if last.is_some_and(|l| l < first) {
        // §14.1.1: a byte-range-spec with last-pos < first-pos is invalid.
        return Err(RangeError::Malformed);
    }
    Ok(RangeSpec::FromTo { first, last })
}

/// 1*DIGIT, saturating at u64::MAX.
fn digits(raw: &[u8]) -> Result<u64, RangeError> {
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return Err(RangeError::Malformed);
    }
    Ok(raw.iter().fold(0u64, |acc, &d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

fn is_token(raw: &[u8]) -> bool {
    !raw.is_empty()
        && raw
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Resolves parsed specs against a representation of `len` bytes
/// (§14.1.2 satisfiability, §14.2 and §15.5.17):
/// - `first < len` is satisfiable, `last` is clamped to `len - 1`;
///   a suffix is satisfiable when non-zero and covers at most `len`;
/// - none satisfiable: 416;
/// - a zero-length representation: a non-zero suffix is satisfiable but a
///   206 cannot express it, so the full (empty) 200 is sent; otherwise 416;
/// - overlapping parts that add up to more bytes than the representation
///   are ignored (200): §14.2 lets a server refuse that pattern, and it
///   bounds a 206 to about one copy of the body whatever the client asks.
pub fn resolve(specs: &[RangeSpec], len: usize) -> RangeResolution {
    let len64 = len as u64;
    if len == 0 {
        return if specs
            .iter()
            .any(|s| matches!(s, RangeSpec::Suffix(n) if *n > 0))
        {
            RangeResolution::Ignore
        } else {
            RangeResolution::NotSatisfiable
        };
    }
    let mut parts = Vec::with_capacity(specs.len());
    for spec in specs {
        let (first, last) = match *spec {
            RangeSpec::FromTo { first, last } if first < len64 => {
                (first, last.map_or(len64 - 1, |l| l.min(len64 - 1)))
            }
            RangeSpec::Suffix(n) if n > 0 => (len64 - n.min(len64), len64 - 1),
            _ => continue,
        };
        // Both are below `len`, a usize.
        let (Ok(first), Ok(last)) = (usize::try_from(first), usize::try_from(last)) else {
            continue;
        };
        parts.push(ByteRange { first, last });
    }
    if parts.is_empty() {
        return RangeResolution::NotSatisfiable;
    }
    let total = parts
        .iter()
        .fold(0usize, |acc, p| acc.saturating_add(p.byte_count()));
    if parts.len() > 1 && total > len {
        return RangeResolution::Ignore;
    }
    RangeResolution::Satisfiable(parts)
}

/// [`parse_range`] then [`resolve`]: what a Range field value means for a
/// representation of `len` bytes. Any parse error means [`RangeResolution::Ignore`].
pub fn resolve_field(value: &[u8], len: usize) -> RangeResolution {
    match parse_range(value) {
        Ok(specs) => resolve(&specs, len),
        Err(_) => RangeResolution::Ignore,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeResolution::{Ignore, NotSatisfiable, Satisfiable};

    fn r(first: usize, last: usize) -> ByteRange {
        ByteRange { first, last }
    }

    /// RFC 9110 §14.1.1 grammar and §14.1.2 satisfiability, table-driven.
    #[test]
    fn rfc9110_14_1_byte_ranges() {
        let cases: Vec<(&str, usize, RangeResolution)> = vec![
            ("bytes=0-499", 10000, Satisfiable(vec![r(0, 499)])),
            ("bytes=500-999", 10000, Satisfiable(vec![r(500, 999)])),
            ("bytes=-500", 10000, Satisfiable(vec![r(9500, 9999)])),
            ("bytes=9500-", 10000, Satisfiable(vec![r(9500, 9999)])),
            (
                "bytes=0-0,-1",
                10000,
                Satisfiable(vec![r(0, 0), r(9999, 9999)]),
            ),
            (
                "bytes= 500-600 , 601-999 ",
                10000,
                Satisfiable(vec![r(500, 600), r(601, 999)]),
            ),
            ("BYTES=0-1", 10, Satisfiable(vec![r(0, 1)])),
            ("bytes=,,0-1,,", 10, Satisfiable(vec![r(0, 1)])),
            // last-pos past the end is clamped; a suffix longer than the body is all of it.
            ("bytes=5-100", 10, Satisfiable(vec![r(5, 9)])),
            ("bytes=-100", 10, Satisfiable(vec![r(0, 9)])),
            (
                "bytes=0-18446744073709551616",
                10,
                Satisfiable(vec![r(0, 9)]),
            ),
            // Unsatisfiable specs are dropped; none left is 416.
            ("bytes=10-", 10, NotSatisfiable),
            ("bytes=-0", 10, NotSatisfiable),
            ("bytes=10-20,-0", 10, NotSatisfiable),
            ("bytes=10-20,0-0", 10, Satisfiable(vec![r(0, 0)])),
            ("bytes=99999999999999999999999-", 10, NotSatisfiable),
            // Zero-length representation.
            ("bytes=0-", 0, NotSatisfiable),
            ("bytes=-5", 0, Ignore),
            // Invalid specifiers and unknown units are ignored (full 200).
            ("bytes=5-1", 10, Ignore),
            ("bytes=1-2-3", 10, Ignore),
            ("bytes=a-b", 10, Ignore),
            ("bytes=-", 10, Ignore),
            ("bytes=", 10, Ignore),
            ("bytes=+1-2", 10, Ignore),
            ("bytes =0-1", 10, Ignore),
            ("bytes=0 -1", 10, Ignore),
            ("items=0-1", 10, Ignore),
            ("0-1", 10, Ignore),
            ("", 10, Ignore),
        ];
        for (value, len, want) in cases {
            assert_eq!(
                resolve_field(value.as_bytes(), len),
                want,
                "{value} / {len}"
            );
        }
    }

    /// RFC 9110 §14.2: a server MAY ignore ranges that look like an attack.
    #[test]
    fn rfc9110_14_2_dos_guards() {
        let many: Vec<String> = (0..=MAX_RANGE_SPECS).map(|i| format!("{i}-{i}")).collect();
        let value = format!("bytes={}", many.join(","));
        assert_eq!(parse_range(value.as_bytes()), Err(RangeError::TooMany));
        assert_eq!(resolve_field(value.as_bytes(), 1000), Ignore);
        let limit = format!("bytes={}", many[..MAX_RANGE_SPECS].join(","));
        assert!(matches!(resolve_field(limit.as_bytes(), 1000), Satisfiable(p) if p.len() == 64));
        // Overlaps adding up to more than the body: ignored.
        assert_eq!(resolve_field(b"bytes=0-,0-,0-", 100), Ignore);
        assert_eq!(resolve_field(b"bytes=0-60,40-99", 100), Ignore);
        // A small overlap within one body's worth is served as asked.
        assert_eq!(
            resolve_field(b"bytes=0-10,5-15", 100),
            Satisfiable(vec![r(0, 10), r(5, 15)])
        );
        assert_eq!(parse_range(b"items=1-2"), Err(RangeError::UnknownUnit));
    }
}
