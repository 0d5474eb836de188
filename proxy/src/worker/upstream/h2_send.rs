//! HTTP/2 to origins (`h2_conn.rs`): the request side of a connection's turn, each waiting
//! stream opened when the origin has room for it and its body passed on within the windows.

use std::time::Instant;

use super::h2_conn::{conn_mut, H2Conn, H2Link, H2Stream};
use super::{UpstreamId, Upstreams};
use crate::outbox::Outbox;

/// Opens the waiting streams of connection `ui` the origin has room for, and passes their
/// request bodies on within the windows. True if anything moved. Only the stream entries
/// still sending are visited (`H2Conn::sending`): those whose request is out are not.
pub(super) fn send_streams(
    upstreams: &mut Upstreams,
    ui: UpstreamId,
    woken: &mut Vec<UpstreamId>,
) -> bool {
    let Some(sending) = upstreams
        .get_mut(ui)
        .and_then(conn_mut)
        .map(|c| std::mem::take(&mut c.sending))
    else {
        return false;
    };
    let mut still = Vec::with_capacity(sending.len());
    let mut moved = false;
    for si in sending {
        // The stream and the connection are two entries of one table: the stream's part is
        // taken out for the call and put back.
        let Some(mut link) = upstreams.get_mut(si).and_then(|u| u.h2.take()) else {
            continue;
        };
        if let H2Link::Stream(s) = &mut link {
            moved |= send_entry(upstreams, (ui, si), s, woken);
            if !s.sent {
                still.push(si);
            }
        }
        if let Some(u) = upstreams.get_mut(si) {
            u.h2 = Some(link);
        }
    }
    if let Some(c) = upstreams.get_mut(ui).and_then(conn_mut) {
        // Entries added meanwhile (none: nothing here opens one) keep their place after.
        still.append(&mut c.sending);
        c.sending = still;
    }
    moved
}

/// [`send_streams`] for stream entry `si` of connection `ui` (its part `s` taken out): sent
/// what it can, its stream learnt by id once opened. True if anything moved.
fn send_entry(
    upstreams: &mut Upstreams,
    (ui, si): (UpstreamId, UpstreamId),
    s: &mut H2Stream,
    woken: &mut Vec<UpstreamId>,
) -> bool {
    let Some(u) = upstreams.get_mut(si) else {
        return false;
    };
    let out = std::mem::take(&mut u.out);
    let had_request = s.request.is_some();
    let (rest, step) = match upstreams.get_mut(ui).and_then(conn_mut) {
        Some(c) => {
            let (rest, step) = send_one(c, s, out);
            if had_request && s.request.is_none() {
                c.waiting = c.waiting.saturating_sub(1);
                if let Some(id) = s.id {
                    c.learn(id, si);
                }
            }
            (rest, step)
        }
        None => (out, false),
    };
    if let Some(u) = upstreams.get_mut(si) {
        u.out = rest;
        if s.id.is_none() && s.request.is_none() {
            // Its request could not be sent: a reset nobody retries.
            u.peer_closed = true;
            u.peer_failed = true;
        }
        if step {
            u.last_progress = Instant::now();
            woken.push(si);
        }
    }
    step
}

/// [`send_streams`] for one stream: its HEADERS if it is waiting, then its body from `out`.
fn send_one(c: &mut H2Conn, s: &mut H2Stream, mut out: Outbox) -> (Outbox, bool) {
    let mut moved = false;
    if s.id.is_none() {
        if !c.client.can_open() {
            return (out, false);
        }
        let Some(request) = s.request.take() else {
            return (out, false);
        };
        let end = s.body.is_none();
        match c.client.open(&request, end) {
            Ok(id) => {
                s.id = Some(id);
                s.sent = end;
                moved = true;
            }
            Err(_) => {
                // Not expressible as HTTP/2 (or the connection is over): the stream entry
                // learns it as a reset nobody can retry.
                s.request = None;
                s.sent = true;
                return (out, true);
            }
        }
    }
    let Some(id) = s.id else {
        return (out, moved);
    };
    while !s.sent {
        if s.pending.is_empty() && !s.body_end {
            let mut input = Vec::new();
            out.copy_front(out.len(), &mut input);
            let Some(decoder) = s.body.as_mut() else {
                break;
            };
            let Ok(step) = decoder.decode(&input) else {
                c.client.reset(id, h2::ErrorCode::CANCEL);
                s.sent = true;
                return (out, true);
            };
            if step.consumed == 0 && !step.done {
                break;
            }
            s.pending
                .extend_from_slice(input.get(step.data.clone()).unwrap_or(&[]));
            out.advance(step.consumed);
            s.body_end = step.done;
            moved = true;
        }
        let end = s.body_end;
        match c.client.send_data(id, &s.pending, end) {
            Ok(n) => {
                let all = n == s.pending.len();
                s.pending.drain(..n);
                moved |= n > 0;
                if all && end {
                    s.sent = true;
                } else if !all {
                    break;
                }
            }
            Err(_) => {
                s.sent = true;
                break;
            }
        }
    }
    (out, moved)
}
