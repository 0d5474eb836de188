//! X-Forwarded-For as Tempesta FW judges it. Its parser (fw/http_parser.c,
//! `__req_parse_x_forwarded_for`, the same in `__h2_req_parse_x_forwarded_for`) reads every
//! such field as a comma-separated list of node names, each made of the bytes of its `xff`
//! table (fw/token_tables.h: letters, digits, `.`, `_`, `-`, `[`, `]`, `:`), optional
//! whitespace around the commas, and no empty element: a field that is not such a list is a
//! malformed request (400, the connection closed). Then, before the request is routed,
//! fw/http.c (`tfw_http_req_client_link`, through `tfw_http_get_ip_from_xff`) hands the
//! first node of the first field, the client's own address, to `tfw_addr_pton` (fw/addr.c),
//! and answers 400 ("incorrect X-Forwarded-For header"), the connection kept, when that is
//! not an IPv4 or IPv6 address. That is why `1.1.1.1.1.1` is refused: every byte is in the
//! alphabet, but `tfw_addr_pton_v4` allows at most four dot-separated parts.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::byteset::ByteSet;

/// Tempesta's default alphabet of a node name; `http_xff_brange` replaces it.
pub const NODE_BYTES: ByteSet = ByteSet::new()
    .with_range(b'a', b'z')
    .with_range(b'A', b'Z')
    .with_range(b'0', b'9')
    .with_bytes(b"._-[]:");

/// Whether `value`, one X-Forwarded-For field's value, is a list of node names made of
/// `node_bytes`, with no empty element.
pub(crate) fn is_node_list(value: &[u8], node_bytes: &ByteSet) -> bool {
    value.split(|&b| b == b',').all(|node| {
        let node = node.trim_ascii();
        !node.is_empty() && node_bytes.contains_all(node)
    })
}

/// The address the first node of `value` names, with or without a port: `192.0.2.1`,
/// `192.0.2.1:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`. `None` for anything
/// else (a name, `unknown`, an obfuscated `_hidden`, five dotted parts).
pub fn client_address(value: &[u8]) -> Option<IpAddr> {
    let first = value.split(|&b| b == b',').next()?.trim_ascii();
    let text = std::str::from_utf8(first).ok()?;
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(with_port) = text.parse::<SocketAddr>() {
        return Some(with_port.ip());
    }
    let bracketed = text.strip_prefix('[')?.strip_suffix(']')?;
    bracketed.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_follow_tempestas_alphabet_and_separators() {
        for good in [
            &b"192.0.2.1"[..],
            b"192.0.2.1, 10.0.0.1",
            b"192.0.2.1 ,10.0.0.1 , proxy.example",
            b"[2001:db8::1]:443",
            b"unknown",
            b"_hidden",
            b"1.1.1.1.1.1",
        ] {
            assert!(is_node_list(good, &NODE_BYTES), "{good:?}");
        }
        for bad in [
            &b""[..],
            b" ",
            b"192.0.2.1,",
            b",192.0.2.1",
            b"192.0.2.1,,10.0.0.1",
            b"192.0.2.1, ,10.0.0.1",
            b"192.0.2.1 10.0.0.1",
            b"192.0.2.1;proto=http",
            b"\"192.0.2.1\"",
            b"<script>",
            b"1.1.1.$",
        ] {
            assert!(!is_node_list(bad, &NODE_BYTES), "{bad:?}");
        }
        let digits_and_dots = ByteSet::new().with_range(b'0', b'9').with_bytes(b".");
        assert!(is_node_list(b"192.0.2.1", &digits_and_dots));
        assert!(!is_node_list(b"unknown", &digits_and_dots));
    }

    #[test]
    fn the_first_node_must_be_an_address() {
        let v4 = IpAddr::from([192, 0, 2, 1]);
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        for (value, want) in [
            (&b"192.0.2.1"[..], v4),
            (b"192.0.2.1:8080", v4),
            (b"192.0.2.1, not-checked", v4),
            (b"2001:db8::1", v6),
            (b"[2001:db8::1]", v6),
            (b"[2001:db8::1]:80", v6),
            (b"::ffff:192.0.2.1", "::ffff:192.0.2.1".parse().unwrap()),
        ] {
            assert_eq!(client_address(value), Some(want), "{value:?}");
        }
        for bad in [
            &b"1.1.1.1.1.1"[..],
            b"1.1.1.1.1",
            b"1.1.1",
            b"256.1.1.1",
            b"192.0.2.1:",
            b"192.0.2.1:65536",
            b"unknown",
            b"_hidden",
            b"example.com",
            b"[2001:db8::1",
            b"2001:db8::g",
            b"",
        ] {
            assert_eq!(client_address(bad), None, "{bad:?}");
        }
    }
}
