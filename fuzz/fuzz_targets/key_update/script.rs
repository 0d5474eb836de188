//! The key_update target's script: the ops a fuzz input is read as, and what each record of
//! the simulated peer is to the reader.

use ktls::record::RecordError;

/// The ops, by `op % 16`.
#[derive(Clone, Copy)]
pub enum Op {
    /// `arg & 63 + 1` empty application-data records; with 200 bytes of padding if bit 7.
    Empty,
    KeyUpdate,
    KeyUpdateRequested,
    /// An application-data record of `1 + 64 * arg` bytes.
    Data,
    /// A warning user_canceled alert (nothing for the reader).
    UserCanceled,
    /// A post-handshake message other than KeyUpdate: fatal.
    Ticket,
    /// A KeyUpdate with request value 2: fatal.
    BadKeyUpdate,
    /// `arg` raw bytes taken from the input.
    Garbage,
    /// Flips bit `arg` of the bytes not yet delivered.
    Flip,
    /// The peer writes `16 * (arg + 1)` more bytes (all if `arg` is 255), then one event.
    Deliver,
    /// The socket reads until `WantRead` (or the end).
    Read,
    /// The socket writes `1 + 157 * arg` bytes (or retries the write left at `WantWrite`).
    Write,
    /// The peer reads and opens what the socket wrote.
    PeerReads,
    /// The peer's close_notify.
    CloseNotify,
    /// The peer shuts its side down (undelivered bytes are never sent), then one event.
    Fin,
    /// `arg & 63 + 1` KeyUpdates, requesting an answer if bit 6.
    KeyUpdates,
}

pub const OPS: [Op; 16] = [
    Op::Empty,
    Op::KeyUpdate,
    Op::KeyUpdateRequested,
    Op::Data,
    Op::UserCanceled,
    Op::Ticket,
    Op::BadKeyUpdate,
    Op::Garbage,
    Op::Flip,
    Op::Deliver,
    Op::Read,
    Op::Write,
    Op::PeerReads,
    Op::CloseNotify,
    Op::Fin,
    Op::KeyUpdates,
];

/// What one record of the peer is to the reader.
#[derive(Clone, Debug)]
pub enum Kind {
    /// Application data: this many bytes of the peer's data stream.
    Data(usize),
    /// Empty data or a warning alert.
    Nothing,
    KeyUpdate {
        requested: bool,
    },
    /// The error reading it must give.
    Fatal(RecordError),
    Close,
    /// Raw or flipped bytes: the rest is unpredictable.
    Garbage,
}

/// How a series of reads ended.
#[derive(Debug, PartialEq)]
pub enum End {
    WantRead,
    Closed,
    Eof,
    Error(RecordError),
    /// `Error` of another kind (only after garbage).
    Other,
}
