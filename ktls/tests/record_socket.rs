//! `RecordSocket` on a real socket pair against a peer that seals raw records with its own
//! `RecordLayer` (the keys of both ends fixed): runs of records that carry no data (empty
//! application data, KeyUpdate), which no OpenSSL client can be made to send.
//!
//! The proxy's end tracks readiness as the proxy's worker does (edge-triggered: one
//! `on_readable` per event); every peer write here happens before the event it is given, so
//! a read that returns `WantRead` while records wait in the socket would be a lost wake-up.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use ktls::kernel::{KernelCipher, TlsVersion};
use ktls::record::{
    alert, content, DirectionKeys, Inbound, RecordError, RecordLayer, RecordSocket,
    MAX_KEY_UPDATES_WITHOUT_DATA, MAX_RECORDS_WITHOUT_DATA_PER_READ,
};
use ktls::{IoStatus, TlsError};

const CIPHER: KernelCipher = KernelCipher::AesGcm128;
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";

fn keys(seed: u8) -> DirectionKeys {
    DirectionKeys::from_secret(CIPHER, &[seed; 32], 0).expect("fixed-size test keys")
}

/// The proxy's end (`RecordSocket` on a non-blocking socket) and the peer's (its socket and
/// the layer it seals and opens records with).
struct Pair {
    sock: UnixStream,
    records: RecordSocket,
    peer: UnixStream,
    peer_layer: RecordLayer,
}

fn pair() -> Pair {
    let (sock, peer) = UnixStream::pair().unwrap();
    sock.set_nonblocking(true).unwrap();
    peer.set_nonblocking(true).unwrap();
    let layer = RecordLayer::new(TlsVersion::Tls13, CIPHER, keys(1), keys(2));
    let peer_layer = RecordLayer::new(TlsVersion::Tls13, CIPHER, keys(2), keys(1));
    let mut records = RecordSocket::new(sock.as_fd(), layer);
    records.track_readiness();
    Pair {
        sock,
        records,
        peer,
        peer_layer,
    }
}

impl Pair {
    /// The peer sends `wire`, then one data record holding REQUEST, in one write.
    fn peer_sends_with_request(&mut self, mut wire: Vec<u8>) {
        self.peer_layer
            .seal_record(content::APPLICATION_DATA, &[REQUEST], 0, &mut wire)
            .unwrap();
        self.peer_sends(&wire);
    }

    /// The peer writes `wire` (all of it: the socket's buffer holds it), then the proxy's
    /// poller reports one readiness event.
    fn peer_sends(&mut self, wire: &[u8]) {
        self.peer.write_all(wire).unwrap();
        self.records.on_readable(false);
    }

    fn read(&mut self, buf: &mut [u8]) -> IoStatus {
        self.records.read(self.sock.as_fd(), buf)
    }

    /// Records the proxy's end has opened so far under its current read key.
    fn opened(&self) -> u64 {
        self.records.layer().sequences().0
    }

    /// What the proxy's end has written, opened by the peer: data, the KeyUpdates among it
    /// (as the number of data bytes before each), and how it ended.
    fn peer_receives(&mut self) -> (Vec<u8>, Vec<usize>, Result<(), RecordError>) {
        let mut wire = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match self.peer.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => wire.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("peer read: {e}"),
            }
        }
        let (mut data, mut updates) = (Vec::new(), Vec::new());
        let mut at = 0;
        while at < wire.len() {
            match self.peer_layer.open_record(&mut wire[at..]) {
                Ok(Inbound::Data { consumed, plain }) => {
                    data.extend_from_slice(&wire[at + plain.start..at + plain.end]);
                    at += consumed;
                }
                Ok(Inbound::KeyUpdated { consumed, answer }) => {
                    assert!(!answer, "the proxy never asks for an update");
                    updates.push(data.len());
                    at += consumed;
                }
                Ok(Inbound::Skip { consumed }) => at += consumed,
                Ok(other) => panic!("the proxy wrote {other:?}"),
                Err(e) => return (data, updates, Err(e)),
            }
        }
        (data, updates, Ok(()))
    }
}

fn empty_records(layer: &mut RecordLayer, count: usize, wire: &mut Vec<u8>) {
    for _ in 0..count {
        layer
            .seal_record(content::APPLICATION_DATA, &[], 0, wire)
            .unwrap();
    }
}

#[test]
fn a_read_opens_at_most_the_bound_of_empty_records_and_the_data_behind_them_still_comes() {
    let mut p = pair();
    let empties = 1000;
    let mut wire = Vec::new();
    empty_records(&mut p.peer_layer, empties, &mut wire);
    p.peer_sends_with_request(wire);

    let mut buf = [0u8; 4096];
    let mut yields = 0;
    let got = loop {
        let before = p.opened();
        let status = p.read(&mut buf);
        let opened = p.opened() - before;
        assert!(
            opened <= u64::from(MAX_RECORDS_WITHOUT_DATA_PER_READ),
            "one read opened {opened} records"
        );
        match status {
            IoStatus::Done(0) => {
                assert_eq!(opened, u64::from(MAX_RECORDS_WITHOUT_DATA_PER_READ));
                yields += 1;
            }
            IoStatus::Done(n) => break buf[..n].to_vec(),
            // No event comes for bytes already in the socket: this would be a lost wake-up.
            other => panic!("after {yields} yields, {other:?} with the request unread"),
        }
    };
    assert_eq!(got, REQUEST);
    assert_eq!(yields, empties / MAX_RECORDS_WITHOUT_DATA_PER_READ as usize);
    assert_eq!(p.opened(), empties as u64 + 1);
    assert!(matches!(p.read(&mut buf), IoStatus::WantRead));

    // Still usable both ways.
    assert!(matches!(
        p.records
            .write(p.sock.as_fd(), b"HTTP/1.1 204 No Content\r\n\r\n"),
        IoStatus::Done(27)
    ));
    let (data, updates, end) = p.peer_receives();
    assert_eq!(data, b"HTTP/1.1 204 No Content\r\n\r\n");
    assert!(updates.is_empty());
    assert_eq!(end, Ok(()));
    let mut wire = Vec::new();
    p.peer_layer
        .seal_record(content::APPLICATION_DATA, &[b"next"], 0, &mut wire)
        .unwrap();
    p.peer_sends(&wire);
    assert!(matches!(p.read(&mut buf), IoStatus::Done(4)));
    assert!(!p.records.holds_buffers(), "nothing left buffered");
}

/// A yield is not data: the KeyUpdates of a flood count across reads and across the empty
/// records between them, and the 33rd still ends the connection.
#[test]
fn key_updates_spread_between_runs_of_empty_records_still_end_as_a_flood() {
    let mut p = pair();
    let mut wire = Vec::new();
    for _ in 0..=MAX_KEY_UPDATES_WITHOUT_DATA {
        p.peer_layer.seal_key_update(false, &mut wire).unwrap();
        empty_records(&mut p.peer_layer, 40, &mut wire);
    }
    p.peer_sends(&wire);
    let mut buf = [0u8; 4096];
    let mut yields = 0;
    let end = loop {
        match p.read(&mut buf) {
            IoStatus::Done(0) => yields += 1,
            other => break other,
        }
    };
    assert!(
        matches!(
            end,
            IoStatus::Error(TlsError::Record(RecordError::UnexpectedMessage(
                "KeyUpdate flood"
            )))
        ),
        "{end:?}"
    );
    assert!(yields >= 40, "{yields} yields");
    let (data, updates, alert_sent) = p.peer_receives();
    assert!(data.is_empty() && updates.is_empty());
    assert_eq!(
        alert_sent,
        Err(RecordError::PeerAlert(alert::UNEXPECTED_MESSAGE))
    );
}

/// Requests for our KeyUpdate spread over many reads (each ending in a yield) still get one
/// answer until data is sent, and the data after it is under the new key.
#[test]
fn key_update_requests_spread_over_yields_get_one_answer_before_the_next_data() {
    let mut p = pair();
    let mut wire = Vec::new();
    for _ in 0..20 {
        p.peer_layer.seal_key_update(true, &mut wire).unwrap();
        empty_records(&mut p.peer_layer, 40, &mut wire);
    }
    p.peer_sends_with_request(wire);
    let mut buf = [0u8; 4096];
    let mut yields = 0;
    let got = loop {
        match p.read(&mut buf) {
            IoStatus::Done(0) => yields += 1,
            IoStatus::Done(n) => break buf[..n].to_vec(),
            other => panic!("after {yields} yields: {other:?}"),
        }
    };
    assert_eq!(got, REQUEST);
    assert!(yields >= 20, "{yields} yields");
    let (_, updates, end) = p.peer_receives();
    assert_eq!(updates, vec![0], "one answer for twenty requests");
    assert_eq!(end, Ok(()));
    assert!(matches!(
        p.records.write(p.sock.as_fd(), b"ok"),
        IoStatus::Done(2)
    ));
    let (data, updates, end) = p.peer_receives();
    assert_eq!(
        (data.as_slice(), updates.len(), end),
        (&b"ok"[..], 0, Ok(()))
    );
}
