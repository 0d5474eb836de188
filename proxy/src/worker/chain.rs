//! `http_chain` applied to an exchange: a request is blocked, redirected, refused for want
//! of a vhost or for a malformed X-Forwarded-For, answered by the proxy itself (a cache tier
//! peer's probe, an ACME HTTP-01 challenge), or routed to a vhost and its location. A
//! function over the pipeline's parts (parts.rs): every outcome but
//! a vhost is an answer, and the vhost's is the caller's to serve (route.rs `route`).

use super::exchange::ExchangeId;
use super::finish::{self, Refusal};
use super::h1::{LocalPage, Reply};
use super::parts::Parts;
use super::request::{Request, Scheme};
use crate::fleet::tier::{HOP_FIELD, PROBE};
use crate::metrics::bump;
use crate::router::{CacheOverride, RequestView, Route};

/// What `http_chain` made of a request.
#[must_use = "a request routed to a vhost is served"]
pub(super) enum Routed {
    /// Answered or refused here (or gone).
    Ended,
    /// Routed to a vhost (recorded in the exchange), with the rule's cache override.
    Vhost(CacheOverride),
}

/// Applies `http_chain` to exchange `id`.
#[inline]
pub(super) fn route(p: &mut Parts<'_>, id: ExchangeId) -> Routed {
    let rt = p.rt;
    let Some(ex) = p.exchanges.get(id) else {
        return Routed::Ended;
    };
    if !forwarded_for_is_address(&ex.request) {
        refuse_forwarded_for(p, id);
        return Routed::Ended;
    }
    let keep_alive = ex.keep_alive;
    // A cache tier peer's probe (`fleet::tier::PROBE`): this node is alive and answers.
    if ex.tier_hop && ex.request.header(HOP_FIELD) == Some(PROBE) {
        let page = LocalPage {
            status: 204,
            fields: &[],
            body: &[],
        };
        finish::answer(p, id, Reply::Local(page), !keep_alive);
        return Routed::Ended;
    }
    // An unread body would be taken for the next request.
    let close = !keep_alive || ex.request.has_body();
    // HTTP-01 (crate::acme): the ACME server asks a plain listener, whatever the chain says.
    if ex.request.scheme() == Scheme::Http {
        if let Some(body) = crate::acme::challenge_answer(ex.request.path()) {
            let page = LocalPage {
                status: 200,
                fields: &[],
                body: &body,
            };
            finish::answer(p, id, Reply::Local(page), close);
            return Routed::Ended;
        }
    }
    match rt.router.route(&ex.request) {
        Route::NoMatch => refuse_unrouted(p, id),
        Route::Block => {
            note_chain_refusal(p, id, "http_chain", rt.config.block_action.attack.log);
            finish::refuse_exchange(p, id, 403, Refusal::Attack)
        }
        Route::Redirect { status, url } => {
            // `$host` keeps the port the client used.
            let host = String::from_utf8_lossy(ex.request.authority().unwrap_or(b""));
            let uri = String::from_utf8_lossy(ex.request.uri());
            let location = url.render(&host, &uri);
            let redirect = Reply::Redirect {
                status,
                location: &location,
            };
            finish::answer(p, id, redirect, close)
        }
        Route::Vhost { vhost, cache } => {
            let location = rt
                .vhosts
                .get(vhost)
                .and_then(|v| v.location(ex.request.path()).map(|l| (v, l)))
                .and_then(|(v, l)| v.locations.iter().position(|x| std::ptr::eq(x, l)));
            if let Some(ex) = p.exchanges.get_mut(id) {
                ex.vhost = Some(vhost);
                ex.location = location;
            }
            return Routed::Vhost(cache);
        }
    }
    Routed::Ended
}

/// Exchange `id`'s X-Forwarded-For does not start with an address: as Tempesta's
/// "incorrect X-Forwarded-For header" (fw/http.c, `tfw_http_req_client_link`, before the
/// request is routed), an error answered 400 with the connection kept, or dropped per
/// `block_action error drop`.
fn refuse_forwarded_for(p: &mut Parts<'_>, id: ExchangeId) {
    bump(&p.conns.metrics.parse_errors);
    let Some(ex) = p.exchanges.get(id) else {
        return;
    };
    if p.rt.config.block_action.error.log {
        let peer = p.clients.get(ex.client).map(|c| c.peer);
        crate::warn!("refused request from {peer:?}: X-Forwarded-For is not an address (400)");
    }
    if !p.rt.config.block_action.error.reply {
        return finish::refuse_exchange(p, id, 400, Refusal::Error);
    }
    // An unread body would be taken for the next request.
    let close = !ex.keep_alive || ex.request.has_body();
    finish::answer(p, id, Reply::Status(400), close)
}

/// No `http_chain` rule matched exchange `id` (or its chain is empty): as Tempesta's
/// "cannot find appropriate virtual host", an error answered 403 whatever `block_action`
/// says, the connection kept (fw/http.c, tfw_http_send_err_resp); logged unless
/// `block_action error nolog`.
fn refuse_unrouted(p: &mut Parts<'_>, id: ExchangeId) {
    let log = p.rt.config.block_action.error.log;
    note_chain_refusal(p, id, "no_vhost", log);
    let Some(ex) = p.exchanges.get(id) else {
        return;
    };
    // An unread body would be taken for the next request.
    let close = !ex.keep_alive || ex.request.has_body();
    finish::answer(p, id, Reply::Status(403), close)
}

/// Counts (`blocks_total{limit}`) and, if `log`, logs a refusal by `http_chain` with the
/// client's address, the Host it asked for and the URI.
fn note_chain_refusal(p: &Parts<'_>, id: ExchangeId, limit: &'static str, log: bool) {
    p.conns.metrics.count_block(limit);
    let Some(ex) = p.exchanges.get(id) else {
        return;
    };
    if log {
        // The connection's address, not the access log's record: that one exists only
        // while the access log is on.
        let peer = p.clients.get(ex.client).map(|c| c.peer.ip());
        let what = match limit {
            "no_vhost" => "no http_chain rule for",
            _ => "http_chain blocked",
        };
        crate::warn!(
            "{what} {} host {:?} {:?}",
            peer.map_or_else(String::new, |ip| ip.to_string()),
            String::from_utf8_lossy(ex.request.host()),
            String::from_utf8_lossy(ex.request.uri())
        );
    }
}

/// Whether `request` has no X-Forwarded-For or one whose first node is an IP address
/// (http1's `forwarded_for_address`: why `1.1.1.1.1.1` is refused).
fn forwarded_for_is_address(request: &Request) -> bool {
    request
        .head()
        .forwarded_for(request.bytes())
        .is_none_or(|value| http1::forwarded_for_address(value).is_some())
}
