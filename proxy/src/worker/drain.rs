//! A graceful stop's bounds: how long it waits for in-flight requests, and its last call;
//! and how it lets go of the listeners and of the idle connections without losing a request.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mio::{Registry, Token};

use super::client::{self, codec::Codec, ClientId, Clients};
use super::exchange::{Exchanges, Receiving};
use super::listener::{self, Accepted, WorkerListener};
use super::token::client_token;
use crate::buf::BufPool;
use crate::socket::Socket;

/// How long a graceful stop waits for in-flight requests.
pub(super) const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A graceful stop's last call: for this long an idle HTTP/1 keep-alive connection stays
/// open, and a request it brings is answered with `Connection: close`. Closing it at once
/// would lose a request the client sent just before the close reached it (it cannot tell
/// that request was never read, and nothing says it may be retried unless idempotent); the
/// clients of a busy connection send their next request well within this.
pub(super) const DRAIN_LAST_CALL: Duration = Duration::from_millis(500);

/// The longest a draining worker sleeps, so that the last call ends on time.
pub(super) const DRAIN_POLL: Duration = Duration::from_millis(50);

/// Held while a worker closes its listeners: one listener of this process leaves its
/// `SO_REUSEPORT` group at a time. With `tcp_migrate_req` the kernel moves the connections
/// queued on a closing listener to another listener of the group, which may be a sibling
/// worker's; if that one is closing at the same instant, the kernel finds it no longer
/// listening and resets the moved connection (`inet_csk_reqsk_queue_add`). One at a time,
/// a listener that receives moved connections is still open, and moves them on when it closes.
static LISTENER_CLOSE: Mutex<()> = Mutex::new(());

/// Whether the last call of a graceful stop draining since `draining` is over: idle HTTP/1
/// connections close.
pub(super) fn last_call_over(draining: Option<Instant>) -> bool {
    draining.is_some_and(|since| since.elapsed() >= DRAIN_LAST_CALL)
}

/// Every HTTP/1 response whose head has not gone out yet says `Connection: close` (`route`
/// does the same for requests that arrive during the last call). One whose head went out
/// without it keeps the connection: closing after a response that told the client the
/// connection stays open would lose the request the client sends next on it (it finds the
/// close only after writing); the connection is idle after it, and the last call applies.
pub(super) fn answer_with_close(exchanges: &mut Exchanges) {
    for ex in exchanges.iter_mut() {
        let head_out = ex
            .forward()
            .is_some_and(|f| !matches!(f.resp, Receiving::Head { .. }));
        if !head_out {
            ex.keep_alive = false;
        }
    }
}

/// A graceful stop lets go of `listeners`: what waits in their accept queues is accepted
/// and returned (to be served with `Connection: close`) rather than moved or reset by the
/// kernel, then they close, one worker of the process at a time (`LISTENER_CLOSE`).
pub(super) fn close_listeners(
    listeners: &mut Vec<WorkerListener>,
    registry: &Registry,
) -> Vec<Queued> {
    // A poisoned lock only means another worker panicked while holding it: the order it
    // gives still holds.
    let _one_at_a_time = LISTENER_CLOSE.lock().unwrap_or_else(|e| e.into_inner());
    let mut queued = Vec::new();
    // At most a full queue's worth per listener: connections still arriving while it is
    // taken (a flood during the stop) must not hold this worker, and the others waiting on
    // the lock, for as long as they come.
    let queue_len = crate::server::BACKLOG.unsigned_abs() as usize;
    for li in 0..listeners.len() {
        for _ in 0..queue_len {
            let Accepted::Conn(sock, peer, tls, protos) = listener::accept(listeners, li) else {
                break;
            };
            queued.push((sock, peer, tls, protos));
        }
    }
    for l in listeners.iter_mut() {
        let _ = registry.deregister(&mut l.socket);
    }
    listeners.clear();
    queued
}

/// Hands each connection accepted from a closing listener to `take` (the worker's way in).
pub(super) fn each_accepted(queued: Vec<Queued>, mut take: impl FnMut(client::Accepted<'_>)) {
    for (sock, peer, tls, protos) in queued {
        let protos = &protos;
        take(client::Accepted {
            sock,
            peer,
            tls,
            protos,
        });
    }
}

/// A connection accepted from a closing listener: socket, peer, TLS, protocols.
pub(super) type Queued = (Socket, SocketAddr, bool, Vec<config::Proto>);

/// The end of the last call: the idle HTTP/1 and HTTP/3 connections to close. An HTTP/1 one
/// is read once first: bytes that came since its last read are a request to serve (with
/// `Connection: close`; it is queued on `dirty`), not an idle connection; closing a socket
/// with unread bytes would reset it, and the client would lose that request.
pub(super) fn idle_to_close(
    clients: &mut Clients,
    bufs: &mut BufPool,
    dirty: &mut VecDeque<Token>,
) -> Vec<ClientId> {
    let mut idle = clients.idle_h1();
    idle.retain(|&ci| {
        let Some(c) = clients.get_mut(ci) else {
            return false;
        };
        if !matches!(c.codec, Codec::H1(_)) {
            return true;
        }
        client::read(c, ci, bufs, dirty);
        if c.is_idle() && c.end.reads() {
            return true;
        }
        dirty.push_back(client_token(ci));
        false
    });
    idle
}
