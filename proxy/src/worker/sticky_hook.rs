//! Where the sticky cookie, the JavaScript challenge and sticky sessions meet the request
//! path (the logic is in `crate::sticky`): a routed request is checked (`gate`, from
//! `route.rs` `sticky_gate`); a forwarded one loses the proxy's cookie
//! (`request_edits`, from `forward.rs`) and goes to its session's server (`Scheduling::pick`, from `dispatch`); its
//! response carries a new cookie and may name a session (`response_edits`, `learn`, from
//! `response/head.rs`). Local answers go through the codec sink like every other reply.

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use http1::HeaderEdits;

use super::client::Clients;
use super::exchange::{Exchange, ExchangeId, Exchanges};
use super::h1::{LocalPage, Reply};
use super::request::Request;
use super::upstream::groups::{self, GroupState, Pick};
use super::upstream::Upstreams;
use crate::frang::{Violation, FRANG_BLOCK_STATUS};
use crate::metrics::{bump, Metrics};
use crate::runtime::Runtime;
use crate::sticky::cookie::ClientIdentity;
use crate::sticky::cookies;
use crate::sticky::metrics::StickyMetrics;
use crate::sticky::runtime::Action;
use crate::sticky::sessions::{Pinned, SessionKey};

/// What the sticky cookie decided for a forwarded request.
pub struct StickyState {
    /// `Set-Cookie` value for the response (a client without a valid cookie).
    pub set_cookie: Option<String>,
    /// The session the vhost's cookie names.
    pub session: Option<Vec<u8>>,
    /// This request pinned its session: if that server fails before answering, the session
    /// is scheduled again whatever `allow_failover` says (it never reached its server).
    pub fresh_pin: bool,
}

/// The values of the request's `Cookie` fields.
fn cookie_fields(request: &Request) -> impl Iterator<Item = &[u8]> {
    request
        .fields()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
        .map(|(_, v)| v)
}

/// `scheme://host/path?query` of `request`, or its path and query when it names no host.
fn absolute_location(request: &Request) -> Vec<u8> {
    let path = request.path();
    match request.authority().filter(|a| !a.is_empty()) {
        Some(host) => {
            let scheme: &[u8] = match request.scheme() {
                super::request::Scheme::Https => b"https://",
                super::request::Scheme::Http => b"http://",
            };
            [scheme, host, path].concat()
        }
        None => path.to_vec(),
    }
}

/// Whether a browser would run a JS challenge sent in answer to `request`: a GET whose
/// Accept names text/html (Tempesta's tfw_http_sticky_redirect_applied).
fn challengeable(request: &Request) -> bool {
    request.method() == http1::Method::Get
        && request
            .fields()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"accept"))
            .any(|(_, v)| accepts_html(v))
}

/// Whether an Accept value lists `text/html` itself (`*/*` does not count, as in Tempesta's
/// parser, which sets TFW_HTTP_B_ACCEPT_HTML only for that media range).
fn accepts_html(accept: &[u8]) -> bool {
    accept.split(|&b| b == b',').any(|range| {
        let media = range.split(|&b| b == b';').next().unwrap_or(b"");
        media.trim_ascii().eq_ignore_ascii_case(b"text/html")
    })
}

/// What the sticky cookie decided for a routed exchange ([`gate`]).
pub(super) enum Gate {
    /// Serve it (from the cache or the origin).
    Serve,
    /// The exchange or its client is gone: nothing to do.
    Gone,
    /// Answer with the proxy's page for this status; close after it when set.
    Status(u16, bool),
    /// Answer with this page (the 302 to the same URI, the JavaScript challenge).
    Page(Page),
    /// `sticky_max_misses` exceeded: frang's block path (block_action, the log, ip_block).
    Block(Violation),
}

/// A page the sticky cookie answers with: its status, fields and body, and whether the
/// connection closes after it.
pub(super) struct Page {
    status: u16,
    fields: [(&'static [u8], Vec<u8>); 3],
    body: String,
    close: bool,
}

impl Page {
    /// Runs `send` with the page as a reply (the fields are borrowed for it).
    pub fn send<R>(&self, send: impl FnOnce(Reply<'_>, bool) -> R) -> R {
        let [(n0, v0), (n1, v1), (n2, v2)] = &self.fields;
        let fields: [(&[u8], &[u8]); 3] = [(n0, v0), (n1, v1), (n2, v2)];
        let page = LocalPage {
            status: self.status,
            fields: &fields,
            body: self.body.as_bytes(),
        };
        send(Reply::Local(page), self.close)
    }
}

/// Checks routed exchange `id`'s sticky cookie: what to do with it.
pub(super) fn gate(
    exchanges: &mut Exchanges,
    clients: &mut Clients,
    (rt, metrics): (&Runtime, &StickyMetrics),
    id: ExchangeId,
) -> Gate {
    let Some(ex) = exchanges.get_mut(id) else {
        return Gate::Gone;
    };
    let Some(vhost) = ex.vhost.filter(|&v| rt.sticky.checks(v)) else {
        return Gate::Serve;
    };
    let Some(c) = clients.get_mut(ex.client) else {
        return Gate::Gone;
    };
    let who = ClientIdentity {
        addr: c.peer.ip(),
        user_agent: ex.request.header("user-agent").unwrap_or(b""),
    };
    let limits = &mut c.limits;
    let action = match rt.sticky.check(
        vhost,
        cookie_fields(&ex.request),
        &who,
        SystemTime::now(),
        challengeable(&ex.request),
        || limits.on_sticky_miss(Instant::now()),
    ) {
        Ok(action) => action,
        Err(e) => {
            crate::warn!("sticky cookie: {e}");
            return Gate::Status(500, true);
        }
    };
    act(ex, metrics, action)
}

/// What the sticky cookie's decision `action` means for exchange `ex`.
fn act(ex: &mut Exchange, m: &StickyMetrics, action: Action) -> Gate {
    let close = !ex.keep_alive || ex.request.has_body();
    match action {
        Action::Forward {
            set_cookie,
            session,
        } => {
            if set_cookie.is_some() {
                bump(&m.cookies_issued);
            }
            if set_cookie.is_some() || session.is_some() {
                ex.sticky = Some(Box::new(StickyState {
                    set_cookie,
                    session,
                    fresh_pin: false,
                }));
            }
            Gate::Serve
        }
        Action::Redirect { set_cookie } => {
            for c in [&m.misses, &m.redirects, &m.cookies_issued] {
                bump(c);
            }
            // The same URI, absolute as Tempesta's tfw_http_prep_redir writes it (the
            // connection's scheme, the Host as sent); relative without a Host.
            Gate::Page(Page {
                status: 302,
                fields: [
                    (b"location", absolute_location(&ex.request)),
                    (b"set-cookie", set_cookie.into_bytes()),
                    (b"cache-control", b"no-store".to_vec()),
                ],
                body: String::new(),
                close,
            })
        }
        Action::Challenge {
            status,
            page,
            set_cookie,
        } => {
            for c in [&m.misses, &m.challenges, &m.cookies_issued] {
                bump(c);
            }
            Gate::Page(Page {
                status,
                fields: [
                    (b"content-type", b"text/html; charset=utf-8".to_vec()),
                    (b"set-cookie", set_cookie.into_bytes()),
                    (b"cache-control", b"no-store".to_vec()),
                ],
                body: page,
                close,
            })
        }
        Action::NotChallengeable => Gate::Status(403, close),
        Action::Block { misses, limit } => {
            bump(&m.misses);
            bump(&m.blocks);
            Gate::Block(Violation {
                limit: "sticky_max_misses",
                detail: format!(
                    "{misses} requests without a valid sticky cookie > max_misses {limit}"
                ),
                status: FRANG_BLOCK_STATUS,
            })
        }
    }
}

/// The upstream request's edits with the proxy's own cookie taken out of `Cookie` (the
/// other cookies byte for byte); `validators` untouched when there is none.
pub(super) fn request_edits(
    ex: Option<&Exchange>,
    rt: &Runtime,
    validators: Option<HeaderEdits>,
) -> Option<HeaderEdits> {
    let Some(ex) = ex else {
        return validators;
    };
    let Some(name) = ex.vhost.and_then(|v| rt.sticky.issued_cookie_name(v)) else {
        return validators;
    };
    let fields: Vec<&[u8]> = cookie_fields(&ex.request).collect();
    let Some(rest) = cookies::without(&fields, name.as_bytes()) else {
        return validators;
    };
    let mut edits = validators.unwrap_or_default();
    let kept = !rest.is_empty() && edits.set(b"Cookie", &rest).is_ok();
    if !kept {
        // No other cookie (or none that can be written back): no Cookie field at all.
        let _ = edits.remove(b"Cookie");
    }
    Some(edits)
}

/// The parts choosing a connection for a sticky exchange touches: the configuration, this
/// worker's servers (`groups`), its pooled connections, the exchanges (a fresh pin is marked
/// on its exchange) and the sticky counters.
pub(super) struct Scheduling<'a> {
    pub rt: &'a Runtime,
    pub groups: &'a mut [GroupState],
    pub upstreams: &'a Upstreams,
    pub exchanges: &'a mut Exchanges,
    pub metrics: &'a StickyMetrics,
}

impl Scheduling<'_> {
    /// Chooses a connection for exchange `id` in `group`: its sticky session's server when
    /// it has one, else the scheduler's choice (which then pins a new session).
    pub fn pick(
        &mut self,
        id: ExchangeId,
        group: usize,
        hash_key: u64,
        avoid: Option<usize>,
        new_connection: bool,
    ) -> Pick {
        let rt = self.rt;
        let Some(key) = session_key(self.exchanges, rt, id, group) else {
            return self.schedule(group, hash_key, avoid, new_connection);
        };
        let Some(ex) = self.exchanges.get(id) else {
            return self.schedule(group, hash_key, avoid, new_connection);
        };
        let fresh = ex.sticky.as_ref().is_some_and(|s| s.fresh_pin);
        let Some(mut sessions) = ex.vhost.and_then(|v| rt.sticky.sessions(v, group)) else {
            return self.schedule(group, hash_key, avoid, new_connection);
        };
        sessions.policy.allow_failover |= fresh;
        let servers = rt.groups.get(group).map_or(0, |g| g.servers.len());
        let alive: Vec<bool> = (0..servers)
            .map(|s| Some(s) != avoid && self.server_up(group, s))
            .collect();
        let mut scheduled = None;
        let routed = sessions.table.route(
            key,
            Instant::now(),
            sessions.policy,
            |s| alive.get(s).copied().unwrap_or(false),
            || {
                let pick = self.schedule(group, hash_key, avoid, new_connection);
                let server = match &pick {
                    Pick::Pooled(ui) => self.upstreams.get(*ui).map(|u| u.server),
                    Pick::Connect(s) => Some(*s),
                    Pick::Full | Pick::Down => None,
                };
                scheduled = Some(pick);
                server
            },
        );
        if matches!(routed, Pinned::New(_) | Pinned::Moved { .. }) {
            mark_fresh_pin(self.exchanges, id);
        }
        let m = self.metrics;
        match routed {
            Pinned::Same(s) => self.pick_server(group, s, new_connection),
            Pinned::New(_) => {
                bump(&m.sessions_pinned);
                scheduled.unwrap_or(Pick::Down)
            }
            // The first request of a session whose new server failed: scheduled again.
            Pinned::Moved { .. } if fresh => scheduled.unwrap_or(Pick::Down),
            Pinned::Moved { from, to } => {
                bump(&m.sessions_failed_over);
                let g = rt.groups.get(group);
                let addr = |s: usize| g.and_then(|g| g.servers.get(s)).map(|s| s.addr);
                crate::warn!(
                    "sticky session moved from {:?} to {:?} in group `{}`: its server is down",
                    addr(from),
                    addr(to),
                    g.map_or("", |g| g.name.as_str())
                );
                scheduled.unwrap_or(Pick::Down)
            }
            Pinned::ServerDown(_) => {
                bump(&m.sessions_server_down);
                Pick::Down
            }
            // Nothing free now: wait in the queue, unpinned; the session is pinned then.
            Pinned::NoServer => scheduled.unwrap_or(Pick::Down),
        }
    }

    /// Chooses a server and connection of `group` for a request with `key` (hash
    /// scheduler). `fresh`: the request needs a new connection of its own (a WebSocket
    /// handshake), which does not wait for a place among the server's `conns_n`.
    fn schedule(&mut self, group: usize, key: u64, avoid: Option<usize>, fresh: bool) -> Pick {
        match (self.rt.groups.get(group), self.groups.get_mut(group)) {
            (Some(g), Some(state)) => groups::pick(g, state, (key, avoid, fresh), Instant::now()),
            _ => Pick::Down,
        }
    }

    /// Whether `server` of `group` takes requests now, as this worker knows it.
    fn server_up(&self, group: usize, server: usize) -> bool {
        self.groups
            .get(group)
            .and_then(|g| g.servers.get(server))
            .is_some_and(|st| st.is_up(Instant::now()))
    }

    /// A connection to one given server (a sticky session's): `groups::pick_server`.
    fn pick_server(&mut self, group: usize, server: usize, fresh: bool) -> Pick {
        let g = self.rt.groups.get(group);
        let conns_n = g
            .and_then(|g| g.servers.get(server))
            .map_or(0, |s| s.conns_n);
        match groups::server_mut(self.groups, group, server) {
            Some(st) => groups::pick_server(st, server, conns_n, fresh),
            None => Pick::Down,
        }
    }
}

/// Exchange `id` just pinned its session to a server (new, or moved off a down one): if
/// that server fails too, the request may fail over again (`Scheduling::pick`'s `fresh`).
fn mark_fresh_pin(exchanges: &mut Exchanges, id: ExchangeId) {
    if let Some(ex) = exchanges.get_mut(id) {
        ex.sticky
            .get_or_insert_with(|| {
                Box::new(StickyState {
                    set_cookie: None,
                    session: None,
                    fresh_pin: false,
                })
            })
            .fresh_pin = true;
    }
}

/// The session exchange `id` belongs to in `group`, if that group pins sessions.
fn session_key(
    exchanges: &Exchanges,
    rt: &Runtime,
    id: ExchangeId,
    group: usize,
) -> Option<SessionKey> {
    let ex = exchanges.get(id)?;
    let sessions = rt.sticky.sessions(ex.vhost?, group)?;
    let group_id = u32::try_from(group).ok()?;
    match sessions.group_cookie {
        Some(name) => cookies::find(cookie_fields(&ex.request), name.as_bytes())
            .filter(|v| !v.is_empty())
            .map(|v| SessionKey::new(v, group_id)),
        None => ex
            .sticky
            .as_ref()
            .and_then(|s| s.session.as_deref())
            .map(|v| SessionKey::new(v, group_id)),
    }
}

/// The response edits, plus the new sticky cookie when this client gets one. The cache
/// does not store a response with `Set-Cookie`, so the cookie never reaches another client.
pub(super) fn response_edits<'a>(
    set_cookie: Option<&str>,
    edits: &'a HeaderEdits,
) -> Cow<'a, HeaderEdits> {
    let Some(value) = set_cookie else {
        return Cow::Borrowed(edits);
    };
    let mut with_cookie = edits.clone();
    match with_cookie.add(b"Set-Cookie", value.as_bytes()) {
        Ok(_) => Cow::Owned(with_cookie),
        Err(_) => Cow::Borrowed(edits),
    }
}

/// `learn name=C`: a response setting cookie C pins that session to the server that sent it.
pub(super) fn learn(
    rt: &Runtime,
    metrics: &Metrics,
    vhost: Option<usize>,
    (group, server): (usize, usize),
    head: &http1::ResponseHead,
    input: &[u8],
) {
    let Some(vhost) = vhost else {
        return;
    };
    let (Some(name), Some(sessions), Ok(group_id)) = (
        rt.sticky.learn_name(vhost, group),
        rt.sticky.sessions(vhost, group),
        u32::try_from(group),
    ) else {
        return;
    };
    for (n, v) in head.headers().fields(input) {
        if !n.eq_ignore_ascii_case(b"set-cookie") {
            continue;
        }
        if let Some(value) = cookies::set_cookie_value(v, name.as_bytes()).filter(|v| !v.is_empty())
        {
            let key = SessionKey::new(value, group_id);
            sessions.table.pin(key, server, Instant::now());
            bump(&metrics.sticky.sessions_pinned);
        }
    }
}
