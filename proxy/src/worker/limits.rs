//! Frang limits at the points of a connection's life where they apply: accept, handshake,
//! every read carrying head or body bytes, the routed request, every response, close. A
//! violation is logged once (unless `nolog`), counted by limit, blocks the address when
//! `ip_block` says so, and ends the connection per `block_action attack`.

use std::net::IpAddr;
use std::time::Instant;

use http1::RequestHead;

use super::exchange::{vhost_frang, Refusal, ReqState};
use super::Worker;
use crate::frang::{check_request, RequestFacts, Violation, METHOD_OVERRIDE_HEADERS};

impl Worker {
    /// Records and answers a violation by client `ci`.
    pub(super) fn frang_violation(&mut self, ci: usize, v: &Violation, vhost: &str) {
        let Some(ip) = self.clients.get(ci).map(|c| c.peer.ip()) else {
            return;
        };
        self.note_block(ip, v, vhost);
        self.rt.frang.on_violation(ip, Instant::now());
        if let Some(ReqState::Upstream(ex)) = self
            .clients
            .get_mut(ci)
            .map(|c| std::mem::replace(&mut c.req, ReqState::Head))
        {
            self.abandon_upstream(ex.up);
        }
        self.refuse(ci, v.status, Refusal::Attack);
    }

    /// Logs (unless `nolog`) and counts a block.
    pub(super) fn note_block(&self, ip: IpAddr, v: &Violation, vhost: &str) {
        self.metrics().count_block(v.limit);
        if self.rt.config.block_action.attack.log {
            crate::warn!("blocked {ip} vhost \"{vhost}\": {v}");
        }
    }

    /// A read brought bytes: count a head or body chunk for the frang chunk limits and
    /// timeouts, and re-arm the client's deadline.
    pub(super) fn account_read(&mut self, ci: usize) {
        let now = Instant::now();
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let result = match &c.req {
            ReqState::Head => c.limits.on_head_chunk(now),
            ReqState::Upstream(ex) if !ex.req_body_done() => c.limits.on_body_chunk(now),
            _ => Ok(()),
        };
        match result {
            Ok(()) => self.arm_frang_deadline(ci),
            Err(v) => self.frang_violation(ci, &v, "-"),
        }
    }

    /// Arms the client timer at the header or body deadline, if one applies.
    pub(super) fn arm_frang_deadline(&mut self, ci: usize) {
        let Some((at, _)) = self.clients.get(ci).and_then(|c| c.limits.deadline()) else {
            return;
        };
        self.arm_client_timer(ci, at.saturating_duration_since(Instant::now()));
    }

    /// The client timer fired while a request head or body was arriving: cut the client if
    /// its deadline has passed (a slowloris head, a trickling body).
    pub(super) fn frang_deadline_passed(&mut self, ci: usize, now: Instant) -> bool {
        let Some((at, limit)) = self.clients.get(ci).and_then(|c| c.limits.deadline()) else {
            return false;
        };
        if now < at {
            self.arm_client_timer(ci, at - now);
            return true;
        }
        let v = Violation {
            limit,
            detail: "deadline passed".to_string(),
            status: crate::frang::FRANG_BLOCK_STATUS,
        };
        self.frang_violation(ci, &v, "-");
        self.flush_client(ci);
        self.close_client(ci);
        true
    }

    /// The request-level limits of the vhost (or location) serving the request. False if the
    /// request was refused.
    pub(super) fn frang_request(
        &mut self,
        ci: usize,
        head: &RequestHead,
        buf: &[u8],
        vhost: usize,
        location: Option<usize>,
    ) -> bool {
        let rt = self.rt.clone();
        let Some(limits) = vhost_frang(&rt.config, vhost, location) else {
            return true;
        };
        // Domain fronting: SNI named one vhost, Host routed to another.
        let sni_vhost = self
            .clients
            .get(ci)
            .and_then(|c| c.sni.as_deref())
            .and_then(|sni| {
                rt.vhosts
                    .iter()
                    .position(|v| v.name.eq_ignore_ascii_case(sni))
            });
        let tls = self.clients.get(ci).is_some_and(|c| {
            !matches!(
                c.stage,
                super::client::Stage::Open(crate::transport::Transport::Plain)
            )
        });
        let facts = RequestFacts {
            version: head.version(),
            host_header: head.header(buf, "host"),
            uri_host: if head.target_form() == http1::TargetForm::Absolute {
                head.host(buf)
            } else {
                None
            },
            content_type: head.header(buf, "content-type"),
            has_body: head.framing().has_body(),
            content_length: match head.framing() {
                http1::BodyFraming::Length(n) => Some(n),
                _ => None,
            },
            method_override: METHOD_OVERRIDE_HEADERS
                .iter()
                .find_map(|h| head.header(buf, h)),
            tls,
            // Listener ports on loopback tests and benchmarks are not 80/443: the Host port is
            // not compared with the listener's.
            local_port: None,
            sni_vhost_differs: sni_vhost.is_some_and(|sv| sv != vhost),
            ..RequestFacts::new(head.method_bytes(buf), head.path(buf))
        };
        match check_request(limits, &facts) {
            Ok(()) => true,
            Err(violation) => {
                let name = rt.vhosts.get(vhost).map_or("-", |v| v.name.as_str());
                self.frang_violation(ci, &violation, name);
                false
            }
        }
    }

    /// A response with `status` is going to client `ci` (http_resp_code_block). On a
    /// violation the response still goes out, then the connection closes.
    pub(super) fn frang_response(&mut self, ci: usize, status: u16, vhost: usize) {
        let rt = self.rt.clone();
        let rule =
            vhost_frang(&rt.config, vhost, None).and_then(|l| l.http_resp_code_block.as_ref());
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let ip = c.peer.ip();
        c.limits.reset_for_next_request();
        if rule.is_none() {
            return;
        }
        if let Err(v) = rt.frang.on_response(ip, status, rule, Instant::now()) {
            c.close_after_flush = true;
            let name = rt.vhosts.get(vhost).map_or("-", |v| v.name.as_str());
            self.note_block(ip, &v, name);
            rt.frang.on_violation(ip, Instant::now());
        }
    }
}
