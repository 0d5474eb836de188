//! Sticky cookies, sticky sessions and the JavaScript challenge
//! (`sticky { ... }`, `sticky_sessions`, `learn`, `js_challenge`), and the
//! connection-lifetime settings that came with them in issue 20
//! (`grace_shutdown_time`, `client_ws_timeout` live on [`crate::Config`]).
//!
//! The proxy parses and validates all of this; enforcing it waits for the
//! request path (see docs/CONFIG.md).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model_serde::{millis, opt_secs};

/// Tempesta's default name of the sticky cookie.
pub const DEFAULT_STICKY_COOKIE: &str = "__tfw";

/// The effective `sticky` settings of a vhost: its own `sticky` block,
/// with what it does not set taken from the top-level one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sticky {
    /// `cookie ...;` or `learn name=C;`; `None`: no sticky cookie.
    pub cookie: Option<StickyCookie>,
    /// `secret "..."`: the HMAC key of issued cookies; `None` (or an empty
    /// string in the file): random bytes at start, so restarts invalidate
    /// every cookie.
    pub secret: Option<String>,
    /// `sess_lifetime N`: a session expires N seconds after its last
    /// request; `None` (0 in the file): never.
    #[serde(with = "opt_secs")]
    pub sess_lifetime: Option<Duration>,
    /// `sticky_sessions [allow_failover]` inside `sticky` (current
    /// Tempesta): pin every server group this vhost proxies to.
    pub sessions: Option<StickySessions>,
}

impl Sticky {
    /// True when anything here asks the proxy to act on requests.
    pub fn is_enabled(&self) -> bool {
        self.cookie.is_some() || self.sessions.is_some()
    }
}

/// The sticky cookie: issued by the proxy (`cookie`) or learned from the
/// backend's `Set-Cookie` (`learn`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StickyCookie {
    /// 1..=32 token characters (default `__tfw`).
    pub name: String,
    pub mode: CookieMode,
    /// `cookie_options`: attributes appended to `Set-Cookie` in order, e.g.
    /// `Path=/`, `Max-Age=5`, `Secure`. `Path=/` is added when no `Path` is
    /// given; without `Max-Age`/`Expires` the proxy derives `Max-Age` from
    /// `sess_lifetime`.
    #[serde(default)]
    pub options: Vec<String>,
    /// `js_challenge ...`: only with an issued cookie, which it enforces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub js_challenge: Option<JsChallenge>,
}

impl StickyCookie {
    /// True when a request without a valid cookie is answered by the
    /// proxy (302 or the challenge) instead of being forwarded.
    pub fn enforced(&self) -> bool {
        matches!(self.mode, CookieMode::Issued { enforce: true, .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CookieMode {
    /// `cookie [enforce] [max_misses=K]`: the proxy issues an HMAC'd cookie.
    Issued {
        enforce: bool,
        /// Requests without a valid cookie a client may make before it is
        /// blocked per `block_action`; `None` (0): never blocked. Default 1
        /// with `enforce`; only allowed with `enforce`.
        max_misses: Option<u32>,
    },
    /// `learn name=C`: the backend's cookie `C` identifies the session
    /// (implies sticky sessions).
    Learned,
}

/// `sticky_sessions [allow_failover]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StickySessions {
    /// Move a session whose server died to another one (with a log line)
    /// instead of answering 502.
    pub allow_failover: bool,
}

/// `sticky_sessions` / `learn` given in a `srv_group` (the reference's
/// placement): sessions are pinned to a server of this group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupSticky {
    pub allow_failover: bool,
    /// `learn name=C`: the backend cookie that names the session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learn: Option<String>,
}

/// `js_challenge delay_min=T delay_range=T [resp_code=C] [TEMPLATE]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsChallenge {
    /// A cookie presented sooner than this after it was issued is a miss.
    #[serde(with = "millis")]
    pub delay_min: Duration,
    /// ... and so is one presented later than `delay_min + delay_range`.
    #[serde(with = "millis")]
    pub delay_range: Duration,
    /// Status of the challenge response (default 503).
    pub resp_code: u16,
    /// Page template; `None`: the built-in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PathBuf>,
}

/// Statuses Tempesta can send a challenge with.
pub const JS_CHALLENGE_CODES: [u16; 14] = [
    200, 301, 302, 303, 307, 308, 400, 403, 404, 412, 500, 502, 503, 504,
];
