//! The readers of a captured ClientHello, on ClientHellos real clients sent.

use super::{ext, ClientHello};

fn hello(name: &str) -> ClientHello {
    let path = format!(
        "{}/testdata/client_hello/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    ClientHello::parse(&bytes).unwrap_or_else(|| panic!("{path}: not a ClientHello"))
}

#[test]
fn curl_offers_h2_then_http1_and_names_the_server() {
    let h = hello("curl_h2.bin");
    assert_eq!(h.legacy_version(), 0x0303);
    let alpn: Vec<&[u8]> = h.alpn_protocols().collect();
    assert_eq!(alpn, [&b"h2"[..], &b"http/1.1"[..]]);
    assert_eq!(h.server_name(), Some(&b"example.com"[..]));
    assert_eq!(
        h.supported_versions().collect::<Vec<_>>(),
        [0x0304, 0x0303, 0x0302, 0x0301]
    );
    assert!(!h.offers_resumption());
    // ecdsa_secp256r1_sha256 first, as OpenSSL 3.0 orders its default signature schemes.
    assert_eq!(h.signature_algorithms().next(), Some(0x0403));
    assert!(h.signature_algorithms().count() > 10);
    // x25519 first, as OpenSSL 3.0 orders its default groups.
    assert_eq!(h.supported_groups().next(), Some(0x001d));
    let types: Vec<u16> = h.extensions().map(|(t, _)| t).collect();
    assert_eq!(types.first(), Some(&ext::SERVER_NAME));
    assert_eq!(types.len(), 12);
}

#[test]
fn a_tls12_only_client_sends_no_supported_versions() {
    let h = hello("s_client_tls12.bin");
    assert_eq!(h.supported_versions().count(), 0);
    assert_eq!(h.supported_groups().collect::<Vec<_>>(), [0x0017]);
    assert_eq!(h.alpn_protocols().count(), 0);
}

#[test]
fn an_address_is_sent_without_server_name() {
    let h = hello("h2load.bin");
    assert_eq!(h.server_name(), None);
    assert_eq!(h.alpn_protocols().next(), Some(&b"h2"[..]));
}

#[test]
fn a_ticket_or_psk_is_an_offer_to_resume() {
    let suites = [0x13, 0x01];
    let empty = ClientHello::from_parts(0x0303, &suites, [(ext::SESSION_TICKET, &[][..])]);
    assert!(!empty.offers_resumption());
    let ticket = ClientHello::from_parts(0x0303, &suites, [(ext::SESSION_TICKET, &[1u8, 2][..])]);
    assert!(ticket.offers_resumption());
    let psk = ClientHello::from_parts(0x0303, &suites, [(ext::PRE_SHARED_KEY, &[0u8; 4][..])]);
    assert!(psk.offers_resumption());
}

#[test]
fn malformed_bodies_read_as_absent_and_truncated_messages_are_refused() {
    let odd = ClientHello::from_parts(0x0303, &[0x13], [(ext::ALPN, &[0u8, 9, 2, b'h'][..])]);
    assert_eq!(odd.cipher_suites().count(), 0);
    assert_eq!(odd.alpn_protocols().count(), 0);
    let short = ClientHello::from_parts(
        0x0303,
        &[],
        [(ext::SIGNATURE_ALGORITHMS, &[0u8, 4, 4, 3][..])],
    );
    assert_eq!(short.signature_algorithms().count(), 0);
    let bytes = std::fs::read(format!(
        "{}/testdata/client_hello/curl_h2.bin",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap_or_default();
    for cut in 0..bytes.len() {
        assert!(ClientHello::parse(&bytes[..cut]).is_none(), "cut at {cut}");
    }
}
