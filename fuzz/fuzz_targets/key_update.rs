//! Fuzz `RecordSocket`'s KeyUpdate handling on a real socket pair, against a simulated peer
//! that seals its records with a `RecordLayer` sharing the socket's keys (TLS 1.3), so they
//! pass authentication and reach the socket-level state: the answer owed to a request
//! (`answered_since_data`), the KeyUpdates counted since the last data
//! (`updates_without_data`, `MAX_KEY_UPDATES_WITHOUT_DATA`), the per-read bound on records
//! without data (`MAX_RECORDS_WITHOUT_DATA_PER_READ`), answers queued behind a write the
//! socket took only in part, and the readiness rule (one `on_readable` per peer write, as
//! the proxy's edge-triggered worker gives).
//!
//! Input: a control byte (bits 0-1 the cipher, bit 2 a small send buffer on the socket's
//! end so writes return `WantWrite`, bits 3-4 the read buffer: 1, 7, 4096 or 20000 bytes),
//! then ops of two bytes (op, argument); see [`Op`]. Seeds: fuzz/seeds/key_update.py.
//!
//! A model predicts what the socket must do from what the peer sent and what was written:
//! - the application data read is exactly the data the peer sealed, in order, up to the
//!   record that ends the connection; a read ends as the model says (`WantRead` once every
//!   whole record delivered is opened, `Closed`, or the error of the record that is fatal:
//!   a 33rd KeyUpdate without data in between is "KeyUpdate flood");
//! - one read opens at most `MAX_RECORDS_WITHOUT_DATA_PER_READ` records (it is called at
//!   least records/bound times), and `Done(0)` never loses readiness: the reads go on
//!   without another event until `WantRead`;
//! - the peer receives exactly the bytes the socket reported written, and our KeyUpdates
//!   exactly where the model puts them: one per request received while no answer is
//!   pending, after the data sealed before it and before any sealed after it; never two
//!   without data between them; data after it opens under the new key;
//! - once a read failed, the peer's last record is the matching alert.
//!
//! Raw bytes and flipped bits make the rest of the peer's stream unpredictable: from there
//! only the data read must stay a prefix of what the peer sealed (and nothing may panic).
#![no_main]
#![forbid(unsafe_code)]

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use ktls::kernel::{KernelCipher, TlsVersion};
use ktls::record::{
    alert, content, DirectionKeys, Inbound, RecordError, RecordLayer, RecordSocket,
    MAX_KEY_UPDATES_WITHOUT_DATA, MAX_RECORDS_WITHOUT_DATA_PER_READ,
};
use ktls::{IoStatus, TlsError};
use libfuzzer_sys::fuzz_target;

#[path = "key_update/script.rs"]
mod script;
use script::{End, Kind, Op, OPS};

const CIPHERS: [KernelCipher; 3] = [
    KernelCipher::AesGcm128,
    KernelCipher::AesGcm256,
    KernelCipher::Chacha20Poly1305,
];
const READ_BUFS: [usize; 4] = [1, 7, 4096, 20_000];
/// Reads in one series before the harness calls it a loop.
const MAX_READS: usize = 1_000_000;

/// The byte at `at` of a data stream (different for each direction).
fn stream_byte(at: usize, salt: u8) -> u8 {
    (at as u8).wrapping_mul(31).wrapping_add((at >> 8) as u8) ^ salt
}

fn keys(cipher: KernelCipher, seed: u8) -> DirectionKeys {
    DirectionKeys::from_secret(cipher, &[seed; 32], 0).expect("fixed-size test keys")
}

struct Harness {
    sock: UnixStream,
    records: RecordSocket,
    read_buf: Vec<u8>,
    peer: UnixStream,
    /// The peer's layer: seals what it sends, opens what the socket wrote.
    peer_layer: RecordLayer,

    // The peer's direction.
    /// Sealed records, delivered up to `delivered`.
    wire: Vec<u8>,
    delivered: usize,
    /// Each record's end in `wire` and what it is.
    sent: Vec<(usize, Kind)>,
    /// Records the model has seen the socket open.
    opened: usize,
    /// The application data the peer sealed.
    peer_data: Vec<u8>,
    /// What the socket's reads returned.
    got: Vec<u8>,
    /// The data the model expects read so far (a prefix of `peer_data`).
    expect_got: usize,
    fin: bool,
    tainted: bool,
    /// How the socket's reading ended for good (`Closed`, `Eof` or an error).
    ended: Option<End>,
    updates_without_data: u32,
    requests_sent: usize,

    // The socket's direction.
    /// Bytes the socket reported written; `pending`: a write that returned `WantWrite`.
    written: usize,
    pending: Option<usize>,
    /// Data bytes sealed (reported or not).
    sealed: usize,
    answered_since_data: bool,
    /// Where (after how many data bytes) our KeyUpdates must come.
    expect_updates: Vec<usize>,
    /// What the peer opened.
    peer_got: Vec<u8>,
    peer_updates: Vec<usize>,
    peer_end: Option<RecordError>,
    peer_rx: Vec<u8>,
    failed: bool,
}

impl Harness {
    fn new(control: u8) -> Harness {
        let cipher = CIPHERS[usize::from(control & 3) % CIPHERS.len()];
        let (sock, peer) = UnixStream::pair().expect("socketpair");
        sock.set_nonblocking(true).expect("non-blocking");
        peer.set_nonblocking(true).expect("non-blocking");
        if control & 4 != 0 {
            // A Unix socket charges what waits in the peer's queue to the sender's buffer:
            // a few records fill it.
            let _ = socket2::SockRef::from(&sock).set_send_buffer_size(4096);
        }
        let layer = RecordLayer::new(TlsVersion::Tls13, cipher, keys(cipher, 1), keys(cipher, 2));
        let peer_layer =
            RecordLayer::new(TlsVersion::Tls13, cipher, keys(cipher, 2), keys(cipher, 1));
        let mut records = RecordSocket::new(sock.as_fd(), layer);
        records.track_readiness();
        Harness {
            sock,
            records,
            read_buf: vec![0; READ_BUFS[usize::from((control >> 3) & 3)]],
            peer,
            peer_layer,
            wire: Vec::new(),
            delivered: 0,
            sent: Vec::new(),
            opened: 0,
            peer_data: Vec::new(),
            got: Vec::new(),
            expect_got: 0,
            fin: false,
            tainted: false,
            ended: None,
            updates_without_data: 0,
            requests_sent: 0,
            written: 0,
            pending: None,
            sealed: 0,
            answered_since_data: false,
            expect_updates: Vec::new(),
            peer_got: Vec::new(),
            peer_updates: Vec::new(),
            peer_end: None,
            peer_rx: Vec::new(),
            failed: false,
        }
    }

    fn seal(&mut self, content_type: u8, payload: &[u8], padding: usize, kind: Kind) {
        if self.fin {
            return;
        }
        self.peer_layer
            .seal_record(content_type, &[payload], padding, &mut self.wire)
            .expect("the peer's records fit");
        self.sent.push((self.wire.len(), kind));
    }

    fn op(&mut self, op: Op, arg: u8, input: &mut &[u8]) {
        match op {
            Op::Empty => {
                let padding = if arg & 0x80 != 0 { 200 } else { 0 };
                for _ in 0..=(arg & 63) {
                    self.seal(content::APPLICATION_DATA, &[], padding, Kind::Nothing);
                }
            }
            Op::KeyUpdate | Op::KeyUpdateRequested => {
                self.key_update(matches!(op, Op::KeyUpdateRequested))
            }
            Op::KeyUpdates => {
                for _ in 0..=(arg & 63) {
                    self.key_update(arg & 0x40 != 0);
                }
            }
            Op::Data => self.data(1 + 64 * usize::from(arg)),
            Op::UserCanceled => {
                self.seal(content::ALERT, &[1, alert::USER_CANCELED], 0, Kind::Nothing)
            }
            Op::Ticket => self.seal(
                content::HANDSHAKE,
                &[4, 0, 0, 1, 0],
                0,
                Kind::Fatal(RecordError::UnexpectedMessage("post-handshake message")),
            ),
            Op::BadKeyUpdate => self.seal(
                content::HANDSHAKE,
                &[24, 0, 0, 1, 2],
                0,
                Kind::Fatal(RecordError::IllegalParameter("KeyUpdate request")),
            ),
            Op::CloseNotify => self.seal(content::ALERT, &[1, alert::CLOSE_NOTIFY], 0, Kind::Close),
            Op::Garbage => {
                let (raw, rest) = input.split_at(usize::from(arg).min(input.len()));
                *input = rest;
                if !self.fin && !raw.is_empty() {
                    self.wire.extend_from_slice(raw);
                    self.sent.push((self.wire.len(), Kind::Garbage));
                }
            }
            Op::Flip => self.flip(usize::from(arg)),
            Op::Deliver => {
                let want = if arg == 255 {
                    usize::MAX
                } else {
                    16 * (usize::from(arg) + 1)
                };
                self.deliver(want);
            }
            Op::Read => self.read(),
            Op::Write => self.write(1 + 157 * usize::from(arg)),
            Op::PeerReads => self.peer_reads(),
            Op::Fin => {
                if !self.fin {
                    self.fin = true;
                    let _ = self.peer.shutdown(Shutdown::Write);
                    self.records.on_readable(true);
                }
            }
        }
    }

    /// The peer seals an application-data record of `len` bytes of its data stream.
    fn data(&mut self, len: usize) {
        let start = self.peer_data.len();
        let data: Vec<u8> = (start..start + len).map(|i| stream_byte(i, 0x5a)).collect();
        if !self.fin {
            self.peer_data.extend_from_slice(&data);
        }
        self.seal(content::APPLICATION_DATA, &data, 0, Kind::Data(len));
    }

    /// Flips bit `bit` (modulo their size) of the bytes not yet delivered.
    fn flip(&mut self, bit: usize) {
        let undelivered = self.wire.len() - self.delivered;
        if undelivered == 0 {
            return;
        }
        let bit = bit % (undelivered * 8);
        let at = self.delivered + bit / 8;
        self.wire[at] ^= 1 << (bit % 8);
        // The record holding the flipped byte is garbage now.
        if let Some(record) = self.sent.iter_mut().find(|(end, _)| at < *end) {
            record.1 = Kind::Garbage;
        }
    }

    fn key_update(&mut self, requested: bool) {
        if self.fin {
            return;
        }
        self.peer_layer
            .seal_key_update(requested, &mut self.wire)
            .expect("TLS 1.3");
        self.sent
            .push((self.wire.len(), Kind::KeyUpdate { requested }));
        self.requests_sent += usize::from(requested);
    }

    /// The peer writes up to `want` more bytes (as many as the socket takes), then the
    /// socket's poller reports them.
    fn deliver(&mut self, want: usize) {
        if self.fin {
            return;
        }
        let end = self.wire.len().min(self.delivered.saturating_add(want));
        while self.delivered < end {
            match self.peer.write(&self.wire[self.delivered..end]) {
                Ok(n) => self.delivered += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("peer write: {e}"),
            }
        }
        self.records.on_readable(false);
    }

    /// Reads until `WantRead` or the end, then checks it against the model.
    fn read(&mut self) {
        let mut calls = 0usize;
        let end = loop {
            calls += 1;
            assert!(calls < MAX_READS, "reads never reached WantRead");
            match self.records.read(self.sock.as_fd(), &mut self.read_buf) {
                IoStatus::Done(0) => {}
                IoStatus::Done(n) => self.got.extend_from_slice(&self.read_buf[..n]),
                IoStatus::WantRead => break End::WantRead,
                IoStatus::WantWrite => panic!("a read returned WantWrite"),
                IoStatus::Closed => break End::Closed,
                IoStatus::Error(TlsError::UnexpectedEof) => break End::Eof,
                IoStatus::Error(TlsError::Record(e)) => break End::Error(e),
                IoStatus::Error(_) => break End::Other,
            }
        };
        assert!(
            self.peer_data.starts_with(&self.got),
            "read data the peer did not send"
        );
        if let Some(ended) = &self.ended {
            // Finished for good: every later read says so at once (an end of stream inside a
            // record again; a failed connection as "already failed").
            assert!(calls == 1, "reads after the end");
            match ended {
                End::Closed | End::Eof => assert_eq!(&end, ended),
                _ => assert_eq!(end, End::Other, "after {ended:?}"),
            }
            return;
        }
        let opened_before = self.opened;
        let expected = self.model_reads();
        if self.tainted {
            if end != End::WantRead {
                self.failed = !matches!(end, End::Closed | End::Eof);
                self.ended = Some(end);
            }
            return;
        }
        let expected = expected.expect("untainted");
        assert_eq!(end, expected, "reads ended otherwise than the model");
        assert_eq!(self.got.len(), self.expect_got, "data read");
        // Each read opened at most the bound of records (the data ones are cut by the read
        // buffer, so only a lower bound on the calls holds).
        let opened = self.opened - opened_before;
        let bound = MAX_RECORDS_WITHOUT_DATA_PER_READ as usize;
        assert!(
            calls * bound >= opened,
            "{opened} records opened in {calls} reads"
        );
        if end != End::WantRead {
            self.failed = !matches!(end, End::Closed | End::Eof);
            self.ended = Some(end);
        }
    }

    /// What the socket's reads must have done with the records delivered so far; `None`
    /// once the stream has garbage in it.
    fn model_reads(&mut self) -> Option<End> {
        while let Some((end, kind)) = self.sent.get(self.opened).cloned() {
            let start = match self.opened {
                0 => 0,
                n => self.sent[n - 1].0,
            };
            // Garbage may be refused from its first bytes (a header), before it is whole.
            if matches!(kind, Kind::Garbage) && self.delivered > start {
                self.tainted = true;
                return None;
            }
            if end > self.delivered {
                break;
            }
            self.opened += 1;
            match kind {
                Kind::Data(len) => {
                    self.expect_got += len;
                    self.updates_without_data = 0;
                }
                Kind::Nothing => {}
                Kind::KeyUpdate { requested } => {
                    self.updates_without_data += 1;
                    if self.updates_without_data > MAX_KEY_UPDATES_WITHOUT_DATA {
                        return Some(End::Error(RecordError::UnexpectedMessage(
                            "KeyUpdate flood",
                        )));
                    }
                    // One answer until data is sealed, after the data sealed so far.
                    if requested && !self.answered_since_data {
                        self.expect_updates.push(self.sealed);
                        self.answered_since_data = true;
                    }
                }
                Kind::Fatal(e) => return Some(End::Error(e)),
                Kind::Close => return Some(End::Closed),
                Kind::Garbage => {
                    self.tainted = true;
                    return None;
                }
            }
        }
        if self.tainted {
            return None;
        }
        if self.fin {
            // Every record not opened ends past what was delivered: bytes after the last
            // opened one are a record cut by the end of the stream.
            let opened_end = match self.opened {
                0 => 0,
                n => self.sent[n - 1].0,
            };
            return Some(if self.delivered > opened_end {
                End::Eof
            } else {
                End::Closed
            });
        }
        Some(End::WantRead)
    }

    /// One write (or the retry of the one left at `WantWrite`, with the same bytes).
    fn write(&mut self, len: usize) {
        let len = self.pending.unwrap_or(len);
        let data: Vec<u8> = (self.written..self.written + len)
            .map(|i| stream_byte(i, 0xa5))
            .collect();
        let (_, seq_before) = self.records.layer().sequences();
        let status = self
            .records
            .writev(self.sock.as_fd(), &[IoSlice::new(&data)]);
        let (_, seq_after) = self.records.layer().sequences();
        if self.failed {
            assert!(matches!(status, IoStatus::Error(_)), "wrote after failing");
            return;
        }
        // No KeyUpdate is sealed inside a write, so a later write sequence number means the
        // data was sealed now (under the current key: a new answer is owed to a request).
        if seq_after != seq_before {
            self.sealed += len;
            self.answered_since_data = false;
        }
        match status {
            IoStatus::Done(n) => {
                assert_eq!(n, len, "a write reports the bytes offered");
                self.written += n;
                self.pending = None;
            }
            IoStatus::WantWrite => self.pending = Some(len),
            other => panic!("write: {other:?}"),
        }
        assert!(self.written <= self.sealed);
    }

    /// The peer reads what the socket wrote and opens every whole record.
    fn peer_reads(&mut self) {
        let mut chunk = [0u8; 8192];
        loop {
            match self.peer.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.peer_rx.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("peer read: {e}"),
            }
        }
        let mut at = 0;
        while at < self.peer_rx.len() {
            assert!(self.peer_end.is_none(), "records after the socket's alert");
            match self.peer_layer.open_record(&mut self.peer_rx[at..]) {
                Ok(Inbound::Incomplete) => break,
                Ok(Inbound::Data { consumed, plain }) => {
                    let data = &self.peer_rx[at + plain.start..at + plain.end];
                    self.peer_got.extend_from_slice(data);
                    at += consumed;
                }
                Ok(Inbound::KeyUpdated { consumed, answer }) => {
                    assert!(!answer, "the socket never asks for an update");
                    assert!(
                        self.peer_updates.last() != Some(&self.peer_got.len()),
                        "two KeyUpdates without data between them"
                    );
                    self.peer_updates.push(self.peer_got.len());
                    at += consumed;
                }
                Ok(other) => panic!("the socket wrote {other:?}"),
                Err(RecordError::PeerAlert(description)) => {
                    assert!(self.failed, "alert {description} on a working connection");
                    self.peer_end = Some(RecordError::PeerAlert(description));
                    // The rest of the stream is not ours to open.
                    at = self.peer_rx.len();
                }
                Err(e) => panic!("the socket's records do not open: {e:?}"),
            }
        }
        self.peer_rx.drain(..at);
        // What the peer got is what was sealed, in order.
        let sent: Vec<u8> = (0..self.peer_got.len())
            .map(|i| stream_byte(i, 0xa5))
            .collect();
        assert!(self.peer_got == sent, "the peer got other data");
        assert!(self.peer_got.len() <= self.sealed);
        assert!(
            self.peer_updates.len() <= self.requests_sent,
            "unrequested KeyUpdates"
        );
        if !self.tainted {
            assert!(
                self.expect_updates.starts_with(&self.peer_updates),
                "our KeyUpdates {:?}, the model's {:?}",
                self.peer_updates,
                self.expect_updates
            );
        }
    }

    /// Everything delivered and read, the last write finished, everything the socket wrote
    /// opened by the peer: then what the peer got must be complete.
    fn finish(&mut self) {
        self.deliver(usize::MAX);
        self.read();
        let mut flushed = false;
        for _ in 0..10_000 {
            if self.failed {
                break;
            }
            self.peer_reads();
            if self.pending.is_some() {
                self.write(0);
                continue;
            }
            // An answer the socket did not take waits for the owner's next write (it only
            // has to come before our next data); a write of nothing sends it.
            match self.records.writev(self.sock.as_fd(), &[]) {
                IoStatus::Done(0) => {
                    flushed = true;
                    break;
                }
                IoStatus::WantWrite => {}
                other => panic!("flush: {other:?}"),
            }
        }
        self.peer_reads();
        if self.failed {
            return;
        }
        assert!(flushed, "the socket's records never all left");
        assert_eq!(self.peer_got.len(), self.written, "the peer got every byte");
        if !self.tainted {
            assert_eq!(self.peer_updates, self.expect_updates, "our KeyUpdates");
        }
    }

    /// After a read failed on an untainted stream: the peer's last record is its alert.
    fn check_alert(&self) {
        if self.tainted {
            return;
        }
        if let (Some(End::Error(e)), Some(got)) = (&self.ended, &self.peer_end) {
            let sent = e.alert().expect("a fatal error sends its alert");
            assert_eq!(got, &RecordError::PeerAlert(sent));
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&control, mut input)) = input.split_first() else {
        return;
    };
    let mut h = Harness::new(control);
    while let [op, arg, rest @ ..] = input {
        input = rest;
        h.op(OPS[usize::from(*op % 16)], *arg, &mut input);
        if h.wire.len() > 1 << 20 {
            break;
        }
    }
    h.finish();
    h.check_alert();
});
