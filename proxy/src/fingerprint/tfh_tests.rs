//! `tfh` of request heads, against the counts Tempesta's own parser tests expect.

use super::{RequestShape, Tfh};

fn h1(method: &str, fields: &[(&str, &str)]) -> Tfh {
    Tfh::of(RequestShape {
        method: method.as_bytes(),
        h2: false,
        fields: fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
    })
}

fn referer(t: Tfh) -> u64 {
    (t.0 >> 6) & 1
}
fn field_count(t: Tfh) -> u64 {
    (t.0 >> 7) & 63
}
fn cookies(t: Tfh) -> u64 {
    (t.0 >> 13) & 31
}
fn method(t: Tfh) -> u64 {
    (t.0 >> 18) & 31
}

#[test]
fn fields_cookies_and_referer_are_counted_as_tempesta_counts_them() {
    // fw/t/unit/test_http1_parser.c, TEST(http1_parser, tfh).
    let two = h1(
        "GET",
        &[
            ("Connection", "Keep-Alive"),
            ("X-Forwarded-For", "127.0.0.1"),
        ],
    );
    assert_eq!((referer(two), field_count(two), cookies(two)), (0, 2, 0));
    let four = h1(
        "GET",
        &[
            ("Connection", "Keep-Alive"),
            ("X-Forwarded-For", "127.0.0.1"),
            ("Cookie", "session=42; theme=dark"),
            ("Referer", "http://tempesta-tech.com:8080"),
        ],
    );
    assert_eq!((referer(four), field_count(four), cookies(four)), (1, 4, 2));
}

#[test]
fn counts_saturate_at_their_field_widths() {
    let names: Vec<String> = (1..=70).map(|n| "a".repeat(n)).collect();
    let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    assert_eq!(field_count(h1("GET", &many)), 63);
    let jar = (0..40)
        .map(|i| format!("c{i}=v"))
        .collect::<Vec<_>>()
        .join("; ");
    assert_eq!(cookies(h1("GET", &[("Cookie", jar.as_str())])), 31);
}

#[test]
fn known_fields_hash_by_id_and_others_by_their_first_bytes() {
    let t = h1(
        "GET",
        &[
            ("Connection", "Keep-Alive"),
            ("X-Forwarded-For", "127.0.0.1"),
        ],
    );
    // Connection is 15, X-Forwarded-For 17: 15 * 11 + 17.
    assert_eq!(t.0 >> 32, 182);
    let raw = h1("GET", &[("Accept", "*/*")]);
    assert_eq!(raw.0 >> 32, u64::from(u32::from_le_bytes(*b"Acce")));
    // A name shorter than 4 bytes goes on with the colon and the value.
    let short = h1("GET", &[("a", "bc")]);
    assert_eq!(short.0 >> 32, u64::from(u32::from_le_bytes(*b"a:bc")));
}

#[test]
fn order_method_and_protocol_all_change_the_hash() {
    let ab = h1("GET", &[("Accept", "*/*"), ("User-Agent", "x")]);
    let ba = h1("GET", &[("User-Agent", "x"), ("Accept", "*/*")]);
    assert_ne!(ab, ba);
    assert_eq!(method(h1("GET", &[])), 3);
    assert_eq!(method(h1("POST", &[])), 10);
    assert_eq!(method(h1("BREW", &[])), 17);
    let h2 = Tfh::of(RequestShape {
        method: b"GET",
        h2: true,
        fields: [(&b"host"[..], &b"example.com"[..]), (b"accept", b"*/*")].into_iter(),
    });
    // The built host field stands for the four pseudo-headers: 4 + 1 fields.
    assert_eq!(field_count(h2), 5);
    assert_eq!((h2.0 >> 23) & 1, 1);
}

#[test]
fn the_hex_form_is_the_one_tempesta_logs() {
    assert_eq!(Tfh(0x55cb_f8cc_e017_0011).to_string(), "55cbf8cce0170011");
}
