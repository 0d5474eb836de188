//! HTTP/2 to origins (`server_proto h2`, `upstream/h2_conn.rs`), the parts between the loop
//! and the connections: an exchange placed on a stream of a connection (its request head
//! rendered for HTTP/2 from the HTTP/1.1 head `forward.rs` wrote, the same pieces through
//! `http1::RequestSink`), and the turns of connections and stream entries. The worker's
//! steps that call these are `forward.rs` `attach_h2` and `response/mod.rs` `drive_h2`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use http1::{BodyDecoder, ConnectionOption, Forwarding, HeaderEdits};
use mio::Token;

use super::client::Clients;
use super::exchange::{ExchangeId, Exchanges, Forward};
use super::token::{client_token, upstream_token};
use super::upstream::groups::{self, GroupState};
use super::upstream::h2_conn::{self, NewStream};
use super::upstream::{self, UpPhase, UpstreamId, Upstreams};
use crate::buf::BufPool;
use crate::metrics_upstream::{H2ClientSeen, UpstreamMetrics};
use crate::runtime::Runtime;
use crate::timers::Timers;

/// Whether group `group` speaks HTTP/2 to its servers.
pub(super) fn is_h2(rt: &Runtime, group: usize) -> bool {
    rt.groups.get(group).is_some_and(|g| g.h2)
}

/// Connection `ui` (new, or pooled unused: nothing was sent on it) speaks HTTP/2 from now
/// on, listed with its server's HTTP/2 connections for the requests that follow to share.
/// False if it cannot.
pub(super) fn start(
    (upstreams, groups): (&mut Upstreams, &mut [GroupState]),
    rt: &Runtime,
    ui: UpstreamId,
) -> bool {
    let Some(u) = upstreams.get_mut(ui) else {
        return false;
    };
    if h2_conn::is_conn(u) {
        return true;
    }
    if h2_conn::start_conn(u, origin_limits(rt), Instant::now()).is_err() {
        return false;
    }
    if u.phase == UpPhase::Idle {
        u.phase = UpPhase::Busy;
    }
    if let Some(st) = groups::server_mut(groups, u.group, u.server) {
        st.h2_started(ui);
    }
    true
}

/// The `h2` crate's limits for a connection to an origin: the directives that bound the
/// proxy's HTTP/2 clients bound its origins the same way where they mean the same for the
/// client role (the header list it decodes, the control and WINDOW_UPDATE frame rates, the
/// stall of a window or of output the peer does not read); the rest are the crate's.
fn origin_limits(rt: &Runtime) -> h2::Limits {
    let config = &rt.config;
    let defaults = h2::Limits::default();
    h2::Limits {
        max_header_list_size: config
            .http_max_header_list_size
            .unwrap_or(defaults.max_header_list_size),
        ctrl_frame_rate_multiplier: config.ctrl_frame_rate_multiplier,
        window_update_frame_rate_multiplier: config.window_update_frame_rate_multiplier,
        send_window_timeout: config.h2_stall_timeout,
        output_stall_timeout: config.h2_stall_timeout,
        ..defaults
    }
}

/// A health monitor's connection `ui` (just connected) carries the monitor's `request`
/// (HTTP/1.1 text) as the one stream of an HTTP/2 connection: the stream entry, whose
/// response is rendered as HTTP/1.1 for `worker/health.rs` to judge as it judges any
/// server's answer. A TLS server that did not choose h2 gets nothing: the connection ends at
/// its first turn and the check fails. None if the request cannot go as HTTP/2.
pub(super) fn start_check(
    (upstreams, rt): (&mut Upstreams, &Runtime),
    ui: UpstreamId,
    request_text: &[u8],
) -> Option<UpstreamId> {
    let agreed = alpn_agreed(upstreams, ui);
    let new = request(rt, request_text)?;
    let u = upstreams.get_mut(ui)?;
    h2_conn::start_conn(u, origin_limits(rt), Instant::now()).ok()?;
    u.phase = UpPhase::Busy;
    if !agreed {
        u.peer_closed = true;
        u.peer_failed = true;
    }
    if let Some(c) = h2_conn::conn_mut(u) {
        c.probe = true;
    }
    h2_conn::open_stream(upstreams, ui, None, new).ok()
}

/// Whether connection `ui`, just connected, may speak HTTP/2: cleartext (h2c by prior
/// knowledge), or TLS whose server chose `h2` by ALPN (the only protocol offered to an `h2`
/// group). A server that chose nothing is logged: its connection closes before any request
/// goes, and the exchanges waiting for it are retried or answered 502.
pub(super) fn alpn_agreed(upstreams: &Upstreams, ui: UpstreamId) -> bool {
    let Some(u) = upstreams.get(ui) else {
        return false;
    };
    match u.alpn() {
        None | Some(upstream::Alpn::H2) => true,
        Some(other) => {
            crate::error!(
                "upstream {}: `server_proto h2`, but the server did not choose h2 by ALPN \
                 ({other:?}): check that it serves HTTP/2 over TLS",
                u.addr
            );
            false
        }
    }
}

/// The parts placing an exchange on a stream touches.
pub(super) struct Parts<'a> {
    pub rt: &'a Runtime,
    pub upstreams: &'a mut Upstreams,
    pub exchanges: &'a mut Exchanges,
    pub clients: &'a Clients,
    pub timers: &'a mut Timers,
    pub dirty: &'a mut VecDeque<Token>,
}

/// What became of an exchange sent to an HTTP/2 connection ([`attach`]).
pub(super) enum Placed {
    Sent,
    /// Its client left meanwhile: the exchange is dropped.
    ClientGone,
    /// No stream could carry it: 502.
    Failed(Box<Forward>),
}

/// Sends `forward` (exchange `id`'s) on a new stream of HTTP/2 connection `conn`.
pub(super) fn attach(
    p: Parts<'_>,
    (id, conn): (ExchangeId, UpstreamId),
    mut forward: Box<Forward>,
) -> Placed {
    let ci = p.exchanges.client_of(id, p.clients);
    if ci.is_none() && p.exchanges.get(id).is_none_or(|ex| ex.has_client()) {
        return Placed::ClientGone;
    }
    let Some(new) = request(p.rt, &forward.head) else {
        return Placed::Failed(forward);
    };
    let Ok(si) = h2_conn::open_stream(p.upstreams, conn, Some(id), new) else {
        return Placed::Failed(forward);
    };
    let (server, quiet) = match p.upstreams.get(si) {
        Some(u) => (Some(u.addr), u.forward_timeout),
        None => (None, Duration::from_secs(60)),
    };
    if !forward.facts.replayable() {
        forward.head = Vec::new();
    }
    forward.up = si;
    forward.sending.resend();
    forward.upstream_time = None;
    if let Some(ex) = p.exchanges.get_mut(id) {
        if let Some(log) = ex.log.as_mut() {
            log.upstream = server;
        }
        ex.send(forward);
    }
    // The exchange's own `server_forward_timeout` (or shorter `grpc-timeout`), on its stream
    // entry.
    upstream::arm_timer(p.upstreams, p.timers, si, quiet);
    p.dirty.push_back(upstream_token(conn));
    if let Some(ci) = ci {
        p.dirty.push_back(client_token(ci));
    }
    Placed::Sent
}

/// The HTTP/2 request for an upstream head written as HTTP/1.1 by `forward.rs`: its fields
/// are final (the proxy's own added, hop-by-hop ones gone), so nothing is added.
fn request(rt: &Runtime, head_text: &[u8]) -> Option<NewStream> {
    let limits = &rt.forward_limits;
    let (head, _) = http1::parse_request(head_text, limits).ok()??;
    let none = HeaderEdits::new();
    let mut sink = crate::upstream_h2::H2Head::new(b"http");
    let framing = head.framing();
    let forwarding = Forwarding {
        forwarded_for: None,
        forwarded_proto: None,
        via: None,
        edits: &none,
        framing,
        connection: ConnectionOption::Default,
        limits,
    };
    http1::forward_request_fields(&mut sink, &head, head_text, &forwarding);
    let head_request = head.method_bytes(head_text) == b"HEAD";
    let body = h2_conn::has_body(framing).then(|| BodyDecoder::new(framing, &rt.limits));
    let mut request = sink.into_request();
    // TE is hop-by-hop: on this hop the proxy is the recipient, and it takes trailers (it
    // relays them to an HTTP/2 or HTTP/3 client). gRPC servers want it said.
    if request.field(b"te").is_none() {
        request.fields.push(h2::Field::new(b"te", b"trailers"));
        request.field_count += 1;
    }
    // A second past the call's deadline: the ends act on it first (the client sees
    // DEADLINE_EXCEEDED); the proxy cuts only an origin that ignores it.
    let quiet = (request.field(b"grpc-timeout").and_then(grpc_timeout))
        .map(|deadline| deadline.saturating_add(GRPC_DEADLINE_GRACE));
    Some(NewStream {
        request,
        body,
        head_request,
        quiet,
    })
}

/// How long past a gRPC call's deadline the proxy waits before it cuts the call itself.
const GRPC_DEADLINE_GRACE: Duration = Duration::from_secs(1);

/// A `grpc-timeout` value (1 to 8 digits and a unit: H, M, S, m, u, n), None if malformed.
fn grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A turn of stream entry `ui` before it goes on as any exchange's connection: its
/// connection is woken when it has request bytes for it; a request sent whole starts the
/// exchange's sending time, one still sending lets its client pass more body.
pub(super) fn stream_turn(
    (upstreams, exchanges, clients): (&Upstreams, &mut Exchanges, &Clients),
    dirty: &mut VecDeque<Token>,
    ui: UpstreamId,
) {
    let Some(u) = upstreams.get(ui) else {
        return;
    };
    let Some((conn, sent)) = h2_conn::stream_state(u) else {
        return;
    };
    let unsent = !u.out.is_empty();
    if unsent || !sent {
        dirty.push_back(upstream_token(conn));
    }
    let Some(id) = u.exchange else {
        return;
    };
    if sent && !unsent {
        if let Some(fwd) = exchanges.get_mut(id).and_then(|ex| ex.forward_mut()) {
            fwd.sending.flushed(Instant::now());
        }
    } else if let Some(ci) = exchanges.client_of(id, clients) {
        dirty.push_back(client_token(ci));
    }
}

/// A turn of HTTP/2 connection `ui` (connected): the stream entries it woke are driven
/// next. True when the connection is over and closes.
pub(super) fn conn_turn(
    (upstreams, bufs, timers): (&mut Upstreams, &mut BufPool, &mut Timers),
    (dirty, metrics): (&mut VecDeque<Token>, &UpstreamMetrics),
    ui: UpstreamId,
) -> bool {
    let turn = h2_conn::turn(upstreams, bufs, ui, Instant::now());
    if turn.seen != H2ClientSeen::default() {
        metrics.h2_client.add(&turn.seen);
    }
    dirty.extend(turn.woken.into_iter().map(upstream_token));
    if !turn.done {
        h2_conn::arm_deadline(upstreams, timers, ui);
    }
    if turn.again && !turn.done {
        dirty.push_back(upstream_token(ui));
    }
    turn.done
}

/// Stream entries whose connection closed, and connections with a reset or a window update
/// to write: driven next.
pub(super) fn wake(upstreams: &mut Upstreams, dirty: &mut VecDeque<Token>) {
    dirty.extend(upstreams.h2_woken.drain(..).map(upstream_token));
}

#[cfg(test)]
mod tests {
    use super::grpc_timeout;
    use std::time::Duration;

    #[test]
    fn grpc_timeouts_are_read_by_their_unit_and_bad_ones_ignored() {
        assert_eq!(grpc_timeout(b"5S"), Some(Duration::from_secs(5)));
        assert_eq!(grpc_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"S", b"123456789S", b"5s", b"-5S", b"5 S"] {
            assert_eq!(grpc_timeout(bad), None, "{}", bad.escape_ascii());
        }
    }
}
