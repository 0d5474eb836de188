//! Frang limits at the points of a connection's life where they apply: accept, handshake,
//! every read carrying head or body bytes, the routed request, every response, close. A
//! violation is logged once (unless `nolog`), counted by limit, blocks the address when
//! `ip_block` says so, and ends the connection per `block_action attack`. The head being
//! read is the connection's (`ConnLimits`, the client timer); a body is its exchange's
//! (`RequestLimits`, the exchange timer).

use std::net::IpAddr;
use std::time::Instant;

use super::client::codec::Codec;
use super::client::{ClientId, Clients};
use super::exchange::{Exchange, ExchangeId, Exchanges};
use super::finish::RefuseAt;
use super::h1::ConnState;
use crate::frang::{check_request, RequestFacts, Violation};
use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::timers::Timers;
use http1::ParseError;

/// The request-level frang limits of vhost index `vhost` (0: the default vhost) and its
/// location, from the configuration.
pub(super) fn vhost_frang(
    config: &config::Config,
    vhost: usize,
    location: Option<usize>,
) -> Option<&config::FrangHttp> {
    let v = if vhost == 0 {
        Some(&config.default_vhost)
    } else {
        config.vhosts.get(vhost - 1)
    }?;
    Some(
        location
            .and_then(|l| v.locations.get(l))
            .map_or(&v.frang, |l| &l.frang),
    )
}

/// What a read's bytes did to the connection's limits (`account_read`).
pub(super) enum ReadVerdict {
    Within,
    /// A `tft` limit on the connection's records: reset it (Tempesta's `T_BLOCK_WITH_RST`).
    Reset(Violation),
    /// A chunk limit of the head or the body being read: refused where it applies.
    Refuse(RefuseAt, Violation),
}

/// A read brought bytes to client `ci`: counts the TLS records against the connection's
/// fingerprint (`tft`), a head or body chunk for the frang chunk limits and timeouts, and
/// re-arms the deadline it moves. `now` is the loop turn's clock: a head or body timeout is
/// seconds, a turn microseconds. Inlined: it runs after every read, and as a call it cost
/// about 70 instructions per keep-alive request more than inside `drive_client`.
#[inline]
pub(super) fn account_read(
    (clients, exchanges, timers): (&mut Clients, &mut Exchanges, &mut Timers),
    rt: &Runtime,
    ci: ClientId,
    now: Instant,
) -> ReadVerdict {
    let Some(c) = clients.get_mut(ci) else {
        return ReadVerdict::Within;
    };
    if let Err(v) = super::fingerprint_hook::on_records(c, &rt.fingerprints, now) {
        return ReadVerdict::Reset(v);
    }
    let Codec::H1(h1) = &c.codec else {
        // HTTP/2 counts after the bytes went into the connection (`process_h2`): only then
        // is it known whether they carried part of a head; bodies count per DATA frame.
        return ReadVerdict::Within;
    };
    match *h1.state() {
        ConnState::Idle => match c.limits.on_head_chunk(now) {
            Ok(()) => {
                if let Some((at, _)) = c.limits.deadline() {
                    clients.extend_timer(timers, ci, at);
                }
                ReadVerdict::Within
            }
            Err(v) => ReadVerdict::Refuse(RefuseAt::Connection, v),
        },
        ConnState::Busy(id) => {
            let Some(ex) = exchanges.get_mut(id).filter(|ex| ex.reading_body()) else {
                return ReadVerdict::Within;
            };
            match ex.limits.on_body_chunk(now) {
                Ok(()) => {
                    exchanges.arm_body_deadline(timers, id, now);
                    ReadVerdict::Within
                }
                Err(v) => ReadVerdict::Refuse(RefuseAt::Exchange(id), v),
            }
        }
        // A tunnel's bytes are not HTTP: frang's request limits do not apply to them.
        ConnState::Drain(_) | ConnState::Tunnel(_) => ReadVerdict::Within,
    }
}

/// Where a request's head or body stands against its deadline when its timer fires.
pub(super) enum Deadline {
    /// No deadline applies.
    None,
    /// Not yet: the timer is armed again for it.
    Pending,
    /// Passed: the client is cut for `limit`.
    Passed(&'static str),
}

impl Exchanges {
    /// Arms exchange `id`'s timer at its body deadline, if one applies.
    pub(super) fn arm_body_deadline(&mut self, timers: &mut Timers, id: ExchangeId, now: Instant) {
        let Some((at, _)) = self.get(id).and_then(|ex| ex.limits.deadline()) else {
            return;
        };
        self.arm_timer(timers, id, at.saturating_duration_since(now));
    }

    /// Exchange `id`'s timer fired while its body was arriving: a trickling body is cut once
    /// its deadline has passed.
    pub(super) fn body_deadline(
        &mut self,
        timers: &mut Timers,
        id: ExchangeId,
        now: Instant,
    ) -> Deadline {
        let Some((at, limit)) = self.get(id).and_then(|ex| ex.limits.deadline()) else {
            return Deadline::None;
        };
        if now < at {
            self.arm_timer(timers, id, at - now);
            return Deadline::Pending;
        }
        Deadline::Passed(limit)
    }
}

impl Clients {
    /// Client `ci`'s timer fired while a request head was arriving: a slowloris head is cut
    /// once its header deadline has passed.
    pub(super) fn head_deadline(
        &mut self,
        timers: &mut Timers,
        ci: ClientId,
        now: Instant,
    ) -> Deadline {
        let Some((at, limit)) = self.get(ci).and_then(|c| c.limits.deadline()) else {
            return Deadline::None;
        };
        if now < at {
            self.arm_timer(timers, ci, at);
            return Deadline::Pending;
        }
        Deadline::Passed(limit)
    }
}

/// The violation a passed deadline for `limit` is.
pub(super) fn deadline_passed(limit: &'static str) -> Violation {
    Violation {
        limit,
        detail: "deadline passed".to_string(),
        status: crate::frang::FRANG_BLOCK_STATUS,
    }
}

/// Records a violation by client `ci`, refused at `at` (the caller refuses): the client's
/// end is blocked, the block logged and counted, and frang told (`ip_block`). False if the
/// client is gone. Every protocol's requests come here: one verdict whatever the protocol.
pub(super) fn record_violation(
    (clients, exchanges): (&mut Clients, &Exchanges),
    (rt, metrics): (&Runtime, &Metrics),
    (ci, at): (ClientId, RefuseAt),
    v: &Violation,
) -> bool {
    let Some(c) = clients.get_mut(ci) else {
        return false;
    };
    c.end.block();
    let ip = c.peer.ip();
    let routed = match at {
        RefuseAt::Exchange(id) => exchanges.get(id).and_then(|ex| ex.vhost),
        RefuseAt::Connection | RefuseAt::Stream(_) => None,
    };
    note_block((rt, metrics), ip, v, vhost_name(rt, routed));
    rt.frang.on_violation(ip, Instant::now());
    true
}

/// The request-level limits of the vhost (or location) serving exchange `id`: Ok, or the
/// client and the violation to refuse it for; None if the exchange or its client is gone.
pub(super) fn judge_request(
    (exchanges, clients): (&Exchanges, &Clients),
    rt: &Runtime,
    id: ExchangeId,
    now: Instant,
) -> Option<Result<(), (ClientId, Violation)>> {
    let ex = exchanges.get(id)?;
    let verdict = request_verdict(ex, clients, rt, now)?;
    Some(verdict.map_err(|v| (ex.client, v)))
}

/// A `101` from the origin turned client `ci`'s connection into a tunnel
/// (http_resp_code_block): on a violation the connection closes after it.
pub(super) fn judge_upgrade(
    clients: &mut Clients,
    (rt, metrics): (&Runtime, &Metrics),
    (ci, status, vhost): (ClientId, u16, usize),
) {
    let rule = vhost_frang(&rt.config, vhost, None).and_then(|l| l.http_resp_code_block.as_ref());
    if rule.is_none() {
        return;
    }
    let Some(c) = clients.get_mut(ci) else {
        return;
    };
    let ip = c.peer.ip();
    if let Err(v) = rt.frang.on_response(ip, status, rule, Instant::now()) {
        c.end.close_after_flush();
        note_block((rt, metrics), ip, &v, vhost_name(rt, Some(vhost)));
        rt.frang.on_violation(ip, Instant::now());
    }
}

/// `http_resp_code_block` refused the origin's response to exchange `id`: logged, counted
/// and told to frang against the client's address (the caller refuses the exchange).
pub(super) fn record_response_block(
    (exchanges, clients): (&Exchanges, &Clients),
    (rt, metrics): (&Runtime, &Metrics),
    id: ExchangeId,
    v: &Violation,
) {
    let Some(ex) = exchanges.get(id) else {
        return;
    };
    if let Some(ip) = clients.get(ex.client).map(|c| c.peer.ip()) {
        note_block((rt, metrics), ip, v, vhost_name(rt, ex.vhost));
        rt.frang.on_violation(ip, Instant::now());
    }
}

/// The name of vhost index `vhost` for a log line ("-" for none).
pub(super) fn vhost_name(rt: &Runtime, vhost: Option<usize>) -> &str {
    vhost
        .and_then(|v| rt.vhosts.get(v))
        .map_or("-", |v| v.name.as_str())
}

/// Logs (unless `nolog`) and counts a block.
pub(super) fn note_block(
    (rt, metrics): (&Runtime, &Metrics),
    ip: IpAddr,
    v: &Violation,
    vhost: &str,
) {
    metrics.count_block(v.limit);
    if rt.config.block_action.attack.log {
        crate::warn!("blocked {ip} vhost \"{vhost}\": {v}");
    }
}

/// The request-level limits (and the request fingerprint's) on exchange `ex`, at `now`:
/// Err with the violation; None if its client is gone.
fn request_verdict(
    ex: &Exchange,
    clients: &Clients,
    rt: &Runtime,
    now: Instant,
) -> Option<Result<(), Violation>> {
    let vhost = ex.vhost.unwrap_or(0);
    let Some(limits) = vhost_frang(&rt.config, vhost, ex.location) else {
        return Some(Ok(()));
    };
    let c = clients.get(ex.client)?;
    // Domain fronting: SNI named one vhost, Host routed to another. (Bytes: the name is a
    // `str` only through a UTF-8 check.)
    let sni_vhost = c.sni.as_ref().and_then(|sni| {
        rt.vhosts
            .iter()
            .position(|v| v.name.as_bytes().eq_ignore_ascii_case(sni.as_bytes()))
    });
    let request = &ex.request;
    let head = request.head();
    let bytes = request.bytes();
    // The fields come from the index the parser made: no scan of the list by name.
    let facts = RequestFacts {
        version: request.version(),
        host_header: head.host_field(bytes),
        uri_host: if head.target_form() == http1::TargetForm::Absolute {
            request.authority()
        } else {
            None
        },
        content_type: head.content_type(bytes),
        has_body: request.has_body(),
        content_length: match request.framing() {
            http1::BodyFraming::Length(n) => Some(n),
            _ => None,
        },
        method_override: head.method_override(bytes),
        method_override_conflict: head.method_override_conflict(),
        tls: request.scheme() == super::request::Scheme::Https,
        // Listener ports on loopback tests and benchmarks are not 80/443: the Host port is
        // not compared with the listener's.
        local_port: None,
        sni_vhost_differs: sni_vhost.is_some_and(|sv| sv != vhost),
        ..RequestFacts::new(request.method_bytes(), request.path())
    };
    let fingerprint = || super::fingerprint_hook::on_request(&rt.fingerprints, request, now);
    Some(check_request(limits, &facts).and_then(|()| fingerprint()))
}

/// frang's `http_resp_code_block` on a response with `status` from the origin to `ip`, for a
/// request of `vhost`: counted, and refused over the limit.
pub(super) fn judge_response_status(
    rt: &crate::runtime::Runtime,
    vhost: usize,
    ip: IpAddr,
    status: u16,
) -> Result<(), Violation> {
    let rule = vhost_frang(&rt.config, vhost, None).and_then(|l| l.http_resp_code_block.as_ref());
    if rule.is_none() {
        return Ok(());
    }
    rt.frang.on_response(ip, status, rule, Instant::now())
}

/// The frang directive behind a parser limit error, when frang configured that limit.
pub(super) fn frang_limit_of(config: &config::Config, e: &ParseError) -> Option<&'static str> {
    let global = &config.frang;
    let vhost = &config.default_vhost.frang;
    match e {
        // CONNECT is outside Tempesta's method list: frang's http_methods refuses it (403)
        // unless `unknown` is listed; only then does the proxy say it does not tunnel.
        ParseError::ConnectNotSupported if !crate::frang::method_allowed(vhost, b"CONNECT") => {
            Some("http_methods")
        }
        ParseError::UriTooLong if vhost.http_uri_len.is_some() => Some("http_uri_len"),
        ParseError::HeaderFieldTooLong if global.http_hdr_len.is_some() => Some("http_hdr_len"),
        ParseError::TooManyHeaders if global.http_header_cnt.is_some() => Some("http_header_cnt"),
        ParseError::BodyTooLarge if vhost.http_body_len.is_some() => Some("http_body_len"),
        _ => None,
    }
}
