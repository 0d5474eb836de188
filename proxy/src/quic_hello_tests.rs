//! The capture of a QUIC session's ClientHello from the CRYPTO stream's bytes, as quinn-proto
//! hands them to the session: whole, split anywhere, followed by later handshake messages.

use ktls::hello::ClientHello;

use super::{accepts_psk, Capture, MAX_HELLO};

/// curl's ClientHello as a handshake message (the record header cut off), and what follows
/// it on the stream in a real handshake (a Finished message: type 20, 32 bytes).
fn stream() -> (Vec<u8>, Vec<u8>) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ktls/testdata/client_hello/curl_h2.bin"
    );
    let record = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let message = record[5..].to_vec();
    let mut finished = vec![20, 0, 0, 32];
    finished.extend_from_slice(&[0xaa; 32]);
    (message, finished)
}

fn fed(pieces: &[&[u8]]) -> Capture {
    let mut capture = Capture::Reading(Vec::new());
    for piece in pieces {
        capture.feed(piece);
    }
    capture
}

fn parsed(capture: Capture) -> ClientHello {
    match capture {
        Capture::Parsed(hello) => hello,
        other => panic!("not parsed: {other:?}"),
    }
}

#[test]
fn a_hello_in_one_call_is_parsed_where_it_lies() {
    let (message, finished) = stream();
    let want = ClientHello::parse(&message).expect("curl's hello");
    assert_eq!(parsed(fed(&[&message])), want);
    // With the next message in the same call: the hello only.
    let whole = [message.as_slice(), &finished].concat();
    assert_eq!(parsed(fed(&[&whole])), want);
}

#[test]
fn a_hello_split_anywhere_is_the_same_hello() {
    let (message, finished) = stream();
    let want = ClientHello::parse(&message).expect("curl's hello");
    let whole = [message.as_slice(), &finished].concat();
    for at in 1..whole.len() {
        let (a, b) = whole.split_at(at);
        assert_eq!(parsed(fed(&[a, b])), want, "split at {at}");
    }
    // Three pieces, the header itself split.
    for (x, y) in [(1, 3), (2, 9), (3, 4), (4, 200)] {
        let pieces = [&whole[..x], &whole[x..y], &whole[y..]];
        assert_eq!(parsed(fed(&pieces)), want, "split at {x} and {y}");
    }
    // A byte at a time.
    let bytes: Vec<&[u8]> = whole.chunks(1).collect();
    assert_eq!(parsed(fed(&bytes)), want);
}

#[test]
fn a_split_hello_is_held_in_one_buffer_of_its_length() {
    let (message, _) = stream();
    let mut capture = Capture::Reading(Vec::new());
    capture.feed(&message[..100]);
    match &capture {
        Capture::Reading(buf) => {
            assert_eq!(buf.len(), 100);
            assert_eq!(buf.capacity(), message.len());
        }
        other => panic!("{other:?}"),
    }
    capture.feed(&message[100..]);
    assert!(matches!(capture, Capture::Parsed(_)));
}

#[test]
fn nothing_is_copied_after_the_hello() {
    let (message, finished) = stream();
    let mut capture = fed(&[&message]);
    let before = format!("{capture:?}");
    for _ in 0..3 {
        capture.feed(&finished);
    }
    assert_eq!(format!("{capture:?}"), before);
}

#[test]
fn another_message_first_or_a_hello_over_the_bound_is_not_captured() {
    let (message, _) = stream();
    let mut server_hello = message.clone();
    server_hello[0] = 2;
    assert!(matches!(fed(&[&server_hello]), Capture::Over));
    // Too long: refused on its header, before anything is held.
    let len = MAX_HELLO + 1 - 4;
    let header = [1, (len >> 16) as u8, (len >> 8) as u8, len as u8];
    assert!(matches!(fed(&[&header]), Capture::Over));
    assert!(matches!(fed(&[&header[..2], &header[2..]]), Capture::Over));
    // At the bound: held (a hello of that length would be parsed once whole).
    let len = MAX_HELLO - 4;
    let header = [1, (len >> 16) as u8, (len >> 8) as u8, len as u8];
    assert!(matches!(fed(&[&header]), Capture::Reading(_)));
    // A malformed body: not a hello.
    let mut bad = message.clone();
    bad.truncate(40);
    bad[1..4].copy_from_slice(&[0, 0, 36]);
    assert!(matches!(fed(&[&bad]), Capture::Over));
}

#[test]
fn the_wrapper_costs_a_connection_under_a_hundred_bytes() {
    // What a connection keeps after its handshake, besides rustls's own session.
    assert!(std::mem::size_of::<super::CapturingSession>() <= 96);
}

/// A whole handshake between a rustls QUIC client and a [`super::Capturing`] session, the
/// client's flights handed to the session in pieces, as quinn-proto hands CRYPTO data.
mod through_rustls {
    use std::sync::Arc;

    use ktls::hello::ClientHello;
    use quinn_proto::crypto::{ServerConfig as _, Session};
    use quinn_proto::transport_parameters::TransportParameters;
    use quinn_proto::Side;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified};
    use rustls::crypto::aws_lc_rs;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};

    use crate::quic_hello::{completed, Capturing};

    /// The test's client trusts any certificate (the server's is made up here).
    #[derive(Debug)]
    struct AnyCertificate;

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }

        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            let provider = aws_lc_rs::default_provider();
            provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    /// A self-signed P-256 certificate and its key.
    fn certificate() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        use openssl::{asn1, ec, hash, nid, pkey, x509};
        let group = ec::EcGroup::from_curve_name(nid::Nid::X9_62_PRIME256V1).unwrap();
        let key = pkey::PKey::from_ec_key(ec::EcKey::generate(&group).unwrap()).unwrap();
        let mut name = x509::X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", "site.test").unwrap();
        let name = name.build();
        let mut cert = x509::X509::builder().unwrap();
        cert.set_version(2).unwrap();
        cert.set_subject_name(&name).unwrap();
        cert.set_issuer_name(&name).unwrap();
        cert.set_pubkey(&key).unwrap();
        cert.set_not_before(&asn1::Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        cert.set_not_after(&asn1::Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        cert.sign(&key, hash::MessageDigest::sha256()).unwrap();
        let der = cert.build().to_der().unwrap();
        let key = PrivateKeyDer::try_from(key.private_key_to_pkcs8().unwrap()).unwrap();
        (CertificateDer::from(der), key)
    }

    fn server() -> Box<dyn Session> {
        let (cert, key) = certificate();
        let provider = Arc::new(aws_lc_rs::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let quic = quinn_proto::crypto::rustls::QuicServerConfig::try_from(tls).unwrap();
        let params = TransportParameters::read(Side::Client, &mut &b""[..]).unwrap();
        Arc::new(Capturing::new(quic)).start_session(1, &params)
    }

    fn client() -> rustls::quic::ClientConnection {
        let provider = Arc::new(aws_lc_rs::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate))
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let name = ServerName::try_from("site.test").unwrap();
        // One transport parameter (initial_max_data, 0): rustls sends them as they are.
        let params = vec![0x04, 0x01, 0x00];
        rustls::quic::ClientConnection::new(Arc::new(tls), rustls::quic::Version::V1, name, params)
            .unwrap()
    }

    /// Everything `write` has to send now, one piece per encryption level (rustls reads
    /// each level's bytes in calls of their own). `write` says when the keys change after
    /// what it wrote.
    fn flight(mut write: impl FnMut(&mut Vec<u8>) -> bool) -> Vec<Vec<u8>> {
        let mut levels = vec![Vec::new()];
        loop {
            let Some(out) = levels.last_mut() else {
                return levels;
            };
            let before = out.len();
            let changed = write(out);
            if changed {
                levels.push(Vec::new());
            } else if out.len() == before {
                levels.retain(|level| !level.is_empty());
                return levels;
            }
        }
    }

    /// `bytes` in pieces of `piece` bytes to the server.
    fn read_in_pieces(server: &mut dyn Session, bytes: &[u8], piece: usize) {
        for chunk in bytes.chunks(piece) {
            server.read_handshake(chunk).unwrap();
        }
    }

    #[test]
    fn the_session_gives_the_clienthello_once_when_the_handshake_is_over() {
        for piece in [1, 7, 100, 100_000] {
            let (mut server, mut client) = (server(), client());
            let hello = flight(|out| client.write_hs(out).is_some()).concat();
            let want = ClientHello::parse(&hello).expect("rustls's ClientHello");
            assert!(want.extension(0x39).is_some(), "QUIC transport parameters");
            read_in_pieces(&mut *server, &hello, piece);
            // Not before the handshake is over.
            assert!(completed(&*server).hello.is_none());
            for level in flight(|out| server.write_handshake(out).is_some()) {
                client.read_hs(&level).unwrap();
            }
            for level in flight(|out| client.write_hs(out).is_some()) {
                read_in_pieces(&mut *server, &level, piece);
            }
            assert!(!server.is_handshaking(), "piece {piece}");
            let done = completed(&*server);
            assert_eq!(done.server_name.as_deref(), Some("site.test"));
            assert_eq!(done.hello, Some(want), "piece {piece}");
            assert!(!done.resumed, "a full handshake");
            // Once.
            assert!(completed(&*server).hello.is_none());
        }
    }
}

/// A ServerHello with a 32-byte session id and `extensions` (type, body).
fn server_hello(extensions: &[(u16, &[u8])]) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend([0u8; 32]);
    body.push(32);
    body.extend([9u8; 32]);
    body.extend([0x13, 0x01, 0]);
    let mut ext = Vec::new();
    for (kind, data) in extensions {
        ext.extend(kind.to_be_bytes());
        ext.extend((data.len() as u16).to_be_bytes());
        ext.extend(*data);
    }
    body.extend((ext.len() as u16).to_be_bytes());
    body.extend(ext);
    let mut message = vec![2, 0, 0, body.len() as u8];
    message.extend(body);
    message
}

#[test]
fn a_serverhello_accepts_a_ticket_with_pre_shared_key_only() {
    let versions: (u16, &[u8]) = (43, &[3, 4]);
    let share: (u16, &[u8]) = (51, &[0; 36]);
    let psk: (u16, &[u8]) = (41, &[0, 0]);
    assert_eq!(accepts_psk(&server_hello(&[versions, share])), Some(false));
    assert_eq!(
        accepts_psk(&server_hello(&[versions, share, psk])),
        Some(true)
    );
    assert_eq!(accepts_psk(&server_hello(&[psk, versions])), Some(true));
    // Not a ServerHello, or cut short: no answer.
    assert_eq!(accepts_psk(&[8, 0, 0, 2, 0, 0]), None);
    let whole = server_hello(&[versions, psk]);
    for len in [0, 1, 40, 75, whole.len() - 1] {
        assert_ne!(accepts_psk(&whole[..len]), Some(true), "cut to {len}");
    }
}
