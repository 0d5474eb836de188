//! The `Forwarded` field (RFC 7239) as Tempesta FW judges it. Its parser (fw/http_parser.c,
//! `__req_parse_forwarded`, and `__h2_req_parse_forwarded` for HTTP/2) reads each such field
//! as `;`-separated pairs of the four parameters RFC 7239 §5 defines, and a field that does
//! not read so is a malformed request (400, the connection closed). What it takes is
//! narrower than RFC 7239's grammar, and this module takes exactly that:
//! - a parameter is `for=`, `by=`, `host=` or `proto=` (names in any case), each at most
//!   once in a field (RFC 7239 §4's MUST); an extension parameter is refused;
//! - `;` is followed at once by the next parameter: no space, no empty pair, no trailing `;`;
//! - `for` and `by` are node names of the X-Forwarded-For alphabet (`http_xff_brange`),
//!   at least one byte, bare or in double quotes;
//! - `for` alone may be a list, `for=a, for="b"`: after a comma (spaces around it allowed)
//!   comes another `for=`; a comma after any other parameter is refused;
//! - `host` is letters, digits, `.` and `-`, or a bracketed IPv6 address when quoted, with an
//!   optional port from 1 to 65535; `proto` is a URI scheme's bytes (letters, digits, `+`,
//!   `-`, `.`); quoted values are not empty, but a bare `host` or `proto` may be, when a `;`
//!   follows (`host=;proto=https`, `proto=;for=a`), and a bare host may be a port alone
//!   (`host=:80`), as Tempesta's states read them.
//!
//! The field is forwarded as sent: the proxy does not read addresses or schemes from it.

use crate::byteset::ByteSet;

/// The parameters of a Forwarded pair, as bits of the set already seen in a field.
#[derive(Clone, Copy)]
enum Parameter {
    For = 1,
    By = 2,
    Host = 4,
    Proto = 8,
}

/// Whether `value`, one Forwarded field's value, reads as Tempesta reads it (module doc);
/// `node_bytes` is the alphabet of `for` and `by` nodes.
pub(crate) fn is_valid(value: &[u8], node_bytes: &ByteSet) -> bool {
    let mut reader = Reader {
        bytes: value.trim_ascii(),
        at: 0,
    };
    let mut seen = 0u8;
    loop {
        let Some(parameter) = reader.parameter() else {
            return false;
        };
        if seen & parameter as u8 != 0 {
            return false;
        }
        seen |= parameter as u8;
        let read = match parameter {
            Parameter::For => reader.for_list(node_bytes),
            Parameter::By => reader.quoted_or_bare(|r| r.node(node_bytes)),
            Parameter::Host => reader.host(),
            Parameter::Proto => reader.proto(),
        };
        if read.is_none() {
            return false;
        }
        if reader.at == reader.bytes.len() {
            return true;
        }
        if !reader.eat(b';') {
            return false;
        }
    }
}

/// A cursor over one field value; each reader returns `None` where the value does not read.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let here = self.peek() == Some(byte);
        self.at += usize::from(here);
        here
    }

    /// Moves past the longest run of bytes `wanted` accepts; returns its length.
    fn run(&mut self, wanted: impl Fn(u8) -> bool) -> usize {
        let start = self.at;
        while self.peek().is_some_and(&wanted) {
            self.at += 1;
        }
        self.at - start
    }

    fn skip_spaces(&mut self) {
        self.run(|b| b == b' ' || b == b'\t');
    }

    /// A parameter name and its `=`.
    fn parameter(&mut self) -> Option<Parameter> {
        let rest = &self.bytes[self.at..];
        let names = [
            (&b"for="[..], Parameter::For),
            (b"by=", Parameter::By),
            (b"host=", Parameter::Host),
            (b"proto=", Parameter::Proto),
        ];
        let (name, parameter) = names.into_iter().find(|(name, _)| {
            rest.len() >= name.len() && rest[..name.len()].eq_ignore_ascii_case(name)
        })?;
        self.at += name.len();
        Some(parameter)
    }

    /// `read` bare, or between double quotes.
    fn quoted_or_bare(&mut self, read: impl Fn(&mut Self) -> Option<()>) -> Option<()> {
        if self.eat(b'"') {
            read(self)?;
            return self.eat(b'"').then_some(());
        }
        read(self)
    }

    /// A node name: at least one byte of the alphabet.
    fn node(&mut self, node_bytes: &ByteSet) -> Option<()> {
        (self.run(|b| node_bytes.contains(b)) > 0).then_some(())
    }

    /// `for`'s value and, after each comma, another `for=` and its value.
    fn for_list(&mut self, node_bytes: &ByteSet) -> Option<()> {
        loop {
            self.quoted_or_bare(|r| r.node(node_bytes))?;
            let before_spaces = self.at;
            self.skip_spaces();
            if !self.eat(b',') {
                // Spaces end the field or come before a comma, never before a `;`.
                return (self.at == before_spaces || self.at == self.bytes.len()).then_some(());
            }
            self.skip_spaces();
            let rest = &self.bytes[self.at..];
            if rest.len() < 4 || !rest[..4].eq_ignore_ascii_case(b"for=") {
                return None;
            }
            self.at += 4;
        }
    }

    /// `host`'s value: a name or (quoted only) a bracketed IPv6 address, then a port.
    fn host(&mut self) -> Option<()> {
        let name = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'-';
        if self.eat(b'"') {
            if self.eat(b'[') {
                if self.run(|b| b.is_ascii_hexdigit() || b == b':') == 0 || !self.eat(b']') {
                    return None;
                }
            } else if self.run(name) == 0 {
                return None;
            }
            self.port()?;
            return self.eat(b'"').then_some(());
        }
        // A bare host may be empty (`host=;proto=https`), but not the field's end.
        if self.at == self.bytes.len() {
            return None;
        }
        self.run(name);
        self.port()
    }

    /// An optional `:PORT`, PORT from 1 to 65535.
    fn port(&mut self) -> Option<()> {
        if !self.eat(b':') {
            return Some(());
        }
        let start = self.at;
        if self.run(|b| b.is_ascii_digit()) == 0 {
            return None;
        }
        let digits = &self.bytes[start..self.at];
        let port = digits.iter().try_fold(0u32, |n, &d| {
            n.checked_mul(10)?.checked_add(u32::from(d - b'0'))
        })?;
        (1..=65535).contains(&port).then_some(())
    }

    /// `proto`'s value: a scheme's bytes, not empty when quoted.
    fn proto(&mut self) -> Option<()> {
        let scheme = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.');
        if self.eat(b'"') {
            if self.run(scheme) == 0 {
                return None;
            }
            return self.eat(b'"').then_some(());
        }
        if self.at == self.bytes.len() {
            return None;
        }
        self.run(scheme);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forwarded_for::NODE_BYTES;

    #[test]
    fn fields_tempesta_reads_are_valid() {
        for good in [
            &b"for=192.0.2.60"[..],
            b"for=192.0.2.60;proto=http;by=203.0.113.43",
            b"For=\"[2001:db8:cafe::17]:4711\"",
            b"for=192.0.2.43, for=198.51.100.17",
            b"for=192.0.2.43 ,for=\"198.51.100.17\";proto=https",
            b"for=unknown",
            b"for=_hidden;by=_proxy1",
            b"host=example.com:8080",
            b"host=\"[2001:db8::1]:443\"",
            b"host=;proto=https",
            b"host=:80",
            b"proto=;for=a",
            b"proto=\"https\"",
            b"PROTO=git+ssh",
            b"for=192.0.2.1 ",
        ] {
            assert!(
                is_valid(good, &NODE_BYTES),
                "{}",
                String::from_utf8_lossy(good)
            );
        }
    }

    #[test]
    fn fields_tempesta_refuses_are_invalid() {
        for bad in [
            &b""[..],
            b"for=",
            b"for=\"\"",
            b"for=a;for=b",
            b"for=a; proto=http",
            b"for=a;;proto=http",
            b"for=a;",
            b"for=a ;proto=http",
            b"for=a, by=b",
            b"proto=http, for=a",
            b"for=a,",
            b"for=a b",
            b"for=\"a",
            b"for=a/b",
            b"secret=x",
            b"for=a;ext=1",
            b"host=",
            b"host=\"\"",
            b"host=\"[]\"",
            b"host=a:0",
            b"host=a:65536",
            b"host=a:",
            b"host=a_b",
            b"host=[::1]",
            b"proto=",
            b"proto=\"\"",
            b"proto=ht/tp",
        ] {
            assert!(
                !is_valid(bad, &NODE_BYTES),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn for_and_by_take_the_configured_alphabet() {
        let digits_and_dots = ByteSet::new().with_range(b'0', b'9').with_bytes(b".");
        assert!(is_valid(b"for=192.0.2.1;by=10.0.0.1", &digits_and_dots));
        assert!(!is_valid(b"for=unknown", &digits_and_dots));
        assert!(!is_valid(b"by=proxy", &digits_and_dots));
    }
}
