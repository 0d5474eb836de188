//! Tempesta's sticky cookie, sticky sessions and JavaScript challenge, as
//! pure parts the request path will call: the cookie value ([`cookie`]),
//! the per-request decision ([`enforce`]), the challenge page and its time
//! window ([`challenge`]) and the shared session table ([`sessions`]).
//!
//! Not wired into the workers yet: the configuration is parsed and
//! validated, and [`unenforced`] names what is configured but not acted on
//! so that startup says so.

pub mod challenge;
pub mod cookie;
pub mod enforce;
mod lru;
pub mod sessions;

use std::time::Duration;

use config::{Config, StickyCookie, Vhost};

/// The `Set-Cookie` value for a new cookie: `NAME=VALUE`, the configured
/// options, and `Max-Age` from `sess_lifetime` unless the options give
/// `Max-Age` or `Expires` (without a lifetime it is a session cookie).
pub fn set_cookie(cookie: &StickyCookie, value: &str, lifetime: Option<Duration>) -> String {
    let mut out = format!("{}={value}", cookie.name);
    for o in &cookie.options {
        out.push_str("; ");
        out.push_str(o);
    }
    let has_expiry = cookie.options.iter().any(|o| {
        let key = o.split_once('=').map_or(o.as_str(), |(k, _)| k);
        key.eq_ignore_ascii_case("Max-Age") || key.eq_ignore_ascii_case("Expires")
    });
    if let (false, Some(l)) = (has_expiry, lifetime) {
        out.push_str(&format!("; Max-Age={}", l.as_secs()));
    }
    out
}

/// The issue-20 directives present in `cfg` that the proxy parses but does
/// not act on yet, one line each, for a startup warning.
pub fn unenforced(cfg: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let vhosts = std::iter::once(&cfg.default_vhost).chain(&cfg.vhosts);
    for v in vhosts {
        out.extend(vhost_sticky(v));
    }
    for g in &cfg.server_groups {
        if g.sticky.is_some() {
            out.push(format!(
                "srv_group `{}`: `sticky_sessions`/`learn` are parsed but sessions are not pinned yet",
                g.name
            ));
        }
    }
    out
}

fn vhost_sticky(v: &Vhost) -> Option<String> {
    let s = &v.sticky;
    if !s.is_enabled() {
        return None;
    }
    let mut what = Vec::new();
    if let Some(c) = &s.cookie {
        what.push(if c.js_challenge.is_some() {
            "the sticky cookie and js_challenge"
        } else {
            "the sticky cookie"
        });
    }
    if s.sessions.is_some() {
        what.push("sticky_sessions");
    }
    Some(format!(
        "vhost `{}`: {} parsed and validated but not enforced yet (requests pass unchallenged)",
        v.name,
        what.join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::CookieMode;

    fn cookie(options: &[&str]) -> StickyCookie {
        StickyCookie {
            name: "__tfw".into(),
            mode: CookieMode::Issued {
                enforce: true,
                max_misses: Some(1),
            },
            options: options.iter().map(|s| s.to_string()).collect(),
            js_challenge: None,
        }
    }

    #[test]
    fn set_cookie_carries_options_and_lifetime() {
        let c = cookie(&["Path=/", "Secure"]);
        assert_eq!(
            set_cookie(&c, "00ab", Some(Duration::from_secs(900))),
            "__tfw=00ab; Path=/; Secure; Max-Age=900"
        );
        assert_eq!(set_cookie(&c, "00ab", None), "__tfw=00ab; Path=/; Secure");
        let c = cookie(&["Path=/", "max-age=5"]);
        assert_eq!(
            set_cookie(&c, "v", Some(Duration::from_secs(900))),
            "__tfw=v; Path=/; max-age=5"
        );
    }

    #[test]
    fn startup_names_what_is_not_enforced() {
        let text = "srv_group default { server 127.0.0.1:8000; sticky_sessions; }\n\
                    sticky { cookie enforce; js_challenge delay_min=1000 delay_range=2000; }\n\
                    grace_shutdown_time 5;\n";
        let loaded = config::parse_str("t.conf", text, std::path::Path::new("/"))
            .unwrap_or_else(|d| panic!("{d}"));
        let lines = unenforced(&loaded.config);
        // grace_shutdown_time is enforced (worker/grace.rs): no warning.
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("js_challenge") && lines[0].contains("not enforced"));
        assert!(lines[1].contains("srv_group `default`"));
        let plain = config::parse_str("t.conf", "listen 80;\n", std::path::Path::new("/"))
            .unwrap_or_else(|d| panic!("{d}"));
        assert!(unenforced(&plain.config).is_empty());
    }
}
