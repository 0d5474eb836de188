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
use super::exchange::{Exchange, ExchangeId};
use super::finish::{Refusal, RefuseAt};
use super::h1::ConnState;
use super::Worker;
use crate::close_reason::CloseReason;
use crate::frang::{check_request, RequestFacts, Violation};
use crate::metrics::Metrics;
use crate::runtime::Runtime;

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

impl Worker {
    /// Records and answers a violation by client `ci`, refused at `at`. Every protocol's
    /// requests come here: one verdict (log line, counter, `ip_block`, `block_action
    /// attack`) whatever the protocol.
    pub(super) fn frang_violation(&mut self, ci: ClientId, at: RefuseAt, v: &Violation) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        c.end.block();
        let ip = c.peer.ip();
        let routed = match at {
            RefuseAt::Exchange(id) => self.exchanges.get(id).and_then(|ex| ex.vhost),
            RefuseAt::Connection | RefuseAt::Stream(_) => None,
        };
        let vhost = self.vhost_name(routed);
        note_block((&self.rt, self.metrics()), ip, v, vhost);
        self.rt.frang.on_violation(ip, Instant::now());
        self.refuse_at(ci, at, v.status, Refusal::Attack);
    }

    /// Resets client `ci` (RST, Tempesta's `T_BLOCK_WITH_RST`) for `v`, a refusal of the
    /// connection itself (a `tft` limit on its records).
    fn refuse_connection(&mut self, ci: ClientId, v: &Violation) {
        let Some(ip) = self.clients.get(ci).map(|c| c.peer.ip()) else {
            return;
        };
        note_block((&self.rt, self.metrics()), ip, v, "-");
        self.reset_client(ci, CloseReason::Frang);
    }

    /// A read brought bytes: count the TLS records against the connection's fingerprint
    /// (`tft`), a head or body chunk for the frang chunk limits and timeouts, and re-arm the
    /// deadline it moves.
    pub(super) fn account_read(&mut self, ci: ClientId) {
        // The loop turn's clock: a head or body timeout is seconds, a turn microseconds.
        let now = self.now;
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        if let Err(v) = super::fingerprint_hook::on_records(c, &self.rt.fingerprints, now) {
            return self.refuse_connection(ci, &v);
        }
        let Codec::H1(h1) = &c.codec else {
            // HTTP/2 counts after the bytes went into the connection (`process_h2`): only
            // then is it known whether they carried part of a head; bodies count per DATA
            // frame.
            return;
        };
        match *h1.state() {
            ConnState::Idle => match c.limits.on_head_chunk(now) {
                Ok(()) => self.arm_head_deadline(ci),
                Err(v) => self.frang_violation(ci, RefuseAt::Connection, &v),
            },
            ConnState::Busy(id) => {
                let Some(ex) = self.exchanges.get_mut(id).filter(|ex| ex.reading_body()) else {
                    return;
                };
                match ex.limits.on_body_chunk(now) {
                    Ok(()) => self.arm_body_deadline(id),
                    Err(v) => self.frang_violation(ci, RefuseAt::Exchange(id), &v),
                }
            }
            // A tunnel's bytes are not HTTP: frang's request limits do not apply to them.
            ConnState::Drain(_) | ConnState::Tunnel(_) => {}
        }
    }

    /// Arms client `ci`'s timer at its header deadline, if one applies.
    fn arm_head_deadline(&mut self, ci: ClientId) {
        let Some((at, _)) = self.clients.get(ci).and_then(|c| c.limits.deadline()) else {
            return;
        };
        self.clients.extend_timer(&mut self.timers, ci, at);
    }

    /// Arms exchange `id`'s timer at its body deadline, if one applies.
    pub(super) fn arm_body_deadline(&mut self, id: ExchangeId) {
        let Some((at, _)) = self.exchanges.get(id).and_then(|ex| ex.limits.deadline()) else {
            return;
        };
        self.exchanges
            .arm_timer(&mut self.timers, id, at.saturating_duration_since(self.now));
    }

    /// The client timer fired while a request head was arriving: cut the client if its
    /// deadline has passed (a slowloris head). False if no header deadline applies.
    pub(super) fn head_deadline_passed(&mut self, ci: ClientId, now: Instant) -> bool {
        let Some((at, limit)) = self.clients.get(ci).and_then(|c| c.limits.deadline()) else {
            return false;
        };
        if now < at {
            self.clients.arm_timer(&mut self.timers, ci, at);
            return true;
        }
        self.deadline_violation(ci, None, limit);
        true
    }

    /// Exchange `id`'s timer fired while its body was arriving: cut the client if the body
    /// deadline has passed (a trickling body).
    pub(super) fn body_deadline(&mut self, id: ExchangeId, now: Instant) {
        let Some((at, limit)) = self.exchanges.get(id).and_then(|ex| ex.limits.deadline()) else {
            return;
        };
        if now < at {
            return self.exchanges.arm_timer(&mut self.timers, id, at - now);
        }
        if let Some(ci) = self.exchanges.client_of(id, &self.clients) {
            self.deadline_violation(ci, Some(id), limit);
        }
    }

    pub(super) fn deadline_violation(
        &mut self,
        ci: ClientId,
        id: Option<ExchangeId>,
        limit: &'static str,
    ) {
        let v = Violation {
            limit,
            detail: "deadline passed".to_string(),
            status: crate::frang::FRANG_BLOCK_STATUS,
        };
        self.frang_violation(ci, id.into(), &v);
        self.flush_client(ci);
        self.close_client(ci, CloseReason::Frang);
    }

    /// The request-level limits of the vhost (or location) serving exchange `id`. False if
    /// the request was refused.
    pub(super) fn frang_request(&mut self, id: ExchangeId) -> bool {
        let Some(ex) = self.exchanges.get(id) else {
            return false;
        };
        match request_verdict(ex, &self.clients, &self.rt, self.now) {
            Some(Ok(())) => true,
            None => false,
            Some(Err(violation)) => {
                let ci = ex.client;
                self.frang_violation(ci, RefuseAt::Exchange(id), &violation);
                false
            }
        }
    }

    /// `http_resp_code_block` refused the origin's response to exchange `id` before any of
    /// it was sent: as Tempesta does, the client gets 403 instead (per `block_action attack`)
    /// and the connection closes; the upstream connection, its response unread, is closed.
    pub(super) fn block_response(&mut self, id: ExchangeId, v: &Violation) {
        let Some(ex) = self.exchanges.get(id) else {
            return;
        };
        if let Some(ip) = self.clients.get(ex.client).map(|c| c.peer.ip()) {
            let name = self.vhost_name(ex.vhost).to_owned();
            note_block((&self.rt, self.metrics()), ip, v, &name);
            self.rt.frang.on_violation(ip, Instant::now());
        }
        self.refuse_exchange(id, 403, Refusal::Attack);
    }

    /// A `101` from the origin turned client `ci`'s connection into a tunnel
    /// (http_resp_code_block): on a violation the connection closes after it.
    pub(super) fn frang_response(&mut self, ci: ClientId, status: u16, vhost: usize) {
        let rt = self.rt.clone();
        let rule =
            vhost_frang(&rt.config, vhost, None).and_then(|l| l.http_resp_code_block.as_ref());
        if rule.is_none() {
            return;
        }
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let ip = c.peer.ip();
        if let Err(v) = rt.frang.on_response(ip, status, rule, Instant::now()) {
            c.end.close_after_flush();
            let name = rt.vhosts.get(vhost).map_or("-", |v| v.name.as_str());
            note_block((&rt, self.metrics()), ip, &v, name);
            rt.frang.on_violation(ip, Instant::now());
        }
    }
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
