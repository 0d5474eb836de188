//! `tft` of ClientHellos real clients sent, against the values Tempesta computes.

use ktls::hello::ClientHello;

use super::{Handshake, Tft};

fn hello(name: &str) -> ClientHello {
    let path = format!(
        "{}/../ktls/testdata/client_hello/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    ClientHello::parse(&bytes).unwrap_or_else(|| panic!("{path}: not a ClientHello"))
}

/// A `proto=h2,https` listener, a server name no vhost has, a full handshake.
const BOTH: Handshake = Handshake {
    http1: true,
    h2: true,
    vhost_found: false,
    resumed: false,
    quic: false,
};

/// A QUIC listener (ALPN `h3` only).
const QUIC: Handshake = Handshake {
    http1: false,
    h2: false,
    quic: true,
    ..BOTH
};

#[test]
fn python_without_alpn_has_the_hash_tempesta_test_expects() {
    // tempesta-test tests/tf/test_tf.py expects 66cb9fd8d4250000 for its Python client over
    // HTTP/1.1 (the same OpenSSL 3.0 defaults as this machine's Python).
    assert_eq!(
        Tft::of(&hello("py_http.bin"), BOTH).to_string(),
        "66cb9fd8d4250000"
    );
}

#[test]
fn python_offering_h2_differs_in_extensions_and_alpn_only() {
    // tempesta-test's H2 client hash is 66cb8f00ef170002: the same extensions (8f00),
    // groups (66cb) and ALPN (2); its cipher list there was another one.
    let tft = Tft::of(&hello("py_h2.bin"), BOTH).0;
    assert_eq!(tft >> 32, 0x66cb_8f00);
    assert_eq!(tft & 0xff, 2);
}

#[test]
fn curl_offering_h2_and_http1_differs_from_curl_offering_http1_only() {
    let h2 = Tft::of(&hello("curl_h2.bin"), BOTH);
    let http1 = Tft::of(&hello("curl_http11.bin"), BOTH);
    // h2 (2) then http/1.1 (1): (2 << 1) + 1.
    assert_eq!(h2.0 & 0b111, 5);
    assert_eq!(http1.0 & 0b111, 1);
    assert_eq!(h2.0 >> 8, http1.0 >> 8);
    // curl's cipher list is OpenSSL 3.0's default one, as in tempesta-test's ef17 hashes.
    assert_eq!((h2.0 >> 16) & 0xffff, 0xef17);
}

#[test]
fn a_protocol_the_listener_does_not_offer_is_flagged_unknown() {
    let http1_only = Handshake { h2: false, ..BOTH };
    let tft = Tft::of(&hello("curl_h2.bin"), http1_only).0;
    assert_eq!(tft & 0b1111, 0b1001);
}

#[test]
fn vhost_and_resumption_set_their_bits() {
    let base = Tft::of(&hello("s_client.bin"), BOTH).0;
    let named = Tft::of(
        &hello("s_client.bin"),
        Handshake {
            vhost_found: true,
            ..BOTH
        },
    )
    .0;
    let resumed = Tft::of(
        &hello("s_client.bin"),
        Handshake {
            resumed: true,
            ..BOTH
        },
    )
    .0;
    assert_eq!(named ^ base, 0x10);
    assert_eq!(resumed ^ base, 0x20);
}

#[test]
fn clients_of_this_machine_all_differ() {
    let names = [
        "curl_h2.bin",
        "curl_http11.bin",
        "s_client.bin",
        "s_client_tls12.bin",
        "py_http.bin",
        "py_h2.bin",
        "h2load.bin",
    ];
    let mut all: Vec<Tft> = names.iter().map(|n| Tft::of(&hello(n), BOTH)).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), names.len());
}

#[test]
fn groups_past_a_long_list_are_not_read_beyond_eleven() {
    // 12 groups: Tempesta reads 11 entries, all inside the list.
    let mut body = vec![0, 24];
    for g in 1..=12u16 {
        body.extend_from_slice(&g.to_be_bytes());
    }
    let hello = ClientHello::from_parts(0x0303, &[0x13, 0x01], [(10, &body[..])]);
    let expected = (1..=11u16).fold(0u16, super::acc16);
    assert_eq!(super::supported_groups_hash(&hello), expected);
}

#[test]
fn a_short_group_list_reads_what_an_earlier_extension_left() {
    // One group (2 bytes) after a 6-byte server name body: Tempesta reads 2 entries, the
    // second from the name's bytes 4 and 5.
    let sni = [0u8, 4, 0, 0, 1, b'a'];
    let groups = [0u8, 2, 0, 0x17];
    let hello = ClientHello::from_parts(0x0303, &[0x13, 0x01], [(0, &sni[..]), (10, &groups[..])]);
    let expected = super::acc16(super::acc16(0, 0x17), u16::from_be_bytes([1, b'a']));
    assert_eq!(super::supported_groups_hash(&hello), expected);
}

#[test]
fn a_quic_handshake_never_shares_a_value_with_a_tcp_one() {
    // The same ClientHello over QUIC and over TCP, whatever the TCP listener offers.
    let curl = hello("curl_h2.bin");
    let quic = Tft::of(&curl, QUIC).0;
    assert_eq!(quic & 0x80, 0x80);
    let listeners = [(true, true), (true, false), (false, true), (false, false)];
    for (http1, h2) in listeners {
        let tcp = Tft::of(&curl, Handshake { http1, h2, ..BOTH }).0;
        assert_eq!(tcp & 0x80, 0);
        assert_ne!(tcp, quic);
        // Only the flags differ: the hashes are the hello's.
        assert_eq!(tcp >> 16, quic >> 16);
    }
}

#[test]
fn over_quic_h3_is_the_protocol_the_listener_knows() {
    let with_alpn = |list: &[u8]| {
        let mut body = (list.len() as u16).to_be_bytes().to_vec();
        body.extend_from_slice(list);
        ClientHello::from_parts(0x0303, &[0x13, 0x01], [(16u16, &body[..])])
    };
    // h3 alone: ALPN 3, nothing unknown, the QUIC bit.
    assert_eq!(Tft::of(&with_alpn(b"\x02h3"), QUIC).0 & 0xff, 0x83);
    // h3 and a draft's name: the draft is unknown (bit 3).
    assert_eq!(Tft::of(&with_alpn(b"\x02h3\x05h3-29"), QUIC).0 & 0xff, 0x8b);
    // Over TCP, h3 is a protocol no listener knows.
    assert_eq!(Tft::of(&with_alpn(b"\x02h3"), BOTH).0 & 0xff, 0x08);
}
