//! Small value types of the model that have a textual form in Tempesta's
//! language. Each parses from and prints to that form, and (de)serializes
//! through it, so a TOML file writes them exactly as a `.conf` file would.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------- ByteSet

/// A set of bytes, as given to `http_*_brange`: `0x2f 0x41-0x5a 48`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ByteSet {
    bits: [u64; 4],
}

impl ByteSet {
    pub fn insert(&mut self, byte: u8) {
        self.bits[usize::from(byte >> 6)] |= 1 << (byte & 63);
    }

    pub fn insert_range(&mut self, first: u8, last: u8) {
        for b in first..=last {
            self.insert(b);
        }
    }

    pub fn contains(&self, byte: u8) -> bool {
        self.bits[usize::from(byte >> 6)] & (1 << (byte & 63)) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.bits == [0; 4]
    }

    /// Maximal runs of consecutive members, in ascending order.
    pub fn ranges(&self) -> Vec<(u8, u8)> {
        let mut out: Vec<(u8, u8)> = Vec::new();
        for b in 0..=255u8 {
            if !self.contains(b) {
                continue;
            }
            match out.last_mut() {
                Some((_, last)) if u16::from(*last) + 1 == u16::from(b) => *last = b,
                _ => out.push((b, b)),
            }
        }
        out
    }
}

/// Why a byte-range list was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteSetError(pub String);

impl fmt::Display for ByteSetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One byte written in decimal (`48`) or hex (`0x30`).
pub(crate) fn parse_byte(text: &str) -> Option<u8> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() => u8::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => text.parse().ok(),
        None => None,
    }
}

impl ByteSet {
    /// Adds one item: `N` or `N-M`.
    pub fn add_item(&mut self, item: &str) -> Result<(), ByteSetError> {
        let bad = || {
            ByteSetError(format!(
                "`{item}` is not a byte or byte range; write e.g. `0x2f`, `47` or `0x41-0x5a`"
            ))
        };
        match item.split_once('-') {
            Some((a, b)) => {
                let first = parse_byte(a).ok_or_else(bad)?;
                let last = parse_byte(b).ok_or_else(bad)?;
                // Tempesta refuses `N-N` too ("interval bound crossing").
                if first >= last {
                    return Err(ByteSetError(format!(
                        "range `{item}` is reversed or empty; write the smaller byte first, and a single byte without `-`"
                    )));
                }
                self.insert_range(first, last);
            }
            None => self.insert(parse_byte(item).ok_or_else(bad)?),
        }
        Ok(())
    }
}

impl FromStr for ByteSet {
    type Err = ByteSetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut set = ByteSet::default();
        for item in s.split_whitespace() {
            set.add_item(item)?;
        }
        if set.is_empty() {
            return Err(ByteSetError("a byte range list cannot be empty".into()));
        }
        Ok(set)
    }
}

impl fmt::Display for ByteSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (a, b)) in self.ranges().into_iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            if a == b {
                write!(f, "{a:#04x}")?;
            } else {
                write!(f, "{a:#04x}-{b:#04x}")?;
            }
        }
        Ok(())
    }
}

impl TryFrom<String> for ByteSet {
    type Error = ByteSetError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ByteSet> for String {
    fn from(b: ByteSet) -> String {
        b.to_string()
    }
}

// ---------------------------------------------------------------- IpPrefix

/// An address with a prefix length: `10.0.0.0/8`, `::1/128`, or a bare
/// address (full length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IpPrefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl IpPrefix {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for IpPrefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr_text, len_text) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr_text.parse().map_err(|_| {
            format!("`{s}` is not an address or prefix; write e.g. `127.0.0.1`, `10.0.0.0/8` or `::1/128`")
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len_text {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("prefix length `{l}` must be 0..={max}")),
            },
        };
        Ok(IpPrefix { addr, len })
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl TryFrom<String> for IpPrefix {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<IpPrefix> for String {
    fn from(p: IpPrefix) -> String {
        p.to_string()
    }
}

// ---------------------------------------------------------------- StatusPattern

/// A response status, exact (`404`) or a class (`4*`, `5*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum StatusPattern {
    Exact(u16),
    /// The hundreds digit: `5*` is `Class(5)`.
    Class(u8),
}

impl StatusPattern {
    pub fn matches(&self, status: u16) -> bool {
        match *self {
            StatusPattern::Exact(s) => s == status,
            StatusPattern::Class(c) => status / 100 == u16::from(c),
        }
    }
}

impl FromStr for StatusPattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "`{s}` is not a status code; write three digits (`404`) or a class (`4*`, `5*`)"
            )
        };
        let bytes = s.as_bytes();
        match bytes {
            [d @ b'1'..=b'5', b'*'] => Ok(StatusPattern::Class(d - b'0')),
            [b'1'..=b'5', b'0'..=b'9', b'0'..=b'9'] => {
                s.parse().map(StatusPattern::Exact).map_err(|_| bad())
            }
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for StatusPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatusPattern::Exact(s) => write!(f, "{s}"),
            StatusPattern::Class(c) => write!(f, "{c}*"),
        }
    }
}

impl TryFrom<String> for StatusPattern {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<StatusPattern> for String {
    fn from(p: StatusPattern) -> String {
        p.to_string()
    }
}

// ---------------------------------------------------------------- UrlTemplate

/// A redirect target such as `https://$host$request_uri`, kept parsed so the
/// proxy only concatenates at request time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct UrlTemplate {
    pub parts: Vec<UrlPart>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UrlPart {
    Literal(String),
    /// `$host`: the request's host.
    Host,
    /// `$request_uri`: the request's path and query.
    RequestUri,
}

impl UrlTemplate {
    /// Splits on `$host` and `$request_uri`; any other `$` is literal, as
    /// in Tempesta.
    pub fn parse(text: &str) -> UrlTemplate {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(dollar) = rest.find('$') {
            let (before, from_dollar) = rest.split_at(dollar);
            literal.push_str(before);
            let (var, len) = if from_dollar.starts_with("$request_uri") {
                (Some(UrlPart::RequestUri), "$request_uri".len())
            } else if from_dollar.starts_with("$host") {
                (Some(UrlPart::Host), "$host".len())
            } else {
                (None, 1)
            };
            match var {
                Some(v) => {
                    if !literal.is_empty() {
                        parts.push(UrlPart::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(v);
                }
                None => literal.push('$'),
            }
            rest = &from_dollar[len..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(UrlPart::Literal(literal));
        }
        UrlTemplate { parts }
    }

    /// Fills the variables in.
    pub fn render(&self, host: &str, request_uri: &str) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                UrlPart::Literal(s) => out.push_str(s),
                UrlPart::Host => out.push_str(host),
                UrlPart::RequestUri => out.push_str(request_uri),
            }
        }
        out
    }
}

impl fmt::Display for UrlTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.parts {
            match p {
                UrlPart::Literal(s) => f.write_str(s)?,
                UrlPart::Host => f.write_str("$host")?,
                UrlPart::RequestUri => f.write_str("$request_uri")?,
            }
        }
        Ok(())
    }
}

impl From<String> for UrlTemplate {
    fn from(s: String) -> Self {
        UrlTemplate::parse(&s)
    }
}

impl From<UrlTemplate> for String {
    fn from(t: UrlTemplate) -> String {
        t.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_set_parses_ranges_and_prints_canonically() {
        let set: ByteSet = "0x2f 0x41-0x43 48".parse().unwrap();
        assert!(set.contains(b'/') && set.contains(b'A') && set.contains(b'C'));
        assert!(set.contains(b'0') && !set.contains(b'D') && !set.contains(0));
        assert_eq!(set.to_string(), "0x2f-0x30 0x41-0x43");
        assert_eq!(set.to_string().parse::<ByteSet>().unwrap(), set);
        assert!("0x41-0x30".parse::<ByteSet>().is_err());
        assert!("256".parse::<ByteSet>().is_err());
        assert!("0x".parse::<ByteSet>().is_err());
        let full: ByteSet = "0-255".parse().unwrap();
        assert!(full.contains(255) && full.contains(0));
    }

    #[test]
    fn ip_prefix_matches_addresses_inside_it() {
        let p: IpPrefix = "10.1.0.0/16".parse().unwrap();
        assert!(p.contains("10.1.200.3".parse().unwrap()));
        assert!(!p.contains("10.2.0.1".parse().unwrap()));
        let any: IpPrefix = "0.0.0.0/0".parse().unwrap();
        assert!(any.contains("8.8.8.8".parse().unwrap()));
        let one: IpPrefix = "::1".parse().unwrap();
        assert_eq!(one.len, 128);
        assert!(!one.contains("127.0.0.1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<IpPrefix>().is_err());
    }

    #[test]
    fn status_patterns() {
        assert_eq!("5*".parse(), Ok(StatusPattern::Class(5)));
        assert!(StatusPattern::Class(4).matches(404));
        assert!(!StatusPattern::Exact(404).matches(403));
        assert!("6*".parse::<StatusPattern>().is_err());
        assert!("40".parse::<StatusPattern>().is_err());
    }

    #[test]
    fn url_template_keeps_variables_apart() {
        let t = UrlTemplate::parse("https://$host$request_uri?x=$y");
        assert_eq!(
            t.parts,
            vec![
                UrlPart::Literal("https://".into()),
                UrlPart::Host,
                UrlPart::RequestUri,
                UrlPart::Literal("?x=$y".into()),
            ]
        );
        assert_eq!(t.render("a.com", "/p"), "https://a.com/p?x=$y");
        assert_eq!(t.to_string(), "https://$host$request_uri?x=$y");
    }
}
