//! Tempesta's sticky cookie, sticky sessions and JavaScript challenge: the
//! cookie value ([`cookie`]), the client's `Cookie` fields ([`cookies`]),
//! the per-request decision ([`enforce`]), the challenge page and its time
//! window ([`challenge`]), the shared session table ([`sessions`]), and all
//! of it built from one configuration ([`runtime`]); what a fleet shares of it ([`fleet`]). The worker calls them
//! from `worker/sticky_hook.rs`.

pub mod challenge;
pub mod cookie;
pub mod cookies;
pub mod enforce;
pub mod fleet;
pub mod metrics;
pub mod runtime;
pub mod sessions;

use std::time::Duration;

use config::StickyCookie;

pub use fleet::fleet_key;

/// Tempesta's Max-Age for an unlimited `sess_lifetime` (UINT_MAX seconds, fw/http_sess_conf.c).
pub const UNLIMITED_MAX_AGE: u64 = u32::MAX as u64;

/// The `Set-Cookie` value for a new cookie: `NAME=VALUE`, the configured
/// options, and `Max-Age` from `sess_lifetime` (without one, Tempesta's unlimited
/// lifetime, [`UNLIMITED_MAX_AGE`]) unless the options give `Max-Age` or `Expires`, as
/// Tempesta's tfw_http_sess_cfg_finish adds it: the cookie outlives the browser session.
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
    if !has_expiry {
        let max_age = lifetime.map_or(UNLIMITED_MAX_AGE, |l| l.as_secs());
        out.push_str(&format!("; Max-Age={max_age}"));
    }
    out
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
        assert_eq!(
            set_cookie(&c, "00ab", None),
            "__tfw=00ab; Path=/; Secure; Max-Age=4294967295"
        );
        let c = cookie(&["Path=/", "max-age=5"]);
        assert_eq!(
            set_cookie(&c, "v", Some(Duration::from_secs(900))),
            "__tfw=v; Path=/; max-age=5"
        );
    }
}
