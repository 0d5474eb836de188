//! Client connections, their owner: the stage machine `Handshake -> Open`, socket reads and
//! writes, and their life from accept to close as functions over the parts it touches
//! (`conn.rs`; how a connection ends is its [`End`], `end.rs`). Nothing here calls into the
//! exchange pipeline: what a connection's life means for its exchanges is returned to the
//! loop. The connections live in `table.rs` ([`Clients`], named by [`ClientId`]); their one
//! timer is `timer.rs`, the handshake's deadline `handshake_deadline.rs`, the TLS session and
//! its hand-over `tls.rs`, `client_mem` accounting `mem.rs`, the codecs the exchange core
//! writes responses through `codec.rs`, and refusals with no exchange `refuse.rs`.

pub mod codec;
mod conn;
mod drain;
mod end;
mod handshake_deadline;
mod mem;
pub(super) mod refuse;
mod table;
mod timer;
mod tls;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use ktls::{IoStatus, TlsSession};

use super::token::client_token;
use crate::buf::{Buf, BufPool};
use crate::outbox::Outbox;
use crate::socket::Socket;
use crate::transport::Transport;
use codec::Codec;
pub(super) use conn::{adopt, close, handshake, open, readable, settle, write};
pub(super) use conn::{Accepted, Conns, Handshake, Wrote};
pub use end::End;
pub use handshake_deadline::CLIENT_TURN;
pub use table::{ClientId, Clients};
pub use timer::idle_timeout;
pub(super) use timer::Due;

#[allow(
    clippy::large_enum_variant,
    reason = "Transport is inline on purpose (transport.rs)"
)]
pub enum Stage {
    /// TLS handshake in progress on the socket.
    Handshake(Box<TlsSession>),
    /// HTTP/1.1 over plain TCP, user-space TLS or kernel TLS.
    Open(Transport),
    /// Moved out while changing stage, or closed.
    Gone,
}

pub struct Client {
    pub sock: Socket,
    pub peer: SocketAddr,
    pub stage: Stage,
    /// The codec (HTTP/1.1 or HTTP/2): the connection's requests and responses.
    pub codec: Codec,
    /// Received bytes not yet consumed; `None` while idle (returned to the pool).
    pub rbuf: Option<Buf>,
    pub out: Outbox,
    /// How the connection ends (`end.rs`): closing after the response, gone, reset, blocked
    /// by frang, the peer's FIN. Moved only by its transitions.
    pub end: End,
    /// The generation of the client's timer entry (a stale entry's differs).
    pub timer_gen: u64,
    /// When the heap entry of `timer_gen` comes due; `None` once it fired or was disarmed.
    pub timer_queued: Option<Instant>,
    /// The deadline last armed: later than `timer_queued` when
    /// [`Clients::extend_timer`] moved it without a push.
    pub timer_deadline: Option<Instant>,
    /// Unique within the worker (slab slots are reused).
    pub id: u64,
    /// frang's counters of the request head being read.
    pub limits: crate::frang::ConnLimits,
    /// The frang table that counted this connection at accept (the configuration's of that
    /// time): its `on_close` is owed there when the connection ends, even after a reload
    /// replaced the table (new counters must not be decremented for connections they never
    /// counted).
    pub counted_by: Option<std::sync::Arc<crate::frang::Frang>>,
    /// Bytes this connection holds as `counted_by` last saw them (`client_mem`).
    pub mem_held: u64,
    /// The server name the client asked for in its TLS handshake (lower case, no trailing
    /// dot): strict host checking refuses requests routed to another vhost than it names.
    pub sni: Option<crate::server_name::ServerName>,
    /// The TLS fingerprint of the handshake (`None`: plain TCP, or not yet).
    pub tft: Option<crate::fingerprint::Tft>,
    /// The JA4 of the handshake, for the access log (`None`: plain TCP, not yet, or the
    /// access log was off when the handshake completed).
    pub ja4: Option<crate::fingerprint::Ja4>,
    /// The records read by the transport as last counted for `tft`'s record limit.
    pub tft_records: u64,
    /// When the TLS handshake began and how far it got (its deadline's policy).
    pub handshake: handshake_deadline::HandshakeClock,
}

impl Client {
    /// Nothing in flight: no request being served, nothing to send.
    pub fn is_idle(&self) -> bool {
        self.codec.is_idle() && self.out.is_empty() && self.rbuf.as_ref().is_none_or(Buf::is_empty)
    }
}

/// Reads what client `ci`'s socket has, while there is room. True if bytes arrived.
/// (Always inlined: it is on every request's path, from drive.rs `drive_client`, as `flush`.)
#[inline(always)]
pub(super) fn read(
    c: &mut Client,
    ci: ClientId,
    bufs: &mut BufPool,
    dirty: &mut VecDeque<mio::Token>,
) -> bool {
    if !c.end.reads() {
        return false;
    }
    let Stage::Open(transport) = &mut c.stage else {
        return false;
    };
    let rbuf = c.rbuf.get_or_insert_with(|| bufs.take());
    let mut got = false;
    while !rbuf.is_full() {
        match rbuf.fill_with(|space| match transport.read(&mut c.sock, space) {
            IoStatus::Done(n) => Ok(n),
            other => Err(other),
        }) {
            // Nothing into a buffer with room: the transport bounded its work and has more,
            // for which no edge will fire (ktls's per-read bound): come back later.
            Ok(0) => {
                dirty.push_back(client_token(ci));
                break;
            }
            Ok(_) => got = true,
            Err(IoStatus::WantRead | IoStatus::WantWrite) => break,
            // HTTP/1.1 may half-close: requests read before the FIN are still answered
            // (RFC 9112 §9.6). HTTP/2 has no half-closed connection (RFC 9113 §5.1
            // half-closes streams), so its FIN ends the connection as nginx ends it.
            Err(IoStatus::Closed) => {
                c.end.on_peer_end(matches!(c.codec, Codec::H2(_)));
                break;
            }
            // A reset or a broken record: no answer can reach the client, and its queued
            // requests must not keep the origin busy.
            Err(_) => {
                c.end.on_read_error();
                break;
            }
        }
    }
    if rbuf.is_empty() {
        bufs.release_if_empty(&mut c.rbuf);
    }
    got
}

/// Writes client `c`'s queued bytes: Some when some went out, telling whether its outbox
/// was full before (a write error ends the connection: its outbox is dropped).
#[inline(always)]
pub(super) fn flush(c: &mut Client) -> Option<bool> {
    if c.out.is_empty() {
        return None;
    }
    let Stage::Open(transport) = &mut c.stage else {
        return None;
    };
    let was_full = !c.out.has_room();
    match transport.write(&mut c.sock, &mut c.out) {
        IoStatus::Done(n) => (n > 0).then_some(was_full),
        IoStatus::WantRead | IoStatus::WantWrite => None,
        IoStatus::Closed | IoStatus::Error(_) => {
            // Nothing more can reach this client: close now, even mid-response.
            c.out.clear();
            c.end.on_write_error();
            None
        }
    }
}
