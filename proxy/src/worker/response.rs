//! The response side of an exchange: relay the upstream's response to the client (or answer
//! from the cache instead), finish the exchange, or answer for an upstream that failed.

use http1::{BodyDecoder, BodyFraming, ConnectionOption, Forwarding};

use super::exchange::{Exchange, Failure, ReqState, RespPhase};
use super::{client_token, Worker};
use crate::access_log::RequestRecord as AccessRecord;
use crate::metrics::bump;

/// Interim (1xx) responses relayed for one request; a server sending more is broken or
/// hostile, and each one would be copied to the client.
const MAX_INTERIM_RESPONSES: u32 = 8;

/// Whether a response to HEAD announced a body (which then does not follow, unless the
/// server is faulty).
fn announces_body(head: &http1::ResponseHead, buf: &[u8]) -> bool {
    let bodiless_status = head.status() == 204 || head.status() == 304;
    !bodiless_status
        && (head.content_length().is_some_and(|n| n > 0)
            || head.header(buf, "transfer-encoding").is_some())
}

impl Worker {
    /// Relays what upstream `ui` sent to client `ci`. True if anything moved.
    pub(super) fn relay_response(&mut self, ci: usize, ui: usize) -> bool {
        let mut moved = false;
        loop {
            let rt = &self.rt;
            let Worker {
                clients,
                upstreams,
                scratch,
                ..
            } = self;
            let Some(c) = clients.get_mut(ci) else {
                return moved;
            };
            let Some(u) = upstreams.get_mut(ui) else {
                return moved;
            };
            let ReqState::Upstream(ex) = &mut c.req else {
                return moved;
            };
            let empty: &[u8] = &[];
            let input = u.rbuf.as_ref().map_or(empty, |b| b.bytes());
            match &mut ex.resp {
                RespPhase::AwaitHead => {
                    if input.is_empty() {
                        if u.peer_closed {
                            let reused = u.reused;
                            return self.upstream_lost(ci, ui, reused) || moved;
                        }
                        return moved;
                    }
                    let head = match http1::parse_response(input, &rt.limits, ex.is_head) {
                        Ok(Some(h)) => h,
                        Ok(None)
                            if !u.peer_closed && !u.rbuf.as_mut().is_some_and(|b| b.is_full()) =>
                        {
                            return moved
                        }
                        Ok(None) | Err(_) => {
                            bump(&self.metrics().upstream_errors);
                            self.close_upstream(ui);
                            self.exchange_failed(ci, Failure::BadResponse);
                            return true;
                        }
                    };
                    let (head, len) = head;
                    let status = head.status();
                    if (100..200).contains(&status) {
                        // Interim responses (100 Continue) go through as they are, a bounded
                        // number of them; 101 would need a tunnel, so it is a bad response here.
                        ex.interim += 1;
                        if status == 101 || ex.interim > MAX_INTERIM_RESPONSES {
                            if status != 101 {
                                bump(&self.metrics().upstream_interim_floods);
                            }
                            self.close_upstream(ui);
                            self.exchange_failed(ci, Failure::BadResponse);
                            return true;
                        }
                        // The proxy answered `Expect: 100-continue` itself; an HTTP/1.0
                        // client gets no interim responses at all.
                        if !(ex.http10 || status == 100 && ex.continue_sent) {
                            c.out.push(&input[..len]);
                            ex.sent_to_client = true;
                        }
                        if let Some(b) = u.rbuf.as_mut() {
                            b.consume(len);
                        }
                        moved = true;
                        continue;
                    }
                    // The cache may answer instead: a 304 to its revalidation refreshes the
                    // stored entry; an error may be replaced by a stale entry.
                    if let Some(fill) = ex.fill.as_mut() {
                        if status == 304 && fill.revalidating.is_some() {
                            let fields: Vec<(&[u8], &[u8])> =
                                head.headers().fields(input).collect();
                            let entry = fill.not_modified(&fields);
                            u.keep_alive = head.keep_alive();
                            if let Some(b) = u.rbuf.as_mut() {
                                b.consume(len);
                            }
                            return match entry {
                                Some(entry) => self.answer_from_cache(ci, ui, entry, true),
                                None => {
                                    self.close_upstream(ui);
                                    self.exchange_failed(ci, Failure::BadResponse);
                                    true
                                }
                            };
                        }
                        if let Some(entry) = fill.stale_instead(status) {
                            return self.answer_from_cache(ci, ui, entry, false);
                        }
                    }
                    // No response edits if the vhost vanished in a reload meanwhile.
                    let none = http1::HeaderEdits::new();
                    let edits = match rt.vhosts.get(ex.vhost) {
                        Some(v) => ex
                            .location
                            .and_then(|l| v.locations.get(l))
                            .map_or(&v.response_edits, |l| &l.response_edits),
                        None => &none,
                    };
                    // An HTTP/1.0 client cannot read chunked framing: its body is sent
                    // close-delimited instead (the chunks' data only).
                    let framing = match head.forward_framing() {
                        BodyFraming::Chunked if ex.http10 => BodyFraming::CloseDelimited,
                        framing => framing,
                    };
                    ex.dechunk = ex.http10 && matches!(head.framing(), BodyFraming::Chunked);
                    let connection = if !ex.keep_alive {
                        ConnectionOption::Close
                    } else if ex.http10 {
                        ConnectionOption::KeepAlive
                    } else {
                        ConnectionOption::Default
                    };
                    scratch.clear();
                    let written = http1::write_response_head(
                        scratch,
                        &head,
                        input,
                        &Forwarding {
                            forwarded_for: None,
                            via: None,
                            edits,
                            framing,
                            connection,
                            limits: &rt.forward_limits,
                        },
                    );
                    // The proxy's fields took the head over what a client parsing like this
                    // proxy accepts (`Limits::for_forwarding`): a bad response, never relayed.
                    if written.is_err() {
                        bump(&self.metrics().upstream_errors);
                        self.close_upstream(ui);
                        self.exchange_failed(ci, Failure::BadResponse);
                        return true;
                    }
                    c.out.push(scratch);
                    if let Some(fill) = ex.fill.as_mut() {
                        fill.begin_store(status, scratch, head.content_length());
                    }
                    if matches!(framing, BodyFraming::CloseDelimited)
                        || (ex.http10 && matches!(framing, BodyFraming::Chunked))
                    {
                        c.close_after_flush = true;
                    }
                    ex.status = status;
                    ex.sent_to_client = true;
                    ex.body_may_follow = ex.is_head && announces_body(&head, input);
                    ex.resp = RespPhase::Body(BodyDecoder::new(
                        head.framing(),
                        &http1::Limits {
                            max_body_bytes: None,
                            ..rt.limits.clone()
                        },
                    ));
                    // The upstream closes after a response without keep-alive: never pool it.
                    u.keep_alive = head.keep_alive();
                    if let Some(b) = u.rbuf.as_mut() {
                        b.consume(len);
                    }
                    moved = true;
                }
                RespPhase::Body(decoder) => {
                    if !c.out.has_room() {
                        return moved;
                    }
                    if input.is_empty() && !decoder.is_done() {
                        if u.peer_closed {
                            let complete = decoder.finish_at_eof().is_ok();
                            if complete {
                                self.complete_exchange(ci, ui);
                                return true;
                            }
                            bump(&self.metrics().upstream_errors);
                            self.close_upstream(ui);
                            self.close_client(ci);
                            return true;
                        }
                        return moved;
                    }
                    match decoder.decode(input) {
                        Ok(step) => {
                            let forwarded =
                                if matches!(decoder, BodyDecoder::Chunked(_)) && !ex.dechunk {
                                    0..step.consumed
                                } else {
                                    step.data.clone()
                                };
                            c.out.push(&input[forwarded.clone()]);
                            ex.body_bytes += forwarded.len() as u64;
                            if let Some(fill) = ex.fill.as_mut() {
                                fill.push_body(&input[step.data.clone()]);
                            }
                            if let Some(b) = u.rbuf.as_mut() {
                                b.consume(step.consumed);
                            }
                            moved |= step.consumed > 0;
                            if step.done {
                                self.complete_exchange(ci, ui);
                                return true;
                            }
                            if step.consumed == 0 {
                                return moved;
                            }
                        }
                        Err(_) => {
                            bump(&self.metrics().upstream_errors);
                            self.close_upstream(ui);
                            self.close_client(ci);
                            return true;
                        }
                    }
                }
            }
        }
    }

    /// The upstream closed before a response: retry a replayable request on a fresh
    /// connection if this one was a reused keep-alive connection, else fail.
    pub(super) fn upstream_lost(&mut self, ci: usize, ui: usize, reused: bool) -> bool {
        self.close_upstream(ui);
        self.exchange_failed(
            ci,
            if reused {
                Failure::Reset
            } else {
                Failure::BadResponse
            },
        );
        true
    }

    pub(super) fn complete_exchange(&mut self, ci: usize, ui: usize) -> bool {
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        let ReqState::Upstream(mut ex) = std::mem::replace(&mut c.req, ReqState::Head) else {
            return false;
        };
        if let Some(fill) = ex.fill.take() {
            fill.complete();
        }
        self.metrics().count_status(ex.status);
        let vhost_name = self
            .rt
            .vhosts
            .get(ex.vhost)
            .map_or("-", |v| v.name.as_str())
            .to_string();
        self.access_log(ex.log.as_deref(), &vhost_name, ex.status, ex.body_bytes);
        self.frang_response(ci, ex.status, ex.vhost);
        self.end_upstream(ui, ex.upstream_end(true));
        let close = !ex.keep_alive;
        self.continue_client(ci, ex.unread_body(), close);
        true
    }

    /// An exchange failed on its upstream side (the connection is already closed).
    pub(super) fn exchange_failed(&mut self, ci: usize, failure: Failure) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        let ReqState::Upstream(mut ex) = std::mem::replace(&mut c.req, ReqState::Head) else {
            return;
        };
        if ex.sent_to_client {
            // Part of a response is out: the only honest end is to close.
            self.close_client(ci);
            return;
        }
        let retries = self
            .rt
            .groups
            .get(ex.group)
            .map_or(0, |g| g.forward_retries);
        match failure {
            Failure::Connect | Failure::Reset if ex.replayable && ex.attempts < retries.max(1) => {
                ex.attempts += 1;
                bump(&self.metrics().upstream_retries);
                self.dispatch(ci, ex);
            }
            Failure::Connect | Failure::Reset | Failure::BadResponse => {
                self.fail_exchange(ci, ex, 502)
            }
            Failure::Timeout => self.fail_exchange(ci, ex, 504),
        }
    }

    /// Ends the exchange of client `ci` with a stored entry instead of the upstream's
    /// response (after a 304 to a revalidation, or a stale entry instead of an error). The
    /// upstream connection is pooled if its response was complete, else closed.
    pub(super) fn answer_from_cache(
        &mut self,
        ci: usize,
        ui: usize,
        entry: std::sync::Arc<cache::Entry>,
        upstream_done: bool,
    ) -> bool {
        let Some(c) = self.clients.get_mut(ci) else {
            return false;
        };
        let ReqState::Upstream(ex) = std::mem::replace(&mut c.req, ReqState::Head) else {
            return false;
        };
        let kind = ex
            .fill
            .as_ref()
            .map_or(cache::ReplyKind::Full, |f| f.reply_kind(&entry));
        self.serve_entry(ci, &entry, kind, !ex.keep_alive, ex.http10);
        self.end_upstream(ui, ex.upstream_end(upstream_done));
        let vhost_name = self
            .rt
            .vhosts
            .get(ex.vhost)
            .map_or("-", |v| v.name.as_str())
            .to_string();
        self.access_log(
            ex.log.as_deref(),
            &vhost_name,
            entry.status(),
            entry.body().len() as u64,
        );
        let close = !ex.keep_alive;
        self.continue_client(ci, ex.unread_body(), close);
        true
    }

    /// Answers `status` for an exchange that got no response.
    pub(super) fn fail_exchange(&mut self, ci: usize, mut ex: Box<Exchange>, status: u16) {
        // `cache_use_stale`: a stale entry beats an error page.
        if let Some(entry) = ex.fill.as_mut().and_then(|f| f.stale_instead(status)) {
            let kind = ex
                .fill
                .as_ref()
                .map_or(cache::ReplyKind::Full, |f| f.reply_kind(&entry));
            self.serve_entry(ci, &entry, kind, !ex.keep_alive, ex.http10);
            let close = !ex.keep_alive;
            self.continue_client(ci, ex.unread_body(), close);
            return;
        }
        let vhost_name = self
            .rt
            .vhosts
            .get(ex.vhost)
            .map_or("-", |v| v.name.as_str())
            .to_string();
        let close = !ex.keep_alive;
        self.local_error(ci, status, ex.log.as_deref(), &vhost_name, close);
        self.continue_client(ci, ex.unread_body(), close);
    }

    pub(super) fn local_error(
        &mut self,
        ci: usize,
        status: u16,
        log: Option<&AccessRecord>,
        vhost: &str,
        close: bool,
    ) {
        let Some(c) = self.clients.get_mut(ci) else {
            return;
        };
        c.req = ReqState::Head;
        c.limits.reset_for_next_request();
        c.out.push(http1::error_response(status, close));
        c.close_after_flush |= close;
        self.metrics().count_status(status);
        self.access_log(log, vhost, status, 0);
        let idle = self.idle_timeout();
        self.arm_client_timer(ci, idle);
        self.dirty.push_back(client_token(ci));
    }

    pub(super) fn access_log(
        &mut self,
        request: Option<&AccessRecord>,
        vhost: &str,
        status: u16,
        bytes: u64,
    ) {
        let Some(request) = request else { return };
        let entry = crate::access_log::Entry {
            request,
            vhost,
            status,
            bytes,
            time: std::time::SystemTime::now(),
        };
        crate::access_log::write(&self.rt.config.access_log, &entry);
    }
}
