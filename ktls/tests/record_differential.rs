//! Differential tests: OpenSSL's record layer and the proxy's, fed the same secrets and the
//! same plaintexts, must put the same bytes on the wire, in both directions, for TLS 1.2 and
//! 1.3 and every AEAD suite, with KeyUpdate, close_notify and TLS 1.3 padding; and each side
//! must read what the other wrote.
//!
//! A real handshake on loopback: the server is a `TlsSession` prepared as the proxy prepares
//! it; its keys go to the proxy's layer by the real hand-over (`server_record_layer`), while
//! the SSL object stays alive so OpenSSL can write the same records. The client is an OpenSSL
//! `SslStream` whose socket copies every byte it reads and writes; the client's own keys come
//! from the client's keylog (TLS 1.3) or master secret (TLS 1.2), independently of the server.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ktls::kernel::{KernelCipher, TlsVersion};
use ktls::offload;
use ktls::record::{
    alert, content, server_record_layer, tls12, DirectionKeys, Inbound, RecordError, RecordLayer,
};
use ktls::{IoStatus, Progress, TlsSession};
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::{X509Name, X509};

type Log = Arc<Mutex<Vec<u8>>>;

/// A socket that keeps a copy of what passes through it.
#[derive(Debug)]
struct Tee {
    stream: TcpStream,
    read: Log,
    written: Log,
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.read.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.stream.write(buf)?;
        self.written.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

#[derive(Clone, Copy)]
struct Case {
    version: SslVersion,
    suite: &'static str,
    cipher: KernelCipher,
    /// TLS 1.3 block padding on the server's OpenSSL (and the same padding by hand on ours).
    padding: Option<usize>,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (suite12, suite13, cipher) in [
        (
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            "TLS_AES_128_GCM_SHA256",
            KernelCipher::AesGcm128,
        ),
        (
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            "TLS_AES_256_GCM_SHA384",
            KernelCipher::AesGcm256,
        ),
        (
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            "TLS_CHACHA20_POLY1305_SHA256",
            KernelCipher::Chacha20Poly1305,
        ),
    ] {
        out.push(Case {
            version: SslVersion::TLS1_2,
            suite: suite12,
            cipher,
            padding: None,
        });
        // AWS-LC pads no records: there the padded cases have no library side to compare.
        let paddings: &[Option<usize>] = if ktls::settings::is_aws_lc() {
            &[None]
        } else {
            &[None, Some(64)]
        };
        for &padding in paddings {
            out.push(Case {
                version: SslVersion::TLS1_3,
                suite: suite13,
                cipher,
                padding,
            });
        }
    }
    out
}

fn identity() -> (PKey<openssl::pkey::Private>, X509) {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    let key = PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
    let mut name = X509Name::builder().unwrap();
    name.append_entry_by_text("CN", "localhost").unwrap();
    let name = name.build();
    let mut cert = X509::builder().unwrap();
    cert.set_version(2).unwrap();
    cert.set_serial_number(&BigNum::from_u32(7).unwrap().to_asn1_integer().unwrap())
        .unwrap();
    cert.set_subject_name(&name).unwrap();
    cert.set_issuer_name(&name).unwrap();
    cert.set_pubkey(&key).unwrap();
    cert.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    cert.set_not_after(&Asn1Time::days_from_now(1).unwrap())
        .unwrap();
    cert.sign(&key, MessageDigest::sha256()).unwrap();
    (key, cert.build())
}

fn pin(b: &mut SslContextBuilder, case: &Case) {
    ktls::settings::set_protocol_versions(b, case.version, case.version).unwrap();
    if case.version == SslVersion::TLS1_3 {
        ktls::settings::set_tls13_ciphersuites(b, case.suite).unwrap();
    } else {
        b.set_cipher_list(case.suite).unwrap();
    }
}

fn server_context(case: &Case) -> SslContext {
    let (key, cert) = identity();
    let mut b = SslContextBuilder::new(SslMethod::tls_server()).unwrap();
    ktls::ossl::configure_context(&mut b, false);
    offload::capture_secrets(&mut b).unwrap();
    b.set_private_key(&key).unwrap();
    b.set_certificate(&cert).unwrap();
    pin(&mut b, case);
    if let Some(block) = case.padding {
        ktls::ossl::set_block_padding(&mut b, block).expect("record padding");
    }
    b.build()
}

/// The client's traffic secrets as its keylog reports them.
fn client_context(case: &Case, keylog: Arc<Mutex<Vec<String>>>) -> SslContext {
    let mut b = SslContextBuilder::new(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    pin(&mut b, case);
    b.set_keylog_callback(move |_, line| keylog.lock().unwrap().push(line.to_string()));
    b.build()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn logged_secret(keylog: &[String], label: &str) -> Vec<u8> {
    let line = keylog
        .iter()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label} in the client's keylog"));
    unhex(line.split(' ').nth(2).unwrap())
}

/// The client's record layer, from the client's own key material, and for TLS 1.2 AES-GCM
/// the server's and the client's write key and salt.
fn client_layer(
    case: &Case,
    ssl: &openssl::ssl::SslRef,
    keylog: &[String],
) -> (RecordLayer, Option<(Tls12Gcm, Tls12Gcm)>) {
    let c = case.cipher;
    if case.version == SslVersion::TLS1_3 {
        let read = logged_secret(keylog, "SERVER_TRAFFIC_SECRET_0 ");
        let write = logged_secret(keylog, "CLIENT_TRAFFIC_SECRET_0 ");
        let layer = RecordLayer::new(
            TlsVersion::Tls13,
            c,
            DirectionKeys::from_secret(c, &read, 0).unwrap(),
            DirectionKeys::from_secret(c, &write, 0).unwrap(),
        );
        return (layer, None);
    }
    let mut master = [0u8; 48];
    assert_eq!(ssl.session().unwrap().master_key(&mut master), 48);
    let (mut cr, mut sr) = ([0u8; 32], [0u8; 32]);
    ktls::settings::client_random(ssl, &mut cr);
    ktls::settings::server_random(ssl, &mut sr);
    let block = tls12::key_block(c, &master, &cr, &sr).unwrap();
    let layer = RecordLayer::new(
        TlsVersion::Tls12,
        c,
        DirectionKeys::from_key_iv(&block.server_key, &block.server_iv, 1).unwrap(),
        DirectionKeys::from_key_iv(&block.client_key, &block.client_iv, 1).unwrap(),
    );
    let gcm = (c != KernelCipher::Chacha20Poly1305).then(|| {
        (
            Tls12Gcm {
                key: block.server_key.clone(),
                salt: block.server_iv.clone(),
            },
            Tls12Gcm {
                key: block.client_key.clone(),
                salt: block.client_iv.clone(),
            },
        )
    });
    (layer, gcm)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn write_all(session: &mut TlsSession, fd: BorrowedFd<'_>, mut data: &[u8]) {
    while !data.is_empty() {
        match session.write(fd, data) {
            IoStatus::Done(n) => data = &data[n..],
            other => panic!("OpenSSL write: {other:?}"),
        }
    }
}

/// Takes what the log gathered.
fn drain(log: &Log) -> Vec<u8> {
    std::mem::take(&mut *log.lock().unwrap())
}

/// OpenSSL's TLS 1.3 block padding for an inner plaintext of `len` bytes plus the type.
fn block_padding(len: usize, block: usize) -> usize {
    let rem = (len + 1) % block;
    if rem == 0 {
        0
    } else {
        block - rem
    }
}

/// The whole records of `wire`.
fn records(wire: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 5 <= wire.len() {
        let len = 5 + usize::from(u16::from_be_bytes([wire[at + 3], wire[at + 4]]));
        out.push(&wire[at..at + len]);
        at += len;
    }
    assert_eq!(at, wire.len(), "wire ends in a partial record");
    out
}

/// The key and 4-byte salt a TLS 1.2 AES-GCM writer uses: OpenSSL starts its explicit nonces
/// at a random value (RFC 5288 allows any unique nonce), so reproducing its records needs its
/// nonce, read from the record, and this key.
struct Tls12Gcm {
    key: Vec<u8>,
    salt: Vec<u8>,
}

/// Seals `data` as OpenSSL splits it (records of at most 2^14 bytes, TLS 1.3 block padding)
/// and checks the records against the last ones on `wire`.
fn assert_same(
    layer: &mut RecordLayer,
    gcm12: Option<&Tls12Gcm>,
    data: &[u8],
    case: &Case,
    wire: &[u8],
    what: &str,
) {
    let chunks: Vec<&[u8]> = data.chunks(16384).collect();
    let all = records(wire);
    assert!(all.len() >= chunks.len(), "{what}: too few records");
    let theirs = &all[all.len() - chunks.len()..];
    for (chunk, their) in chunks.iter().zip(theirs) {
        let padding = case.padding.map_or(0, |b| block_padding(chunk.len(), b));
        let mut ours = Vec::new();
        let (read_seq, seq) = layer.sequences();
        match gcm12 {
            Some(g) => {
                // Same key, AAD and sequence; the nonce OpenSSL chose: salt || explicit, as
                // IV XOR sequence.
                let mut iv = g.salt.clone();
                for (e, s) in their[5..13].iter().zip(seq.to_be_bytes()) {
                    iv.push(e ^ s);
                }
                let dummy = DirectionKeys::from_key_iv(&g.key, &g.salt, 0).unwrap();
                let write = DirectionKeys::from_key_iv(&g.key, &iv, seq).unwrap();
                let mut one = RecordLayer::new(layer.version(), layer.cipher(), dummy, write);
                one.seal_record(content::APPLICATION_DATA, &[chunk], 0, &mut ours)
                    .unwrap();
                layer.set_sequences(read_seq, seq + 1);
            }
            None => layer
                .seal_record(content::APPLICATION_DATA, &[chunk], padding, &mut ours)
                .unwrap(),
        }
        assert_eq!(
            &ours[..],
            *their,
            "{what}: record of {} bytes differs",
            chunk.len()
        );
    }
}

/// Opens every record of `wire` with `layer`, returning the application data.
fn open_all(layer: &mut RecordLayer, wire: &mut [u8]) -> (Vec<u8>, Vec<Inbound>) {
    let mut data = Vec::new();
    let mut events = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        match layer.open_record(&mut wire[at..]).unwrap() {
            Inbound::Data { consumed, plain } => {
                data.extend_from_slice(&wire[at + plain.start..at + plain.end]);
                at += consumed;
            }
            Inbound::Incomplete => panic!("partial record at {at} of {}", wire.len()),
            other => {
                at += match &other {
                    Inbound::Closed { consumed }
                    | Inbound::Skip { consumed }
                    | Inbound::KeyUpdated { consumed, .. } => *consumed,
                    _ => unreachable!(),
                };
                events.push(other);
            }
        }
    }
    (data, events)
}

fn run(case: Case) {
    let label = format!(
        "{:?} {} padding={:?}",
        case.version, case.suite, case.padding
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let keylog = Arc::new(Mutex::new(Vec::new()));
    let client_ctx = client_context(&case, keylog.clone());
    let (read_log, write_log): (Log, Log) = Default::default();
    let (rl, wl) = (read_log.clone(), write_log.clone());
    let client = thread::spawn(move || {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let tee = Tee {
            stream,
            read: rl,
            written: wl,
        };
        let ssl = Ssl::new(&client_ctx).unwrap();
        ssl.connect(tee).unwrap()
    });
    let (server_sock, _) = listener.accept().unwrap();
    server_sock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut ssl = Ssl::new(&server_context(&case)).unwrap();
    offload::prepare_ssl(&mut ssl).unwrap();
    ssl.set_accept_state();
    let mut session = TlsSession::new(ssl, server_sock.as_fd()).unwrap();
    assert!(
        matches!(session.handshake(server_sock.as_fd()), Ok(Progress::Done)),
        "{label}"
    );
    let mut client: SslStream<Tee> = client.join().unwrap();
    let mut ours = server_record_layer(&mut session).unwrap_or_else(|e| panic!("{label}: {e}"));
    let (mut client_ours, gcm12) = client_layer(&case, client.ssl(), &keylog.lock().unwrap());
    let (server_gcm, client_gcm) = match &gcm12 {
        Some((s, c)) => (Some(s), Some(c)),
        None => (None, None),
    };
    drain(&read_log);
    drain(&write_log);

    // Server to client: OpenSSL and ours write the same records; the client reads them.
    for (i, len) in [1usize, 10, 1000, 16384, 16385, 26_000]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        write_all(&mut session, server_sock.as_fd(), &data);
        let mut got = vec![0u8; len];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got, data, "{label}");
        // The first read also took OpenSSL's NewSessionTickets (TLS 1.3): they come first.
        let wire = drain(&read_log);
        assert_same(&mut ours, server_gcm, &data, &case, &wire, &label);
    }

    if case.version == SslVersion::TLS1_3 && case.padding.is_none() {
        // A KeyUpdate from the server: OpenSSL's and ours, then data under the new key.
        ktls::ossl::key_update(session.ssl()).unwrap();
        let data = pattern(500, 9);
        write_all(&mut session, server_sock.as_fd(), &data);
        let mut got = vec![0u8; data.len()];
        client.read_exact(&mut got).unwrap();
        let wire = drain(&read_log);
        let mut key_update = Vec::new();
        ours.seal_key_update(false, &mut key_update).unwrap();
        assert!(
            wire.starts_with(&key_update),
            "{label}: KeyUpdate records differ"
        );
        assert_same(
            &mut ours,
            None,
            &data,
            &case,
            &wire[key_update.len()..],
            &label,
        );
    }

    if let Some(block) = case.padding {
        // Ours alone from here: a padded record must read back on OpenSSL's side.
        let data = pattern(77, 3);
        let mut sealed = Vec::new();
        ours.seal_record(content::APPLICATION_DATA, &[&data], block + 5, &mut sealed)
            .unwrap();
        (&server_sock).write_all(&sealed).unwrap();
        let mut got = vec![0u8; data.len()];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got, data, "{label}: padded record");
        drain(&read_log);
    }

    // Client to server: OpenSSL's client and our client-side layer write the same records;
    // the server's layer reads them.
    for (i, len) in [10usize, 16385, 40_000].into_iter().enumerate() {
        let data = pattern(len, 100 + i as u8);
        client.write_all(&data).unwrap();
        let mut wire = drain(&write_log);
        let unpadded = Case {
            padding: None,
            ..case
        };
        assert_same(
            &mut client_ours,
            client_gcm,
            &data,
            &unpadded,
            &wire,
            &label,
        );
        assert_eq!(records(&wire).len(), data.chunks(16384).count());
        let mut from_socket = vec![0u8; wire.len()];
        (&server_sock).read_exact(&mut from_socket).unwrap();
        assert_eq!(from_socket, wire);
        let (got, events) = open_all(&mut ours, &mut wire);
        assert_eq!(got, data, "{label}");
        assert!(events.is_empty(), "{label}: {events:?}");
    }

    if case.version == SslVersion::TLS1_3 {
        // The client asks for our KeyUpdate: same bytes as ours; the server layer follows it
        // and answers, and OpenSSL's client reads data under our new key.
        ktls::ossl::request_key_update(client.ssl()).unwrap();
        let data = pattern(300, 42);
        client.write_all(&data).unwrap();
        let mut sealed = Vec::new();
        client_ours.seal_key_update(true, &mut sealed).unwrap();
        client_ours
            .seal_data(&[&data[..]], usize::MAX, &mut sealed)
            .unwrap();
        let mut wire = drain(&write_log);
        assert_eq!(wire, sealed, "{label}: client KeyUpdate differs");
        let mut from_socket = vec![0u8; wire.len()];
        (&server_sock).read_exact(&mut from_socket).unwrap();
        let (got, events) = open_all(&mut ours, &mut wire);
        assert_eq!(got, data);
        assert!(
            matches!(events[..], [Inbound::KeyUpdated { answer: true, .. }]),
            "{label}: {events:?}"
        );
        let reply = pattern(64, 7);
        let mut answer = Vec::new();
        ours.seal_key_update(false, &mut answer).unwrap();
        ours.seal_data(&[&reply[..]], usize::MAX, &mut answer)
            .unwrap();
        (&server_sock).write_all(&answer).unwrap();
        let mut got = vec![0u8; reply.len()];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got, reply, "{label}: data after our KeyUpdate answer");
    }

    // close_notify from the client: same bytes; the server layer reports the close.
    let _ = client.shutdown();
    let mut wire = drain(&write_log);
    let mut sealed = Vec::new();
    match client_gcm {
        Some(g) => {
            let seq = client_ours.sequences().1;
            let mut iv = g.salt.clone();
            iv.extend(
                wire[5..13]
                    .iter()
                    .zip(seq.to_be_bytes())
                    .map(|(e, s)| e ^ s),
            );
            let dummy = DirectionKeys::from_key_iv(&g.key, &g.salt, 0).unwrap();
            let write = DirectionKeys::from_key_iv(&g.key, &iv, seq).unwrap();
            RecordLayer::new(client_ours.version(), case.cipher, dummy, write)
                .seal_alert(alert::CLOSE_NOTIFY, &mut sealed)
                .unwrap();
        }
        None => client_ours
            .seal_alert(alert::CLOSE_NOTIFY, &mut sealed)
            .unwrap(),
    }
    assert_eq!(wire, sealed, "{label}: close_notify differs");
    let (_, events) = open_all(&mut ours, &mut wire);
    assert!(matches!(events[..], [Inbound::Closed { .. }]), "{label}");
    drop(session);
}

#[test]
fn openssl_and_the_proxy_write_identical_records() {
    for case in cases() {
        run(case);
    }
}

/// A layer pair for the negative tests (keys are arbitrary; both ends share them).
fn pair(version: TlsVersion, cipher: KernelCipher) -> (RecordLayer, RecordLayer) {
    let keys = |seed: u8| {
        let key = vec![seed; cipher.key_len()];
        match version {
            TlsVersion::Tls13 => DirectionKeys::from_secret(cipher, &[seed; 32], 0).unwrap(),
            TlsVersion::Tls12 if cipher == KernelCipher::Chacha20Poly1305 => {
                DirectionKeys::from_key_iv(&key, &[seed; 12], 1).unwrap()
            }
            TlsVersion::Tls12 => DirectionKeys::from_key_iv(&key, &[seed; 4], 1).unwrap(),
        }
    };
    (
        RecordLayer::new(version, cipher, keys(1), keys(2)),
        RecordLayer::new(version, cipher, keys(2), keys(1)),
    )
}

const ALL: [(TlsVersion, KernelCipher); 6] = [
    (TlsVersion::Tls12, KernelCipher::AesGcm128),
    (TlsVersion::Tls12, KernelCipher::AesGcm256),
    (TlsVersion::Tls12, KernelCipher::Chacha20Poly1305),
    (TlsVersion::Tls13, KernelCipher::AesGcm128),
    (TlsVersion::Tls13, KernelCipher::AesGcm256),
    (TlsVersion::Tls13, KernelCipher::Chacha20Poly1305),
];

#[test]
fn every_flipped_bit_of_a_record_is_bad_record_mac() {
    for (version, cipher) in ALL {
        let (mut a, _) = pair(version, cipher);
        let mut record = Vec::new();
        a.seal_data(&[&b"GET / HTTP/1.1\r\n\r\n"[..]], usize::MAX, &mut record)
            .unwrap();
        // Every bit after the length field: explicit nonce, ciphertext, tag.
        for bit in 5 * 8..record.len() * 8 {
            let (_, mut b) = pair(version, cipher);
            let mut tampered = record.clone();
            tampered[bit / 8] ^= 1 << (bit % 8);
            let result = b.open_record(&mut tampered);
            assert_eq!(
                result,
                Err(RecordError::BadRecordMac),
                "{version:?} {cipher:?} bit {bit}"
            );
        }
        let (_, mut b) = pair(version, cipher);
        assert!(matches!(
            b.open_record(&mut record),
            Ok(Inbound::Data { .. })
        ));
    }
}

#[test]
fn oversized_records_are_record_overflow() {
    for (version, cipher) in ALL {
        let (_, mut b) = pair(version, cipher);
        let limit = ktls::record::layer::max_ciphertext(version);
        let mut header = vec![23, 3, 3];
        header.extend_from_slice(&((limit + 1) as u16).to_be_bytes());
        // Refused from the header alone: nothing is buffered for it.
        assert_eq!(
            b.open_record(&mut header),
            Err(RecordError::RecordOverflow(limit + 1))
        );
        // And we never write more than 2^14 bytes of plaintext in one record.
        let (mut a, _) = pair(version, cipher);
        let too_big = vec![0u8; 16385];
        assert_eq!(
            a.seal_record(content::APPLICATION_DATA, &[&too_big], 0, &mut Vec::new()),
            Err(RecordError::RecordOverflow(16385))
        );
    }
}

#[test]
fn a_tls13_inner_plaintext_over_two_to_the_fourteen_is_record_overflow() {
    // A record whose ciphertext length is legal (2^14 + 256 at most) but whose inner plaintext
    // holds 2^14 + 1 data bytes, sealed with OpenSSL directly under RFC 8448's client key.
    let secret = unhex("9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5");
    let key = unhex("17422dda596ed5d9acd890e3c63f5051");
    let iv = unhex("5b78923dee08579033e523d9");
    let c = KernelCipher::AesGcm128;
    let mut server = RecordLayer::new(
        TlsVersion::Tls13,
        c,
        DirectionKeys::from_secret(c, &secret, 0).unwrap(),
        DirectionKeys::from_secret(c, &secret, 0).unwrap(),
    );
    let mut inner = vec![0x41u8; 16385];
    inner.push(content::APPLICATION_DATA);
    let len = (inner.len() + 16) as u16;
    let header = [23, 3, 3, (len >> 8) as u8, len as u8];
    let mut tag = [0u8; 16];
    let body = openssl::symm::encrypt_aead(
        openssl::symm::Cipher::aes_128_gcm(),
        &key,
        Some(&iv),
        &header,
        &inner,
        &mut tag,
    )
    .unwrap();
    let mut record = header.to_vec();
    record.extend_from_slice(&body);
    record.extend_from_slice(&tag);
    assert_eq!(
        server.open_record(&mut record),
        Err(RecordError::RecordOverflow(16385))
    );
}

#[test]
fn sequence_exhaustion_closes_both_ways() {
    for (version, cipher) in ALL {
        let (mut a, mut b) = pair(version, cipher);
        a.set_sequences(0, u64::MAX - 1);
        b.set_sequences(u64::MAX - 1, 0);
        let mut record = Vec::new();
        a.seal_data(&[&b"last"[..]], usize::MAX, &mut record)
            .unwrap();
        assert!(matches!(
            b.open_record(&mut record),
            Ok(Inbound::Data { .. })
        ));
        assert_eq!(
            a.seal_data(&[&b"one more"[..]], usize::MAX, &mut Vec::new()),
            Err(RecordError::SequenceExhausted)
        );
        let mut any = vec![23, 3, 3, 0, 40];
        any.resize(45, 0);
        assert_eq!(b.open_record(&mut any), Err(RecordError::SequenceExhausted));
        assert_eq!(
            RecordError::SequenceExhausted.alert(),
            Some(alert::CLOSE_NOTIFY)
        );
    }
}

#[test]
fn post_handshake_messages_other_than_key_update_are_refused() {
    for (version, cipher) in ALL {
        let (mut a, mut b) = pair(version, cipher);
        let mut record = Vec::new();
        // A NewSessionTicket from a client, or a TLS 1.2 renegotiation ClientHello.
        a.seal_record(content::HANDSHAKE, &[&[4, 0, 0, 0]], 0, &mut record)
            .unwrap();
        assert!(
            matches!(
                b.open_record(&mut record),
                Err(RecordError::UnexpectedMessage(_))
            ),
            "{version:?}"
        );
    }
    let (mut a, mut b) = pair(TlsVersion::Tls13, KernelCipher::AesGcm128);
    let mut record = Vec::new();
    a.seal_record(content::HANDSHAKE, &[&[24, 0, 0, 1, 2]], 0, &mut record)
        .unwrap();
    assert!(matches!(
        b.open_record(&mut record),
        Err(RecordError::IllegalParameter(_))
    ));
    assert_eq!(
        RecordError::IllegalParameter("x").alert(),
        Some(alert::ILLEGAL_PARAMETER)
    );
}

#[test]
fn alerts_are_reported_and_answered_as_the_protocol_says() {
    for (version, cipher) in ALL {
        let (mut a, mut b) = pair(version, cipher);
        let mut record = Vec::new();
        a.seal_alert(alert::BAD_RECORD_MAC, &mut record).unwrap();
        assert_eq!(b.open_record(&mut record), Err(RecordError::PeerAlert(20)));
        assert_eq!(
            RecordError::PeerAlert(20).alert(),
            None,
            "no answer to a fatal alert"
        );
        let (mut a, mut b) = pair(version, cipher);
        let mut record = Vec::new();
        a.seal_alert(alert::CLOSE_NOTIFY, &mut record).unwrap();
        assert!(matches!(
            b.open_record(&mut record),
            Ok(Inbound::Closed { .. })
        ));
    }
    // TLS 1.3: an unprotected record after the handshake.
    let (_, mut b) = pair(TlsVersion::Tls13, KernelCipher::AesGcm128);
    let mut plain_alert = vec![21, 3, 3, 0, 2, 2, 40];
    assert!(matches!(
        b.open_record(&mut plain_alert),
        Err(RecordError::UnexpectedMessage(_))
    ));
}
