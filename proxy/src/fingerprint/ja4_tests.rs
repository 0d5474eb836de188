use super::*;

/// The cipher suites of FoxIO's example (JA4.md, "Raw Output", `JA4_ro`), in that order.
const CIPHERS: [u16; 15] = [
    0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c,
    0x009d, 0x002f, 0x0035,
];

/// Its signature algorithms.
const SIGALGS: [u16; 8] = [
    0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
];

fn vec16(values: &[u16]) -> Vec<u8> {
    let mut out = ((values.len() * 2) as u16).to_be_bytes().to_vec();
    for v in values {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out
}

/// A ClientHello with `ciphers` and extensions of types `types` in that order, with bodies
/// for the ones JA4 reads: a server name, ALPN `alpn`, `sigalgs`, `versions`.
fn hello(
    legacy: u16,
    ciphers: &[u16],
    types: &[u16],
    alpn: &[&[u8]],
    sigalgs: &[u16],
    versions: &[u16],
) -> ClientHello {
    let mut suites = Vec::new();
    for c in ciphers {
        suites.extend_from_slice(&c.to_be_bytes());
    }
    let mut alpn_list = Vec::new();
    for name in alpn {
        alpn_list.push(name.len() as u8);
        alpn_list.extend_from_slice(name);
    }
    let mut alpn_body = (alpn_list.len() as u16).to_be_bytes().to_vec();
    alpn_body.extend_from_slice(&alpn_list);
    let sni = b"\x00\x0e\x00\x00\x0bexample.com".to_vec();
    let sig = vec16(sigalgs);
    let mut ver = vec![(versions.len() * 2) as u8];
    for v in versions {
        ver.extend_from_slice(&v.to_be_bytes());
    }
    let bodies: Vec<(u16, Vec<u8>)> = types
        .iter()
        .map(|&t| {
            let body = match t {
                0x0000 => sni.clone(),
                0x0010 => alpn_body.clone(),
                0x000d => sig.clone(),
                0x002b => ver.clone(),
                _ => Vec::new(),
            };
            (t, body)
        })
        .collect();
    ClientHello::from_parts(
        legacy,
        &suites,
        bodies.iter().map(|(t, b)| (*t, b.as_slice())),
    )
}

#[test]
fn foxio_example() {
    // JA4.md: JA4 = t13d1516h2_8daaf6152771_e5627efa2ab1 for these values (JA4_ro).
    let types = [
        0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023, 0x0012,
        0x002b, 0xff01, 0x000b, 0x000a, 0x0015,
    ];
    let h = hello(
        0x0303,
        &CIPHERS,
        &types,
        &[b"h2", b"http/1.1"],
        &SIGALGS,
        &[0x0304, 0x0303],
    );
    assert_eq!(Ja4::of(&h).as_str(), "t13d1516h2_8daaf6152771_e5627efa2ab1");
    // JA4.md: the same extensions without signature algorithms (no `_`) hash to 6d807ffa2a79.
    let h = hello(0x0303, &CIPHERS, &types, &[b"h2"], &[], &[0x0304]);
    assert_eq!(Ja4::of(&h).as_str(), "t13d1516h2_8daaf6152771_6d807ffa2a79");
}

#[test]
fn chrome_with_grease_as_published() {
    // Chrome 143 as browserleaks.com reported it (ja4_ro, ja4): GREASE added here in the
    // places Chrome sends it, which JA4 leaves out.
    let types = [
        0x3a3a, 0x002d, 0x0033, 0x0010, 0xfe0d, 0x0017, 0x44cd, 0x0000, 0x000b, 0x000a, 0x002b,
        0xff01, 0x0023, 0x0012, 0x0005, 0x000d, 0x001b, 0xdada,
    ];
    let mut ciphers = vec![0x5a5a];
    ciphers.extend_from_slice(&CIPHERS);
    let h = hello(
        0x0303,
        &ciphers,
        &types,
        &[b"h2"],
        &SIGALGS,
        &[0x7a7a, 0x0304, 0x0303],
    );
    assert_eq!(Ja4::of(&h).as_str(), "t13d1516h2_8daaf6152771_d8a2da3f94cd");
}

#[test]
fn tls12_without_server_name_or_alpn() {
    // t12i0202 00: no supported_versions (legacy 0x0303), no SNI, two extensions besides
    // GREASE, no ALPN.
    // b = sha256("002f,c02f")[..12], c = sha256("000a,000d_0401")[..12], as `sha256sum`
    // computes them (printf '002f,c02f' | sha256sum).
    let h = hello(
        0x0303,
        &[0xc02f, 0x002f],
        &[0x000d, 0x000a, 0x0a0a],
        &[],
        &[0x0401],
        &[],
    );
    let want = format!(
        "t12i020200_{}_{}",
        truncated_hash("002f,c02f"),
        truncated_hash("000a,000d_0401")
    );
    assert_eq!(Ja4::of(&h).as_str(), want);
    assert_eq!(want, "t12i020200_37f356531c84_4f3e98f48336");
}

#[test]
fn odd_alpn_versions_and_empty_lists() {
    // A first protocol ending in a non-alphanumeric byte: first hex digit of its first byte,
    // last of its last ("h2\x21" = 68 32 21: "61"). No ciphers: twelve zeros.
    let h = hello(0x0301, &[], &[0x0010], &[b"h2!"], &[], &[]);
    assert_eq!(Ja4::of(&h).as_str(), "t10i000161_000000000000_000000000000");
    // SSL 3.0 and an unknown version.
    let h = hello(0x0300, &[0x002f], &[], &[], &[], &[]);
    assert!(Ja4::of(&h).as_str().starts_with("ts3i0100"));
    let h = hello(0x0303, &[0x002f], &[0x002b], &[], &[], &[0x0305]);
    assert!(Ja4::of(&h).as_str().starts_with("t00i0101"));
}

#[test]
fn grease_values() {
    for v in [0x0a0a, 0x1a1a, 0xfafa] {
        assert!(is_grease(v));
    }
    for v in [0x0a1a, 0x0303, 0xff01, 0x0a0b] {
        assert!(!is_grease(v));
    }
}

#[test]
fn over_quic_the_first_letter_is_q() {
    // JA4.md: `q` for QUIC; the rest is computed as over TCP (here h3 is the first ALPN).
    let types = [0x0000, 0x0010, 0x002b, 0x000d, 0x0039];
    let h = hello(0x0303, &CIPHERS, &types, &[b"h3"], &SIGALGS, &[0x0304]);
    let (tcp, quic) = (Ja4::of(&h), Ja4::of_quic(&h));
    assert!(quic.as_str().starts_with("q13d1505h3_"), "{quic}");
    assert_eq!(quic.as_str()[1..], tcp.as_str()[1..]);
    assert!(tcp.as_str().starts_with('t'));
}
