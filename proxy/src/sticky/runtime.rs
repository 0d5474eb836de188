//! The sticky settings of one configuration, ready for the request path: per vhost the
//! cookie codec (its HMAC key), the challenge template and a session table; per server
//! group its own pinning policy; and the per-client miss counts, shared by every worker.
//!
//! A reload builds a new one, as it does frang's tables: miss counts and sessions start
//! afresh, and cookies stay valid (the random key, when no `secret` is set, is made once
//! per process). In a fleet (`cluster { redis ...; }`) a vhost without `secret` uses the key
//! the fleet agreed once known, and the sessions pinned and challenges passed here are
//! published by the side thread (super::fleet, docs/FLEET.md).

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use config::{Config, CookieMode, GroupSticky, StickyCookie, StickySessions};

use super::challenge::{self, Template};
use super::cookie::{ClientIdentity, CookieCodec, StickyError, Verdict};
use super::enforce::{self, Decision};
use super::fleet::Outbox;
use super::sessions::{Policy, SessionTable};
use super::{cookies, set_cookie};
use crate::lru::Lru;

/// Sessions one vhost's table holds at most (the least recently used go first).
pub const SESSIONS_PER_VHOST: usize = 65_536;
/// Cookies remembered as having passed the challenge.
pub const PASSED_COOKIES: usize = 65_536;

/// What to do with one request, decided from its sticky cookie.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Forward it; `set_cookie` goes on the response; `session` names its sticky session.
    Forward {
        set_cookie: Option<String>,
        session: Option<Vec<u8>>,
    },
    /// `302` to the same URI with this `Set-Cookie` value.
    Redirect { set_cookie: String },
    /// The challenge page, with this status and this `Set-Cookie` value (Tempesta sends the
    /// cookie with the challenge; the page's script only has to wait and reload).
    Challenge {
        status: u16,
        page: String,
        set_cookie: String,
    },
    /// The JS challenge applies and this request cannot run it (not a GET, or no
    /// `Accept: text/html`): 403, and no miss counted (Tempesta's
    /// tfw_http_sticky_redirect_applied, then TFW_HTTP_B_JS_NOT_SUPPORTED's 403).
    NotChallengeable,
    /// `max_misses` exceeded: `misses` so far, the limit.
    Block { misses: u32, limit: u32 },
}

impl Action {
    const PASS: Action = Action::Forward {
        set_cookie: None,
        session: None,
    };
}

/// Why the sticky settings cannot be used.
#[derive(Debug)]
pub enum StickyRtError {
    Key(StickyError),
    Template {
        vhost: String,
        path: std::path::PathBuf,
        reason: String,
    },
}

impl std::fmt::Display for StickyRtError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StickyRtError::Key(e) => write!(f, "sticky cookie key: {e}"),
            StickyRtError::Template {
                vhost,
                path,
                reason,
            } => write!(
                f,
                "vhost `{vhost}`: js_challenge template {}: {reason}",
                path.display()
            ),
        }
    }
}

pub(super) struct VhostSticky {
    pub(super) name: String,
    cookie: Option<StickyCookie>,
    codec: CookieCodec,
    lifetime: Option<Duration>,
    template: Template,
    sessions: Option<StickySessions>,
    pub(super) table: SessionTable,
}

pub struct StickyRt {
    /// In the runtime's vhost order (0: the default vhost). Every vhost has its session
    /// table: a group's own `sticky_sessions`/`learn` pins without a vhost `sticky`.
    pub(super) vhosts: Vec<VhostSticky>,
    /// Per server group: `sticky_sessions`/`learn` given in the group.
    groups: Vec<Option<GroupSticky>>,
    /// Per server group: its name and its servers' addresses (how a fleet names a pin).
    pub(super) servers: Vec<(String, Vec<std::net::SocketAddr>)>,
    /// SHA-256 of cookies that passed the challenge: later requests with them are not
    /// timed again (their age is past the window by then).
    pub(super) passed: Mutex<Lru<[u8; 32], ()>>,
    /// In a fleet: the passes made here, for the side thread.
    pub(super) passes_out: Option<Outbox<[u8; 32]>>,
    /// In a fleet, some vhost issues cookies with the fleet's key (it has no `secret`).
    pub(super) wants_fleet_key: bool,
    /// Some vhost or group has a sticky cookie or pins sessions: something to share.
    pub(super) in_use: bool,
}

/// The key used when no `secret` is configured: random, made once per process so that a
/// reload keeps the cookies already handed out valid.
fn process_secret() -> Result<&'static str, StickyError> {
    static SECRET: OnceLock<String> = OnceLock::new();
    if let Some(s) = SECRET.get() {
        return Ok(s);
    }
    let mut bytes = [0u8; 32];
    openssl::rand::rand_bytes(&mut bytes)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(SECRET.get_or_init(|| hex))
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every mutation is one call on a consistent structure; a panic elsewhere leaves it usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StickyRt {
    pub fn build(config: &Config) -> Result<StickyRt, StickyRtError> {
        let fleet = config.cluster.as_ref().is_some_and(|c| c.redis.is_some());
        let mut wants_fleet_key = false;
        let mut vhosts = Vec::with_capacity(config.vhosts.len() + 1);
        for v in std::iter::once(&config.default_vhost).chain(&config.vhosts) {
            let s = &v.sticky;
            let secret = match s.secret.as_deref() {
                Some(secret) => secret,
                None => process_secret().map_err(StickyRtError::Key)?,
            };
            let mut codec =
                CookieCodec::new(Some(secret), s.sess_lifetime).map_err(StickyRtError::Key)?;
            if fleet && s.secret.is_none() {
                codec = codec.in_fleet();
                wants_fleet_key |= s.cookie.is_some();
            }
            let mut table = SessionTable::new(SESSIONS_PER_VHOST, s.sess_lifetime);
            if fleet {
                table = table.in_fleet();
            }
            let template = match s.cookie.as_ref().and_then(|c| c.js_challenge.as_ref()) {
                Some(js) => load_template(&v.name, js.template.as_deref())?,
                None => Template::builtin(),
            };
            vhosts.push(VhostSticky {
                name: v.name.clone(),
                cookie: s.cookie.clone(),
                codec,
                lifetime: s.sess_lifetime,
                template,
                sessions: s.sessions,
                table,
            });
        }
        Ok(StickyRt {
            groups: config
                .server_groups
                .iter()
                .map(|g| g.sticky.clone())
                .collect(),
            servers: config
                .server_groups
                .iter()
                .map(|g| (g.name.clone(), g.servers.iter().map(|s| s.addr).collect()))
                .collect(),
            passed: Mutex::new(Lru::new(PASSED_COOKIES)),
            passes_out: fleet.then(Outbox::new),
            wants_fleet_key,
            in_use: vhosts
                .iter()
                .any(|v| v.cookie.is_some() || v.sessions.is_some())
                || config.server_groups.iter().any(|g| g.sticky.is_some()),
            vhosts,
        })
    }

    fn vhost(&self, vhost: usize) -> Option<&VhostSticky> {
        self.vhosts.get(vhost)
    }

    /// Whether requests to `vhost` have a sticky cookie to check (the rest pass untouched).
    pub fn checks(&self, vhost: usize) -> bool {
        self.vhost(vhost).is_some_and(|v| v.cookie.is_some())
    }

    /// The name of the proxy's own cookie in `vhost`, which never reaches the backend.
    pub fn issued_cookie_name(&self, vhost: usize) -> Option<&str> {
        let c = self.vhost(vhost)?.cookie.as_ref()?;
        matches!(c.mode, CookieMode::Issued { .. }).then_some(c.name.as_str())
    }

    /// Decides for a request to `vhost` carrying the `Cookie` fields `cookie_fields`;
    /// `challengeable`: a browser would run a JS challenge answering it (a GET that accepts
    /// text/html); `count_miss` counts a miss where the connection keeps its misses and
    /// returns how many it had within the last second (enforce.rs).
    pub fn check<'a>(
        &self,
        vhost: usize,
        cookie_fields: impl Iterator<Item = &'a [u8]>,
        who: &ClientIdentity<'_>,
        now: SystemTime,
        challengeable: bool,
        count_miss: impl FnOnce() -> u32,
    ) -> Result<Action, StickyError> {
        let Some(v) = self.vhost(vhost) else {
            return Ok(Action::PASS);
        };
        let Some(c) = &v.cookie else {
            return Ok(Action::PASS);
        };
        let presented = cookies::find(cookie_fields, c.name.as_bytes());
        let CookieMode::Issued { max_misses, .. } = c.mode else {
            // A learned cookie is the backend's: it only names the session.
            return Ok(Action::Forward {
                set_cookie: None,
                session: presented.map(<[u8]>::to_vec),
            });
        };
        let verdict = presented.map_or(Ok(Verdict::Malformed), |p| v.codec.verify(p, who, now))?;
        if let (Verdict::Valid { .. }, Some(p)) = (verdict, presented) {
            if c.js_challenge.is_none() || lock(&self.passed).get(&digest(p)).is_some() {
                return Ok(Action::Forward {
                    set_cookie: None,
                    session: Some(p.to_vec()),
                });
            }
        }
        if !challengeable && would_challenge(c, verdict) {
            return Ok(Action::NotChallengeable);
        }
        let (decision, misses) = enforce::decide(c, verdict, count_miss);
        Ok(match decision {
            Decision::Forward => {
                // Only a cookie in the challenge's window gets here.
                let p = presented.unwrap_or_default();
                lock(&self.passed).insert(digest(p), ());
                if let Some(out) = &self.passes_out {
                    out.push(digest(p));
                }
                Action::Forward {
                    set_cookie: None,
                    session: Some(p.to_vec()),
                }
            }
            Decision::ForwardAndSet => {
                let value = v.codec.issue(who, now)?;
                Action::Forward {
                    set_cookie: Some(set_cookie(c, &value, v.lifetime)),
                    session: Some(value.into_bytes()),
                }
            }
            Decision::Redirect => Action::Redirect {
                set_cookie: set_cookie(c, &v.codec.issue(who, now)?, v.lifetime),
            },
            Decision::Challenge => {
                let js = c.js_challenge.as_ref();
                let value = v.codec.issue(who, now)?;
                let page = v.template.render(
                    &script_cookie(c, &value, v.lifetime),
                    js.map_or(Duration::ZERO, challenge::page_delay),
                );
                Action::Challenge {
                    status: js.map_or(503, |j| j.resp_code),
                    page,
                    set_cookie: set_cookie(c, &value, v.lifetime),
                }
            }
            Decision::Block => Action::Block {
                misses,
                limit: max_misses.unwrap_or(0),
            },
        })
    }

    /// The session table and policy for requests of `vhost` sent to `group`, and the
    /// cookie naming the session when the group learns it itself (`learn name=C` in the
    /// group); `None` when that pair pins nothing.
    pub fn sessions(&self, vhost: usize, group: usize) -> Option<Sessions<'_>> {
        let v = self.vhost(vhost)?;
        let g = self.groups.get(group).and_then(Option::as_ref);
        let learned = v
            .cookie
            .as_ref()
            .is_some_and(|c| c.mode == CookieMode::Learned);
        if g.is_none() && v.sessions.is_none() && !learned {
            return None;
        }
        Some(Sessions {
            table: &v.table,
            policy: Policy {
                allow_failover: g.is_some_and(|g| g.allow_failover)
                    || v.sessions.is_some_and(|s| s.allow_failover),
            },
            group_cookie: g.and_then(|g| g.learn.as_deref()),
        })
    }

    /// The backend cookie whose `Set-Cookie` pins a session in `vhost` and `group`.
    pub fn learn_name(&self, vhost: usize, group: usize) -> Option<&str> {
        let s = self.sessions(vhost, group)?;
        if let Some(name) = s.group_cookie {
            return Some(name);
        }
        let c = self.vhost(vhost)?.cookie.as_ref()?;
        (c.mode == CookieMode::Learned).then_some(c.name.as_str())
    }
}

/// How one vhost and group pin sessions.
pub struct Sessions<'a> {
    pub table: &'a SessionTable,
    pub policy: Policy,
    /// `learn name=C` in the group: the session is this cookie of the request.
    pub group_cookie: Option<&'a str>,
}

fn digest(value: &[u8]) -> [u8; 32] {
    openssl::sha::sha256(value)
}

/// The cookie as the challenge script assigns it: `document.cookie` cannot set `HttpOnly`
/// (a browser ignores the whole assignment), so that option is left out of it.
fn script_cookie(c: &StickyCookie, value: &str, lifetime: Option<Duration>) -> String {
    let mut script = c.clone();
    script
        .options
        .retain(|o| !o.trim().eq_ignore_ascii_case("httponly"));
    set_cookie(&script, value, lifetime)
}

fn load_template(vhost: &str, path: Option<&std::path::Path>) -> Result<Template, StickyRtError> {
    let Some(path) = path else {
        return Ok(Template::builtin());
    };
    let err = |reason: String| StickyRtError::Template {
        vhost: vhost.to_string(),
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| err(format!("{e}; give a readable UTF-8 file or no template")))?;
    Template::parse(&text).map_err(|e| err(e.to_string()))
}

/// Whether `cookie`'s JS challenge would answer a request whose cookie got `verdict`:
/// anything but a cookie in the challenge's window.
fn would_challenge(cookie: &StickyCookie, verdict: Verdict) -> bool {
    cookie.js_challenge.as_ref().is_some_and(|js| {
        !matches!(verdict, Verdict::Valid { age, .. }
            if challenge::timing(js, age) == challenge::Timing::InWindow)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn rt(sticky: &str) -> StickyRt {
        let text = format!("srv_group default {{ server 127.0.0.1:8000; }}\n{sticky}\n");
        let loaded = config::parse_str("t.conf", &text, std::path::Path::new("/"))
            .unwrap_or_else(|d| panic!("{d}"));
        StickyRt::build(&loaded.config).unwrap()
    }

    fn who() -> ClientIdentity<'static> {
        ClientIdentity {
            addr: "192.0.2.1".parse().unwrap(),
            user_agent: b"ua",
        }
    }

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + ms)
    }

    thread_local! {
        /// The misses of the one connection a test's requests arrive on.
        static MISSES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }

    fn check(rt: &StickyRt, cookie: &str, ms: u64) -> Action {
        let fields: [&[u8]; 1] = [cookie.as_bytes()];
        let count_miss = || {
            MISSES.with(|m| {
                m.set(m.get() + 1);
                m.get()
            })
        };
        rt.check(0, fields.into_iter(), &who(), at(ms), true, count_miss)
            .unwrap()
    }

    #[test]
    fn a_cookie_is_set_once_and_then_names_the_session() {
        let rt = rt("sticky { cookie; secret \"k\"; }");
        let Action::Forward {
            set_cookie: Some(set),
            session: Some(session),
        } = check(&rt, "a=1", 0)
        else {
            panic!("a cookie is set");
        };
        let pair = set.split(';').next().unwrap();
        assert_eq!(pair.as_bytes(), [b"__tfw=".as_slice(), &session].concat());
        assert_eq!(
            check(&rt, pair, 5),
            Action::Forward {
                set_cookie: None,
                session: Some(session)
            }
        );
        assert_eq!(rt.issued_cookie_name(0), Some("__tfw"));
    }

    #[test]
    fn attack_the_challenge_times_cookies_and_blocks_after_max_misses() {
        let rt = rt("sticky { cookie enforce max_misses=3; secret \"k\";\n\
                     cookie_options Path=/ HttpOnly;\n\
                     js_challenge delay_min=1000 delay_range=1000; }");
        let Action::Challenge { status, page, .. } = check(&rt, "", 0) else {
            panic!("a challenge");
        };
        assert_eq!(status, 503);
        // The script can only set a cookie without HttpOnly.
        assert!(!page.contains("HttpOnly"), "{page}");
        let value = page.split("__tfw=").nth(1).unwrap()[..80].to_string();
        let cookie = format!("__tfw={value}");
        // Replayed at once: too early, a second miss.
        assert!(matches!(check(&rt, &cookie, 10), Action::Challenge { .. }));
        // In the window; then passed for good, however old.
        assert!(matches!(check(&rt, &cookie, 1500), Action::Forward { .. }));
        assert!(matches!(
            check(&rt, &cookie, 60_000),
            Action::Forward { .. }
        ));
        // No cookie twice more: the fourth miss is over max_misses=3.
        assert!(matches!(check(&rt, "", 0), Action::Challenge { .. }));
        assert_eq!(
            check(&rt, "", 0),
            Action::Block {
                misses: 4,
                limit: 3
            }
        );
    }

    #[test]
    fn a_missing_template_is_a_clear_error() {
        let text = "srv_group default { server 127.0.0.1:8000; }\n\
                    sticky { cookie enforce; js_challenge delay_min=10 delay_range=10 /nonexistent/t.html; }\n";
        let loaded = config::parse_str("t.conf", text, std::path::Path::new("/"))
            .unwrap_or_else(|d| panic!("{d}"));
        let err = StickyRt::build(&loaded.config).err().expect("an error");
        let text = err.to_string();
        assert!(text.contains("/nonexistent/t.html"), "{text}");
    }
}
