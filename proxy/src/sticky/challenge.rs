//! The JavaScript challenge: a page whose script waits `delay_min` (plus a
//! little of `delay_range`), sets the sticky cookie and reloads. A client
//! that presents the cookie sooner than `delay_min` after it was issued did
//! not wait (a bot replaying it); one presenting it after `delay_min +
//! delay_range` took too long; both count as misses. A client that runs no
//! JavaScript never gets the cookie at all.
//!
//! A template is an HTML page with the placeholders `${COOKIE}` (optional:
//! the `document.cookie` assignment's string, already escaped for a
//! JavaScript string literal) and `${DELAY_MS}` (the wait in milliseconds).
//! The challenge response also carries the cookie in `Set-Cookie`, as Tempesta's
//! does (http_sess.c tfw_http_sticky_build_redirect), so a Tempesta template, which
//! only waits and reloads, works as written.

use std::fmt;
use std::time::Duration;

use config::JsChallenge;

/// The placeholder a template must contain.
pub const COOKIE_PLACEHOLDER: &str = "${COOKIE}";
pub const DELAY_PLACEHOLDER: &str = "${DELAY_MS}";

/// Used when `js_challenge` names no template.
pub const BUILTIN_TEMPLATE: &str = r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Checking your browser</title>
<meta name="robots" content="noindex"></head>
<body><noscript>Please enable JavaScript and cookies to continue.</noscript>
<p>Checking your browser, this takes a moment...</p>
<script>
setTimeout(function () {
  document.cookie = "${COOKIE}";
  location.reload();
}, ${DELAY_MS});
</script></body></html>
"#;

/// Where a presented cookie's age falls relative to the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    TooEarly,
    InWindow,
    TooLate,
}

/// Classifies a cookie presented `age` after it was issued.
pub fn timing(js: &JsChallenge, age: Duration) -> Timing {
    if age < js.delay_min {
        Timing::TooEarly
    } else if age > js.delay_min.saturating_add(js.delay_range) {
        Timing::TooLate
    } else {
        Timing::InWindow
    }
}

/// How long the page waits before setting the cookie: past `delay_min`
/// by a quarter of the window (at most one second), so that timer and
/// network jitter do not make an honest browser early or late.
pub fn page_delay(js: &JsChallenge) -> Duration {
    js.delay_min + (js.delay_range / 4).min(Duration::from_secs(1))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// Larger than the limit below.
    TooLarge(usize),
}

/// Most bytes of a template (it is sent with every challenge).
pub const MAX_TEMPLATE_LEN: usize = 64 * 1024;

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::TooLarge(n) => write!(
                f,
                "the js_challenge template is {n} bytes; keep it under {MAX_TEMPLATE_LEN}"
            ),
        }
    }
}

impl std::error::Error for TemplateError {}

/// A checked template, split at its placeholders once so that each
/// challenge only concatenates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Cookie,
    Delay,
}

impl Template {
    pub fn builtin() -> Template {
        // The built-in text has the cookie placeholder; a failure here is
        // caught by the unit tests, never by a user.
        Template::parse(BUILTIN_TEMPLATE).unwrap_or(Template { parts: Vec::new() })
    }

    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        if text.len() > MAX_TEMPLATE_LEN {
            return Err(TemplateError::TooLarge(text.len()));
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("${") {
            let (before, from) = rest.split_at(at);
            let (part, len) = if from.starts_with(COOKIE_PLACEHOLDER) {
                (Part::Cookie, COOKIE_PLACEHOLDER.len())
            } else if from.starts_with(DELAY_PLACEHOLDER) {
                (Part::Delay, DELAY_PLACEHOLDER.len())
            } else {
                parts.push(Part::Text(format!("{before}${{")));
                rest = &from[2..];
                continue;
            };
            if !before.is_empty() {
                parts.push(Part::Text(before.to_string()));
            }
            parts.push(part);
            rest = &from[len..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(Template { parts })
    }

    /// The page for one client: `cookie` is `NAME=VALUE; Path=/; ...` as
    /// the script should assign it.
    pub fn render(&self, cookie: &str, delay: Duration) -> String {
        let cookie = js_string(cookie);
        let delay = delay.as_millis().to_string();
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Cookie => out.push_str(&cookie),
                Part::Delay => out.push_str(&delay),
            }
        }
        out
    }
}

/// Escapes text for a double-quoted JavaScript string inside an HTML
/// `<script>`: quotes, backslashes, controls and `<`/`>`/`&` become `\xNN`
/// so that nothing in the cookie options can end the string or the script.
fn js_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '"' | '\\' | '<' | '>' | '&' | '\'' => out.push_str(&format!("\\x{:02x}", ch as u32)),
            c if c.is_control() || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js(min: u64, range: u64) -> JsChallenge {
        JsChallenge {
            delay_min: Duration::from_millis(min),
            delay_range: Duration::from_millis(range),
            resp_code: 503,
            template: None,
        }
    }

    #[test]
    fn the_window_is_delay_min_to_delay_min_plus_range() {
        let j = js(1000, 3000);
        assert_eq!(timing(&j, Duration::from_millis(0)), Timing::TooEarly);
        assert_eq!(timing(&j, Duration::from_millis(999)), Timing::TooEarly);
        assert_eq!(timing(&j, Duration::from_millis(1000)), Timing::InWindow);
        assert_eq!(timing(&j, Duration::from_millis(4000)), Timing::InWindow);
        assert_eq!(timing(&j, Duration::from_millis(4001)), Timing::TooLate);
    }

    #[test]
    fn the_page_waits_inside_the_window() {
        for (min, range) in [(1000, 3000), (100, 10), (2000, 60_000)] {
            let j = js(min, range);
            assert_eq!(
                timing(&j, page_delay(&j)),
                Timing::InWindow,
                "{min} {range}"
            );
        }
    }

    #[test]
    fn the_builtin_page_sets_the_cookie_after_the_delay() {
        let t = Template::builtin();
        let page = t.render("__tfw=00ff; Path=/", Duration::from_millis(1250));
        assert!(
            page.contains(r#"document.cookie = "__tfw=00ff; Path=/";"#),
            "{page}"
        );
        assert!(page.contains("}, 1250);"), "{page}");
        assert!(!page.contains("${"), "{page}");
    }

    #[test]
    fn a_template_without_the_cookie_placeholder_loads_and_only_too_large_is_refused() {
        // Tempesta's templates only wait and reload: the cookie comes in Set-Cookie.
        assert!(Template::parse("<script>setTimeout(f, ${DELAY_MS})</script>").is_ok());
        let big = format!("{}${{COOKIE}}", "x".repeat(MAX_TEMPLATE_LEN));
        assert!(matches!(
            Template::parse(&big),
            Err(TemplateError::TooLarge(_))
        ));
        // Unknown `${...}` stays as written.
        let t = Template::parse("${OTHER} ${COOKIE}").unwrap();
        assert_eq!(t.render("a=b", Duration::ZERO), "${OTHER} a=b");
    }

    #[test]
    fn attack_cookie_options_cannot_break_out_of_the_script() {
        let t = Template::builtin();
        let page = t.render(
            "a=b; Domain=\"x</script><script>alert(1)//\\",
            Duration::ZERO,
        );
        assert!(!page.contains("</script><script>alert"), "{page}");
        let script = page.split("document.cookie = \"").nth(1).unwrap_or("");
        let literal = script.split("\";").next().unwrap_or("");
        assert!(
            !literal.contains('"') && !literal.contains('<'),
            "{literal}"
        );
    }
}
