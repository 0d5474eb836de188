//! Targeted cache control (RFC 9213): `CDN-Cache-Control` and any other
//! field on the configured target list. Such a field is a Structured Field
//! Dictionary (RFC 8941 §3.2); the first field on the list with a valid,
//! non-empty value replaces Cache-Control *and* Expires for this cache
//! (RFC 9213 §2.2). An invalid field is ignored as if absent.

use crate::headers::{CacheControl, HeaderPair, DELTA_SECONDS_MAX};

/// The default target list (RFC 9213 §3: CDN-Cache-Control targets CDNs
/// and reverse proxies that act for the origin, as this proxy does).
pub const DEFAULT_TARGETED_FIELDS: [&str; 1] = ["CDN-Cache-Control"];

/// The directives of the first field on `targets` (in list order) that is
/// present with a valid, non-empty Dictionary value; `None` when there is
/// none, and the response's Cache-Control and Expires apply.
pub fn targeted_directives<H: HeaderPair, T: AsRef<str>>(
    headers: &[H],
    targets: &[T],
) -> Option<CacheControl> {
    targets
        .iter()
        .find_map(|target| parse_targeted(headers, target.as_ref()))
}

/// One targeted field (every line of it, combined as one list, RFC 8941
/// §4.2): `None` when absent, empty or not a valid Dictionary.
pub fn parse_targeted<H: HeaderPair>(headers: &[H], name: &str) -> Option<CacheControl> {
    let mut members = Vec::new();
    let mut present = false;
    for h in headers
        .iter()
        .filter(|h| h.name().eq_ignore_ascii_case(name.as_bytes()))
    {
        present = true;
        parse_dictionary(h.value(), &mut members)?;
    }
    if !present || members.is_empty() {
        return None;
    }
    // RFC 8941 §3.2: a repeated key keeps its last value, in the first
    // key's position (order does not matter for cache directives).
    let mut cc = CacheControl::default();
    for (i, (key, value)) in members.iter().enumerate() {
        if members
            .get(i + 1..)
            .is_some_and(|later| later.iter().any(|(k, _)| k == key))
        {
            continue;
        }
        apply(&mut cc, key, value);
    }
    Some(cc)
}

/// The bare item of a dictionary member, as far as cache directives care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Bool(bool),
    Integer(i64),
    /// Decimal, string, token, byte sequence or inner list.
    Other,
}

/// Cache directive semantics of RFC 9111 §5.2.2 with Structured Field
/// types: flags are true booleans (`no-store`, `no-store=?1`; `?0` is
/// absent), seconds are non-negative Integers. A seconds directive with any
/// other value (`max-age=1.5`, `max-age=-1`, `max-age="5"`) reads as 0,
/// stale, as invalid freshness does in Cache-Control (§4.2.1).
/// `private` and `no-cache` with a value (a field list) count as unqualified.
fn apply(cc: &mut CacheControl, key: &str, value: &Item) {
    let flag = !matches!(value, Item::Bool(false));
    let seconds = match *value {
        Item::Integer(n) => u64::try_from(n).unwrap_or(0).min(DELTA_SECONDS_MAX),
        _ => 0,
    };
    match key {
        "no-store" => cc.no_store |= flag,
        "no-cache" => cc.no_cache |= flag,
        "private" => cc.private |= flag,
        "public" => cc.public |= flag,
        "must-understand" => cc.must_understand |= flag,
        "must-revalidate" => cc.must_revalidate |= flag,
        "proxy-revalidate" => cc.proxy_revalidate |= flag,
        "max-age" => cc.max_age = Some(seconds),
        "s-maxage" => cc.s_maxage = Some(seconds),
        "stale-if-error" => cc.stale_if_error = Some(seconds),
        "stale-while-revalidate" => cc.stale_while_revalidate = Some(seconds),
        _ => {}
    }
}

/// Parses one field line as an RFC 8941 §4.2.2 Dictionary, appending its
/// members; `None` if it is not one.
fn parse_dictionary(value: &[u8], members: &mut Vec<(String, Item)>) -> Option<()> {
    let mut p = Parser {
        input: value,
        pos: 0,
    };
    p.skip(b" \t");
    if p.done() {
        return Some(());
    }
    loop {
        let key = p.key()?;
        let item = if p.eat(b'=') {
            p.member_value()?
        } else {
            p.parameters()?;
            Item::Bool(true)
        };
        members.push((key, item));
        p.skip(b" \t");
        if p.done() {
            return Some(());
        }
        if !p.eat(b',') {
            return None;
        }
        p.skip(b" \t");
        if p.done() {
            return None; // trailing comma
        }
    }
}

struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn done(&self) -> bool {
        self.pos >= self.input.len()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.pos += usize::from(hit);
        hit
    }

    fn skip(&mut self, set: &[u8]) {
        while self.peek().is_some_and(|b| set.contains(&b)) {
            self.pos += 1;
        }
    }

    fn take_while(&mut self, ok: impl Fn(u8) -> bool) -> &'a [u8] {
        let start = self.pos;
        while self.peek().is_some_and(&ok) {
            self.pos += 1;
        }
        let input = self.input;
        input.get(start..self.pos).unwrap_or_default()
    }

    /// key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
    fn key(&mut self) -> Option<String> {
        if !self
            .peek()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'*')
        {
            return None;
        }
        let key = self
            .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b));
        Some(String::from_utf8_lossy(key).into_owned())
    }

    /// member-value = sf-item / inner-list
    fn member_value(&mut self) -> Option<Item> {
        if self.eat(b'(') {
            loop {
                self.skip(b" ");
                if self.eat(b')') {
                    break;
                }
                self.bare_item()?;
                self.parameters()?;
                if !matches!(self.peek(), Some(b' ' | b')')) {
                    return None;
                }
            }
            self.parameters()?;
            return Some(Item::Other);
        }
        let item = self.bare_item()?;
        self.parameters()?;
        Some(item)
    }

    /// parameters = *( ";" *SP key [ "=" bare-item ] ); values unused.
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip(b" ");
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    fn bare_item(&mut self) -> Option<Item> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string(),
            b':' => self.byte_sequence(),
            b'?' => {
                self.pos += 1;
                let value = match self.peek()? {
                    b'0' => false,
                    b'1' => true,
                    _ => return None,
                };
                self.pos += 1;
                Some(Item::Bool(value))
            }
            b if b.is_ascii_alphabetic() || b == b'*' => {
                self.take_while(|b| b.is_ascii_alphanumeric() || b":/!#$%&'*+-.^_`|~".contains(&b));
                Some(Item::Other)
            }
            _ => None,
        }
    }

    /// sf-integer (at most 15 digits) or sf-decimal (12.3 digits).
    fn number(&mut self) -> Option<Item> {
        let negative = self.eat(b'-');
        let int = self.take_while(|b| b.is_ascii_digit());
        if int.is_empty() || int.len() > 15 {
            return None;
        }
        let value = int
            .iter()
            .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'));
        if self.eat(b'.') {
            let frac_len = self.take_while(|b| b.is_ascii_digit()).len();
            return (int.len() <= 12 && (1..=3).contains(&frac_len)).then_some(Item::Other);
        }
        Some(Item::Integer(if negative { -value } else { value }))
    }

    /// sf-string: printable ASCII, `\"` and `\\` escapes only.
    fn string(&mut self) -> Option<Item> {
        self.pos += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Some(Item::Other);
                }
                b'\\' => {
                    self.pos += 1;
                    if !matches!(self.peek()?, b'"' | b'\\') {
                        return None;
                    }
                    self.pos += 1;
                }
                0x20..=0x7e => self.pos += 1,
                _ => return None,
            }
        }
    }

    /// sf-binary: ":" base64 ":".
    fn byte_sequence(&mut self) -> Option<Item> {
        self.pos += 1;
        self.take_while(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
        self.eat(b':').then_some(Item::Other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&str]) -> Option<CacheControl> {
        let headers: Vec<(&str, &[u8])> = values
            .iter()
            .map(|v| ("CDN-Cache-Control", v.as_bytes()))
            .collect();
        parse_targeted(&headers, "cdn-cache-control")
    }

    /// RFC 9213 §2.1 (Dictionary syntax; invalid = ignored) and RFC 8941
    /// §4.2.2, table-driven: (field lines, max-age, no-store) or None.
    #[test]
    fn rfc9213_2_1_dictionary_values() {
        type Row<'a> = (Vec<&'a str>, Option<(Option<u64>, bool)>);
        let cases: Vec<Row<'_>> = vec![
            (vec!["max-age=60"], Some((Some(60), false))),
            (vec!["max-age=60, no-store"], Some((Some(60), true))),
            (vec!["no-store=?1"], Some((None, true))),
            (vec!["no-store=?0"], Some((None, false))),
            (vec!["max-age=60", "no-store"], Some((Some(60), true))),
            (vec!["  max-age=60  "], Some((Some(60), false))),
            (
                vec!["max-age=60;a=1, x=(1 2 \"s\");y"],
                Some((Some(60), false)),
            ),
            (vec!["max-age=10, max-age=20"], Some((Some(20), false))),
            // Seconds that are not a non-negative Integer read as 0.
            (vec!["max-age=1.5"], Some((Some(0), false))),
            (vec!["max-age=-1"], Some((Some(0), false))),
            (vec!["max-age=\"60\""], Some((Some(0), false))),
            (
                vec!["max-age=9999999999999"],
                Some((Some(DELTA_SECONDS_MAX), false)),
            ),
            // Not a Dictionary, or empty: ignored as a whole.
            (vec!["Max-Age=60"], None),
            (vec!["max-age = 60"], None),
            (vec!["max-age=60,"], None),
            (vec!["max-age=60 no-store"], None),
            (vec!["max-age=1234567890123456"], None),
            (vec!["max-age=\"unterminated"], None),
            (vec!["max-age=60", "BAD"], None),
            (vec![""], None),
            (vec![], None),
        ];
        for (lines, want) in cases {
            let got = parse(&lines).map(|cc| (cc.max_age, cc.no_store));
            assert_eq!(got, want, "{lines:?}");
        }
    }

    /// RFC 9213 §2.2: the first field on the target list with a valid,
    /// non-empty value wins; invalid ones fall through to the next.
    #[test]
    fn rfc9213_2_2_target_list_order() {
        let headers: [(&str, &[u8]); 3] = [
            ("CDN-Cache-Control", b"max-age=10"),
            ("Edge-Cache-Control", b"INVALID"),
            ("Proxy-Cache-Control", b"max-age=30"),
        ];
        let pick =
            |targets: &[&str]| targeted_directives(&headers, targets).and_then(|c| c.max_age);
        assert_eq!(pick(&["CDN-Cache-Control"]), Some(10));
        assert_eq!(
            pick(&["Proxy-Cache-Control", "CDN-Cache-Control"]),
            Some(30)
        );
        assert_eq!(pick(&["Edge-Cache-Control", "CDN-Cache-Control"]), Some(10));
        assert_eq!(pick(&["Edge-Cache-Control"]), None);
        assert_eq!(pick(&[]), None);
    }
}
