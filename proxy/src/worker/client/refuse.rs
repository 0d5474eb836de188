//! Refusing on a connection what has no exchange to answer it (a malformed or oversized
//! head, a request an HTTP/2 or HTTP/3 stream could not turn into one), and `block_action`'s
//! drop: functions over the client table and what writing a reply of the proxy's own needs.
//! An exchange's refusal is the pipeline's (finish.rs `refuse_exchange`); it drops through
//! [`drop_response`] too.

use std::collections::VecDeque;

use mio::Token;

use super::codec::{self, Codec};
use super::{ClientId, Clients};
use crate::close_reason::CloseReason;
use crate::date::DateCache;
use crate::metrics::WorkerMetrics;
use crate::runtime::Runtime;
use crate::worker::h1::{self, Reply, ReplyTo};
use crate::worker::token::client_token;

/// What a refusal is, for `block_action`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A malformed request (`block_action error`).
    Error,
    /// A blocked request (`block_action attack`).
    Attack,
}

/// What answering a refusal reads and counts: the error pages and `block_action`, the
/// `Date` field, the status counters.
pub(in crate::worker) struct Answering<'a> {
    pub rt: &'a Runtime,
    pub date: &'a mut DateCache,
    pub counts: &'a WorkerMetrics,
}

/// `block_action`'s choice for `kind`.
pub(in crate::worker) fn block_action(rt: &Runtime, kind: Refusal) -> config::BlockAction {
    match kind {
        Refusal::Error => rt.config.block_action.error,
        Refusal::Attack => rt.config.block_action.attack,
    }
}

/// Refuses what client `ci` sent before any exchange exists (a malformed or oversized head)
/// per `block_action`, and closes the connection after it.
pub(in crate::worker) fn refuse(
    (clients, dirty): (&mut Clients, &mut VecDeque<Token>),
    a: Answering<'_>,
    (ci, status, kind): (ClientId, u16, Refusal),
) {
    let reply = block_action(a.rt, kind).reply;
    let Some(c) = clients.get_mut(ci) else {
        return;
    };
    match &mut c.codec {
        Codec::H2(_) if !reply => drop_response(clients, ci, kind),
        Codec::H2(h2) => {
            // No stream to answer on: the connection ends after the streams in flight.
            h2.conn.go_away();
            h2.flush_into(&mut c.out);
        }
        Codec::H3(h3) => {
            h3.h3.send_goaway();
            dirty.push_back(client_token(ci));
        }
        Codec::H1(_) if !reply => {
            c.end.close_after_flush();
            drop_response(clients, ci, kind);
        }
        Codec::H1(_) => {
            c.end.close_after_flush();
            let to = ReplyTo {
                http10: false,
                close: true,
            };
            let page = Reply::status_page(status, &a.rt.error_pages);
            h1::write_reply(&mut c.out, &page, to, a.date.now());
            a.counts.count_status(status);
        }
    }
}

/// Refuses the request on HTTP/2 or HTTP/3 stream `stream`, which has no exchange, per
/// `block_action`: `reply` answers `status` on the stream, and on HTTP/2 a block (as on
/// HTTP/1.1) also ends the connection with GOAWAY after the streams in flight; `drop` closes
/// the connection with nothing more sent.
pub(in crate::worker) fn refuse_stream(
    (clients, dirty): (&mut Clients, &mut VecDeque<Token>),
    a: Answering<'_>,
    (ci, stream): (ClientId, u32),
    (status, kind): (u16, Refusal),
) {
    if !block_action(a.rt, kind).reply {
        return drop_response(clients, ci, kind);
    }
    let Some(c) = clients.get_mut(ci) else {
        return;
    };
    let page = Reply::status_page(status, &a.rt.error_pages);
    let date = a.date.now();
    match &mut c.codec {
        Codec::H3(_) => {
            codec::reply(c, stream, &page, ReplyTo::default(), date, false);
        }
        Codec::H2(h2) => {
            h2.reply(stream, &page, date, false);
            if kind == Refusal::Attack {
                h2.conn.go_away();
            }
            h2.flush_into(&mut c.out);
        }
        Codec::H1(_) => return,
    }
    a.counts.count_status(status);
    dirty.push_back(client_token(ci));
}

/// `block_action ... drop`: nothing more is sent and nothing more is served. The client
/// is gone: the connection closes when this drive settles, every exchange of it ends
/// there (on HTTP/2, the other streams too, and requests read in the same pass are not
/// routed: `process_h2`), and a dropped attacker gets a reset, not a polite FIN.
pub(in crate::worker) fn drop_response(clients: &mut Clients, ci: ClientId, kind: Refusal) {
    let Some(c) = clients.get_mut(ci) else {
        return;
    };
    c.out.clear();
    // Errors too, as Tempesta resets for both (fw/http.c, `tfw_h1_error_resp`: a drop
    // is T_BLOCK_WITH_RST); and no close_notify over TLS, which a client reads as an
    // orderly end (`settle_client` resets).
    c.end.drop_with_reset(match kind {
        Refusal::Attack => CloseReason::Frang,
        Refusal::Error => CloseReason::Server,
    });
    let _ = socket2::SockRef::from(&c.sock).set_linger(Some(std::time::Duration::ZERO));
}
