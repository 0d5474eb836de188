//! The drive of an HTTP/3 client: one turn of its QUIC connection (`worker/quic/`), what
//! the turn found handed to the pipeline (requests, body bytes, trailers, refusals, blocks,
//! the handshake's end), and the QUIC sockets read for the connections they concern. Functions
//! over the drives' parts ([`Drive`], drive.rs).

use std::time::Instant;

use super::client::ClientId;
use super::drive::{close_client, refuse_connection, settle_client, Drive};
use super::fairness::FairTurns;
use super::finish;
use super::quic;
use super::route;
use super::token::client_token;
use crate::close_reason::CloseReason;

/// HTTP/3 (`worker/quic/`): one turn of client `ci`'s QUIC connection. What arrived
/// becomes exchange work here (requests through `stream_request`, body bytes, dropped
/// streams, a slow head's block), request bodies move upstream, then responses and
/// datagrams go out and the streams with room again wake their upstreams; last, what the
/// connection holds is accounted (`client_mem`).
pub(super) fn drive_h3(d: &mut Drive<'_>, ci: ClientId) {
    // The wall clock, not the turn's: a head's deadline fires by it (`fire_timers`).
    let now = Instant::now();
    let work = quic::drive(&mut *d.quic, &mut *d.p.clients, ci, now);
    for w in work {
        if !h3_work(d, ci, w) {
            return;
        }
    }
    let parts = (
        &mut *d.p.clients,
        &mut *d.p.exchanges,
        &mut *d.p.conns.upstreams,
    );
    super::quic::pump_bodies(parts, &mut *d.p.dirty, ci);
    let parts = (&mut *d.p.clients, &mut *d.p.conns.timers);
    let (woken, more) = super::quic::flush(&mut *d.quic, parts, ci, Instant::now());
    super::h2_serve::wake_upstreams(
        (&*d.p.exchanges, &*d.p.conns.upstreams, &mut *d.p.dirty),
        woken,
    );
    if more {
        d.p.dirty.push_back(super::token::client_token(ci));
    }
    // As after a TCP connection's receive pass (`account_memory`).
    let over = d.p.clients.get_mut(ci).map(|c| c.account_memory(now));
    if let Some(Err(v)) = over {
        return h3_block(d, ci, &v, false);
    }
    // An idle connection closes once a graceful stop's last call is over.
    settle_client(d, ci);
}

/// Acts on one thing an HTTP/3 connection's turn found (`quic::Work`): a request, body
/// bytes, trailers, a stream to refuse or drop, a block, the handshake's end. False when
/// the connection ended with it.
fn h3_work(d: &mut Drive<'_>, ci: ClientId, w: quic::Work) -> bool {
    match w {
        quic::Work::Request {
            stream,
            request,
            end_stream,
        } => {
            let limits = &d.p.rt.limits;
            let converted = super::quic::H3Codec::request(&request, end_stream, limits);
            let now = d.p.now;
            route::stream_request(&mut d.p, ci, stream, converted, now);
        }
        quic::Work::Data {
            stream,
            data,
            end_stream,
        } => {
            let parts = (
                &mut *d.p.clients,
                &mut *d.p.exchanges,
                &mut *d.p.conns.timers,
            );
            let body = (ci, stream, d.p.now);
            let taken = super::quic::take_data(parts, d.p.rt, body, (data, end_stream));
            if let Err((id, v)) = taken {
                finish::frang_violation(&mut d.p, ci, super::finish::RefuseAt::Exchange(id), &v);
            }
        }
        quic::Work::Trailers { stream, fields } => {
            let parts = (&mut *d.p.clients, &*d.p.exchanges, d.p.rt);
            if let Some((at, v)) = super::h2_serve::h3_trailers(parts, ci, stream, fields) {
                finish::frang_violation(&mut d.p, ci, at, &v);
            }
        }
        quic::Work::Refuse { stream, status } => {
            let at = super::finish::RefuseAt::Stream(stream);
            let kind = super::finish::Refusal::Error;
            super::finish::refuse_at(&mut d.p, ci, at, status, kind);
        }
        quic::Work::Drop(id) => finish::drop_exchange(&mut d.p, id),
        quic::Work::Block(v) => {
            h3_block(d, ci, &v, true);
            return false;
        }
        quic::Work::Gone => {
            close_client(d, ci, CloseReason::Client);
            return false;
        }
        quic::Work::Connected { hello, resumed } => {
            let parts = (d.p.rt, &d.p.metrics.quic);
            let client = d.p.clients.get_mut(ci);
            let hook = super::fingerprint_hook::on_quic_handshake;
            let done = (hello, resumed);
            if let Some(Err(v)) = client.map(|c| hook(c, done, parts, d.p.now)) {
                refuse_connection(d, ci, &v);
                return false;
            }
        }
    }
    true
}

/// HTTP/3 client `ci` broke frang limit `v`: a slow head (`record`: the block is
/// recorded as HTTP/2's slow head is, `blocks_total{limit}` and `ip_block`), or
/// `client_mem` (frang recorded it; counted as HTTP/2's is). The connection is closed
/// with H3_EXCESSIVE_LOAD at once, its exchanges dropped.
pub(super) fn h3_block(d: &mut Drive<'_>, ci: ClientId, v: &crate::frang::Violation, record: bool) {
    let told = (d.p.rt, d.p.conns.metrics);
    if record {
        let parts = (&mut *d.p.clients, &*d.p.exchanges);
        let at = super::finish::RefuseAt::Connection;
        super::limits::record_violation(parts, told, (ci, at), v);
    } else if let Some(ip) = d.p.clients.get(ci).map(|c| c.peer.ip()) {
        super::limits::note_block(told, ip, v, "-");
    }
    super::quic::close_blocked(&*d.quic, &mut *d.p.clients, ci, v.limit);
    close_client(d, ci, CloseReason::Frang);
}

/// QUIC socket `i` has datagrams (quic/mod.rs `recv`), or other workers moved some here
/// (None: `recv_moved`): their connections are driven; a full round reads again next turn
/// (polled without waiting), so that a datagram flood cannot hold up the loop.
pub(super) fn quic_readable(d: &mut Drive<'_>, fair: &mut FairTurns, i: Option<usize>) {
    let got = match i {
        Some(i) => quic::recv(d.quic, &mut d.p.client_conns(), i),
        None => quic::recv_moved(d.quic, &mut d.p.client_conns()),
    };
    d.p.dirty.extend(got.touched.into_iter().map(client_token));
    if let (true, Some(i)) = (got.more, i) {
        fair.defer(mio::Token(quic::QUIC_BASE + i));
    }
}
