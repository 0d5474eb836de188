//! A connection whose records the proxy's own record layer protects: the sans-IO
//! [`RecordLayer`] driven on a non-blocking socket fd. Same calling conventions as
//! `KtlsSocket` and `TlsSession` (`IoStatus`), same retry rule as `SSL_write`: a write that
//! returns `WantWrite` has sealed records that are not all on the wire yet, and the next
//! write must offer at least the same bytes again; it is answered from the sealed records.

use std::io::{self, IoSlice};
use std::os::fd::BorrowedFd;

use super::error::{alert, RecordError};
use super::layer::{Inbound, RecordLayer, MAX_RECORD};
use super::pool::{self, Rx, Tx};
use super::stats;
use crate::kernel;
use crate::readiness::ReadReadiness;
use crate::session::{AttachedFd, IoStatus, TlsError};

/// KeyUpdates a peer may send in a row without application data between them. Each costs
/// a key derivation; a peer that only rotates keys is flooding (issue 30), and the
/// connection ends with unexpected_message. Real clients update after gigabytes, not in
/// bursts.
pub const MAX_KEY_UPDATES_WITHOUT_DATA: u32 = 32;

/// Records one [`RecordSocket::read`] opens that give the caller nothing (empty application
/// data, KeyUpdate, a warning alert) before it returns `Done(0)` to let the owner serve its
/// other connections (issue 30). Without a bound, a peer that keeps sending such records
/// keeps the thread inside one call for as long as it sends. Each one costs at most one
/// maximal record's decryption (16 KiB of TLS 1.3 padding) or one key derivation, so 32
/// keep a call within about 0.5 MiB of AEAD work (a call that returns data opens one
/// record); no real peer sends more than two in a row (a KeyUpdate; user_canceled before
/// close_notify), so only a flooding peer ever sees the yield, and a lower bound would only
/// add calls for it. OpenSSL's record layer bounds the empty records one of its calls
/// processes by the same number (`MAX_EMPTY_RECORDS`, for the same reason), and fails the
/// connection past it; here the connection stays usable.
pub const MAX_RECORDS_WITHOUT_DATA_PER_READ: u32 = 32;

/// An established TLS connection on the proxy's record layer. The socket stays owned by the
/// caller: every call borrows it, and must borrow the one the layer's records belong to
/// (checked).
pub struct RecordSocket {
    fd: AttachedFd,
    layer: RecordLayer,
    rx: Option<Box<Rx>>,
    tx: Option<Box<Tx>>,
    peer_closed: bool,
    /// A fatal error was met; nothing more is read or written.
    failed: bool,
    /// Whether the socket may have bytes before its next readiness event; `None` (the
    /// default) reads until `EAGAIN` every time, for owners without an event loop.
    readiness: Option<ReadReadiness>,
    /// Our KeyUpdate answering the peer's request has been sealed and no data has been
    /// sealed after it: RFC 8446 §4.6.3 lets that one update answer any further requests,
    /// so a peer cannot make us queue one answer per request.
    answered_since_data: bool,
    /// The peer's KeyUpdates since its last application data.
    updates_without_data: u32,
}

impl std::fmt::Debug for RecordSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordSocket")
            .field("fd", &self.fd.raw())
            .field("version", &self.layer.version())
            .field("cipher", &self.layer.cipher())
            .finish_non_exhaustive()
    }
}

impl RecordSocket {
    /// The record layer `layer` on the socket `fd`; later calls must borrow the same socket.
    pub fn new(fd: BorrowedFd<'_>, layer: RecordLayer) -> RecordSocket {
        RecordSocket {
            fd: AttachedFd::of(fd),
            layer,
            rx: None,
            tx: None,
            peer_closed: false,
            failed: false,
            readiness: None,
            answered_since_data: false,
            updates_without_data: 0,
        }
    }

    /// Skips reads while the socket is known to be empty (see [`ReadReadiness`]). The owner
    /// promises to call [`RecordSocket::on_readable`] for every readiness event of an
    /// edge-triggered poller; otherwise bytes that arrive after a read emptied the socket
    /// wait for the next event.
    pub fn track_readiness(&mut self) {
        self.readiness.get_or_insert_with(ReadReadiness::default);
    }

    /// A readiness event for the socket (only matters after [`RecordSocket::track_readiness`]).
    pub fn on_readable(&mut self, read_closed: bool) {
        if let Some(r) = &mut self.readiness {
            r.on_event(read_closed);
        }
    }

    pub fn layer(&self) -> &RecordLayer {
        &self.layer
    }

    /// Whether the connection holds a receive or send buffer (false while idle).
    pub fn holds_buffers(&self) -> bool {
        self.rx.is_some() || self.tx.is_some()
    }

    /// Reads decrypted application data. `Closed` on close_notify or end of stream between
    /// records; an error (after sending the matching alert) for anything else.
    ///
    /// `Done(0)` for a non-empty `buf` is not the end of the stream: the call opened
    /// [`MAX_RECORDS_WITHOUT_DATA_PER_READ`] records that gave no data and stopped there.
    /// More may wait in the layer's buffer or in the socket, and no readiness event will say
    /// so (the socket's readiness is kept as it was: not marked drained): the owner calls
    /// `read` again without waiting for an event, after serving its other connections.
    /// `WantRead` still means that nothing more can come before the next readiness event.
    pub fn read(&mut self, fd: BorrowedFd<'_>, buf: &mut [u8]) -> IoStatus {
        let fd = match self.fd.check(fd) {
            Ok(fd) => fd,
            Err(e) => return IoStatus::Error(e),
        };
        if buf.is_empty() {
            return IoStatus::Done(0);
        }
        if self.failed {
            return IoStatus::Error(TlsError::Protocol("connection already failed".into()));
        }
        if self.peer_closed {
            return IoStatus::Closed;
        }
        // Records opened in this call; every one but a data record, which is handed out at
        // once, gave nothing.
        let mut opened = 0;
        loop {
            if let Some(n) = self.hand_out(buf) {
                return IoStatus::Done(n);
            }
            if opened == MAX_RECORDS_WITHOUT_DATA_PER_READ {
                self.release_rx_if_empty();
                return IoStatus::Done(0);
            }
            match self.open_next(fd) {
                Ok(true) => {
                    opened += 1;
                    continue;
                }
                Ok(false) => {}
                Err(status) => return status,
            }
            match self.fill(fd) {
                Ok(true) => continue,
                Ok(false) => {
                    self.release_rx_if_empty();
                    return IoStatus::WantRead;
                }
                Err(status) => return status,
            }
        }
    }

    /// Copies decrypted data out, if any.
    fn hand_out(&mut self, buf: &mut [u8]) -> Option<usize> {
        let rx = self.rx.as_mut()?;
        if rx.plain.is_empty() {
            return None;
        }
        let n = rx.plain.len().min(buf.len());
        buf[..n].copy_from_slice(&rx.buf[rx.plain.start..rx.plain.start + n]);
        rx.plain.start += n;
        self.release_rx_if_empty();
        Some(n)
    }

    /// Opens the next whole record in the receive buffer. True if it made progress.
    fn open_next(&mut self, fd: BorrowedFd<'_>) -> Result<bool, IoStatus> {
        let Some(rx) = self.rx.as_mut() else {
            return Ok(false);
        };
        if rx.start == rx.end {
            return Ok(false);
        }
        let start = rx.start;
        let outcome = self.layer.open_record(&mut rx.buf[start..rx.end]);
        match outcome {
            Ok(Inbound::Incomplete) => Ok(false),
            Ok(Inbound::Data { consumed, plain }) => {
                rx.plain = start + plain.start..start + plain.end;
                rx.start += consumed;
                self.updates_without_data = 0;
                Ok(true)
            }
            Ok(Inbound::Closed { .. }) => {
                self.peer_closed = true;
                self.release_rx();
                Err(IoStatus::Closed)
            }
            Ok(Inbound::Skip { consumed }) => {
                rx.start += consumed;
                Ok(true)
            }
            Ok(Inbound::KeyUpdated { consumed, answer }) => {
                rx.start += consumed;
                stats::count_key_update(false);
                self.updates_without_data += 1;
                if self.updates_without_data > MAX_KEY_UPDATES_WITHOUT_DATA {
                    let flood = RecordError::UnexpectedMessage("KeyUpdate flood");
                    return Err(self.fail(fd, flood));
                }
                if answer && !self.answered_since_data {
                    self.answer_key_update(fd)?;
                }
                Ok(true)
            }
            Err(e) => Err(self.fail(fd, e)),
        }
    }

    /// The peer asked for our KeyUpdate: it is sealed now (after any records already
    /// sealed, before any later ones) and sent as far as the socket takes it. Behind data
    /// records that a write left unsent (`WantWrite`), it is only queued: those records'
    /// plaintext count belongs to the owner's retry of that write, which flushes them and
    /// the KeyUpdate together. Flushing here would drop the count, and the retry would seal
    /// the same bytes a second time (the client saw them twice).
    fn answer_key_update(&mut self, fd: BorrowedFd<'_>) -> Result<(), IoStatus> {
        let mut tx = self.tx.take().unwrap_or_else(pool::take_tx);
        let owed_to_a_write = tx.plain > 0;
        let sealed = self.layer.seal_key_update(false, &mut tx.buf);
        self.tx = Some(tx);
        if let Err(e) = sealed {
            return Err(self.fail(fd, e));
        }
        stats::count_key_update(true);
        self.answered_since_data = true;
        if owed_to_a_write {
            return Ok(());
        }
        self.flush(fd).map(|_| ())
    }

    /// Reads from the socket into the receive buffer. True if bytes came.
    fn fill(&mut self, fd: BorrowedFd<'_>) -> Result<bool, IoStatus> {
        if self.readiness.is_some_and(|r| !r.may_read()) {
            return Ok(false);
        }
        let rx = self.rx.get_or_insert_with(pool::take_rx);
        if rx.start == rx.end {
            rx.start = 0;
            rx.end = 0;
        } else if rx.buf.len() - rx.end < MAX_RECORD {
            rx.buf.copy_within(rx.start..rx.end, 0);
            rx.end -= rx.start;
            rx.start = 0;
        }
        let end = rx.end;
        let asked = rx.buf.len() - end;
        // EINTR says nothing about the connection: read again.
        let result = loop {
            match kernel::recv(fd, &mut rx.buf[end..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        if let Some(r) = &mut self.readiness {
            r.after_read(asked, &result);
        }
        match result {
            Ok(0) if rx.start < rx.end => Err(IoStatus::Error(TlsError::UnexpectedEof)),
            Ok(0) => {
                self.peer_closed = true;
                self.release_rx();
                Err(IoStatus::Closed)
            }
            Ok(n) => {
                rx.end += n;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(IoStatus::Error(TlsError::Io(e))),
        }
    }

    fn release_rx_if_empty(&mut self) {
        if self
            .rx
            .as_ref()
            .is_some_and(|rx| rx.plain.is_empty() && rx.start == rx.end)
        {
            self.release_rx();
        }
    }

    fn release_rx(&mut self) {
        if let Some(rx) = self.rx.take() {
            pool::give_rx(rx);
        }
    }

    /// Seals and writes application data from `bufs` (several records per syscall).
    /// `Done(n)`: `n` bytes are on the wire. `WantWrite`: try again with the same bytes.
    pub fn writev(&mut self, fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> IoStatus {
        let fd = match self.fd.check(fd) {
            Ok(fd) => fd,
            Err(e) => return IoStatus::Error(e),
        };
        if self.failed {
            return IoStatus::Error(TlsError::Protocol("connection already failed".into()));
        }
        if self.tx.is_some() {
            match self.flush(fd) {
                Ok(Some(0)) => {}
                Ok(Some(plain)) => return IoStatus::Done(plain),
                Ok(None) => return IoStatus::WantWrite,
                Err(status) => return status,
            }
        }
        let mut tx = pool::take_tx();
        tx.plain = match self.layer.seal_data(bufs, pool::BURST, &mut tx.buf) {
            Ok(0) => {
                pool::give_tx(tx);
                return IoStatus::Done(0);
            }
            Ok(n) => n,
            Err(e) => {
                pool::give_tx(tx);
                return self.fail(fd, e);
            }
        };
        // Data sealed under our current key: the peer's next request needs a new answer.
        self.answered_since_data = false;
        self.tx = Some(tx);
        match self.flush(fd) {
            Ok(Some(plain)) => IoStatus::Done(plain),
            Ok(None) => IoStatus::WantWrite,
            Err(status) => status,
        }
    }

    pub fn write(&mut self, fd: BorrowedFd<'_>, buf: &[u8]) -> IoStatus {
        self.writev(fd, &[IoSlice::new(buf)])
    }

    /// Writes sealed records. `Some(plain)` when all are out (their plaintext count, now
    /// reported), `None` when the socket is full.
    fn flush(&mut self, fd: BorrowedFd<'_>) -> Result<Option<usize>, IoStatus> {
        let Some(tx) = self.tx.as_mut() else {
            return Ok(Some(0));
        };
        while tx.sent < tx.buf.len() {
            match kernel::write(fd, &tx.buf[tx.sent..]) {
                Ok(0) => {
                    return Err(IoStatus::Error(TlsError::Io(
                        io::ErrorKind::WriteZero.into(),
                    )))
                }
                Ok(n) => tx.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) => {
                    self.failed = true;
                    return Err(IoStatus::Closed);
                }
                Err(e) => {
                    self.failed = true;
                    return Err(IoStatus::Error(TlsError::Io(e)));
                }
            }
        }
        let plain = tx.plain;
        if let Some(tx) = self.tx.take() {
            pool::give_tx(tx);
        }
        Ok(Some(plain))
    }

    /// Sends the alert for `e` (best effort, after what is already sealed), counts it and
    /// marks the connection failed.
    fn fail(&mut self, fd: BorrowedFd<'_>, e: RecordError) -> IoStatus {
        stats::count_error(&e);
        if let Some(description) = e.alert() {
            self.send_alert(fd, description);
        }
        self.failed = true;
        self.release_rx();
        IoStatus::Error(TlsError::Record(e))
    }

    fn send_alert(&mut self, fd: BorrowedFd<'_>, description: u8) {
        let mut tx = self.tx.take().unwrap_or_else(pool::take_tx);
        let sealed = self.layer.seal_alert(description, &mut tx.buf).is_ok();
        self.tx = Some(tx);
        if sealed {
            let _ = self.flush(fd);
        }
    }

    /// Sends close_notify, best effort (the connection is being closed either way).
    pub fn shutdown(&mut self, fd: BorrowedFd<'_>) {
        if !self.failed && self.fd.check(fd).is_ok() {
            self.send_alert(fd, alert::CLOSE_NOTIFY);
            self.failed = true;
        }
        self.release_rx();
        if let Some(tx) = self.tx.take() {
            pool::give_tx(tx);
        }
    }
}

impl Drop for RecordSocket {
    fn drop(&mut self) {
        self.release_rx();
        if let Some(tx) = self.tx.take() {
            pool::give_tx(tx);
        }
    }
}
