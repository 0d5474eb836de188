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

mod peers;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ktls::offload;
use ktls::record::{alert, content, server_record_layer, DirectionKeys, Inbound, RecordLayer};
use ktls::{IoStatus, Progress, TlsSession};
use openssl::ssl::{Ssl, SslStream, SslVersion};

use peers::{cases, client_context, client_layer, server_context, Case, Log, Tee, Tls12Gcm};

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

/// One loopback connection of a case, after the handshake: OpenSSL's server session and our
/// layer with its keys, OpenSSL's client and our client-side layer with the client's keys,
/// and what the client's socket read and wrote. (Fields drop in this order: the server
/// session first.)
struct Loopback {
    session: TlsSession,
    ours: RecordLayer,
    client_ours: RecordLayer,
    /// TLS 1.2 AES-GCM: the server's and the client's write key and salt.
    gcm12: Option<(Tls12Gcm, Tls12Gcm)>,
    client: SslStream<Tee>,
    server_sock: TcpStream,
    read_log: Log,
    write_log: Log,
    case: Case,
    label: String,
}

impl Loopback {
    /// The handshake, the server's keys handed over to our layer, the logs emptied.
    fn handshake(case: Case) -> Loopback {
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
        let client: SslStream<Tee> = client.join().unwrap();
        let ours = server_record_layer(&mut session).unwrap_or_else(|e| panic!("{label}: {e}"));
        let (client_ours, gcm12) = client_layer(&case, client.ssl(), &keylog.lock().unwrap());
        drain(&read_log);
        drain(&write_log);
        Loopback {
            session,
            ours,
            client_ours,
            gcm12,
            client,
            server_sock,
            read_log,
            write_log,
            case,
            label,
        }
    }

    /// Server to client: OpenSSL and ours write the same records; the client reads them.
    fn server_to_client(&mut self) {
        let label = &self.label;
        let server_gcm = self.gcm12.as_ref().map(|(s, _)| s);
        for (i, len) in [1usize, 10, 1000, 16384, 16385, 26_000]
            .into_iter()
            .enumerate()
        {
            let data = pattern(len, i as u8);
            write_all(&mut self.session, self.server_sock.as_fd(), &data);
            let mut got = vec![0u8; len];
            self.client.read_exact(&mut got).unwrap();
            assert_eq!(got, data, "{label}");
            // The first read also took OpenSSL's NewSessionTickets (TLS 1.3): they come first.
            let wire = drain(&self.read_log);
            assert_same(&mut self.ours, server_gcm, &data, &self.case, &wire, label);
        }
    }

    /// A KeyUpdate from the server: OpenSSL's and ours, then data under the new key.
    fn server_key_update(&mut self) {
        let label = &self.label;
        ktls::ossl::key_update(self.session.ssl()).unwrap();
        let data = pattern(500, 9);
        write_all(&mut self.session, self.server_sock.as_fd(), &data);
        let mut got = vec![0u8; data.len()];
        self.client.read_exact(&mut got).unwrap();
        let wire = drain(&self.read_log);
        let mut key_update = Vec::new();
        self.ours.seal_key_update(false, &mut key_update).unwrap();
        assert!(
            wire.starts_with(&key_update),
            "{label}: KeyUpdate records differ"
        );
        assert_same(
            &mut self.ours,
            None,
            &data,
            &self.case,
            &wire[key_update.len()..],
            label,
        );
    }

    /// Ours alone from here: a padded record must read back on OpenSSL's side.
    fn padded_record_reads_back(&mut self, block: usize) {
        let data = pattern(77, 3);
        let mut sealed = Vec::new();
        self.ours
            .seal_record(content::APPLICATION_DATA, &[&data], block + 5, &mut sealed)
            .unwrap();
        (&self.server_sock).write_all(&sealed).unwrap();
        let mut got = vec![0u8; data.len()];
        self.client.read_exact(&mut got).unwrap();
        assert_eq!(got, data, "{}: padded record", self.label);
        drain(&self.read_log);
    }

    /// Client to server: OpenSSL's client and our client-side layer write the same records;
    /// the server's layer reads them.
    fn client_to_server(&mut self) {
        let label = &self.label;
        let client_gcm = self.gcm12.as_ref().map(|(_, c)| c);
        for (i, len) in [10usize, 16385, 40_000].into_iter().enumerate() {
            let data = pattern(len, 100 + i as u8);
            self.client.write_all(&data).unwrap();
            let mut wire = drain(&self.write_log);
            let unpadded = Case {
                padding: None,
                ..self.case
            };
            assert_same(
                &mut self.client_ours,
                client_gcm,
                &data,
                &unpadded,
                &wire,
                label,
            );
            assert_eq!(records(&wire).len(), data.chunks(16384).count());
            let mut from_socket = vec![0u8; wire.len()];
            (&self.server_sock).read_exact(&mut from_socket).unwrap();
            assert_eq!(from_socket, wire);
            let (got, events) = open_all(&mut self.ours, &mut wire);
            assert_eq!(got, data, "{label}");
            assert!(events.is_empty(), "{label}: {events:?}");
        }
    }

    /// The client asks for our KeyUpdate: same bytes as ours; the server layer follows it
    /// and answers, and OpenSSL's client reads data under our new key.
    fn client_key_update(&mut self) {
        let label = &self.label;
        ktls::ossl::request_key_update(self.client.ssl()).unwrap();
        let data = pattern(300, 42);
        self.client.write_all(&data).unwrap();
        let mut sealed = Vec::new();
        self.client_ours.seal_key_update(true, &mut sealed).unwrap();
        self.client_ours
            .seal_data(&[&data[..]], usize::MAX, &mut sealed)
            .unwrap();
        let mut wire = drain(&self.write_log);
        assert_eq!(wire, sealed, "{label}: client KeyUpdate differs");
        let mut from_socket = vec![0u8; wire.len()];
        (&self.server_sock).read_exact(&mut from_socket).unwrap();
        let (got, events) = open_all(&mut self.ours, &mut wire);
        assert_eq!(got, data);
        assert!(
            matches!(events[..], [Inbound::KeyUpdated { answer: true, .. }]),
            "{label}: {events:?}"
        );
        let reply = pattern(64, 7);
        let mut answer = Vec::new();
        self.ours.seal_key_update(false, &mut answer).unwrap();
        self.ours
            .seal_data(&[&reply[..]], usize::MAX, &mut answer)
            .unwrap();
        (&self.server_sock).write_all(&answer).unwrap();
        let mut got = vec![0u8; reply.len()];
        self.client.read_exact(&mut got).unwrap();
        assert_eq!(got, reply, "{label}: data after our KeyUpdate answer");
    }

    /// close_notify from the client: same bytes; the server layer reports the close.
    fn close_notify(mut self) {
        let label = &self.label;
        let _ = self.client.shutdown();
        let mut wire = drain(&self.write_log);
        let mut sealed = Vec::new();
        match self.gcm12.as_ref().map(|(_, c)| c) {
            Some(g) => {
                let seq = self.client_ours.sequences().1;
                let mut iv = g.salt.clone();
                iv.extend(
                    wire[5..13]
                        .iter()
                        .zip(seq.to_be_bytes())
                        .map(|(e, s)| e ^ s),
                );
                let dummy = DirectionKeys::from_key_iv(&g.key, &g.salt, 0).unwrap();
                let write = DirectionKeys::from_key_iv(&g.key, &iv, seq).unwrap();
                RecordLayer::new(self.client_ours.version(), self.case.cipher, dummy, write)
                    .seal_alert(alert::CLOSE_NOTIFY, &mut sealed)
                    .unwrap();
            }
            None => self
                .client_ours
                .seal_alert(alert::CLOSE_NOTIFY, &mut sealed)
                .unwrap(),
        }
        assert_eq!(wire, sealed, "{label}: close_notify differs");
        let (_, events) = open_all(&mut self.ours, &mut wire);
        assert!(matches!(events[..], [Inbound::Closed { .. }]), "{label}");
    }
}

/// One case, step by step, on one connection.
fn run(case: Case) {
    let mut conn = Loopback::handshake(case);
    conn.server_to_client();
    if case.version == SslVersion::TLS1_3 && case.padding.is_none() {
        conn.server_key_update();
    }
    if let Some(block) = case.padding {
        conn.padded_record_reads_back(block);
    }
    conn.client_to_server();
    if case.version == SslVersion::TLS1_3 {
        conn.client_key_update();
    }
    conn.close_notify();
}

#[test]
fn openssl_and_the_proxy_write_identical_records() {
    for case in cases() {
        run(case);
    }
}
