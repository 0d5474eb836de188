//! `sticky { cookie ...; cookie_options ...; learn ...; secret ...;
//! sess_lifetime ...; sticky_sessions ...; js_challenge ...; }` at top
//! level and in a vhost, with Tempesta's rules: each directive once,
//! `cookie` and `learn` exclusive, `cookie_options` and `js_challenge` only
//! next to the cookie they modify (in the same block), `max_misses` only
//! with `enforce`, the challenge never with a learned cookie.

use std::time::Duration;

use crate::diag::Pos;
use crate::directives::STICKY_LEVEL;
use crate::model::{
    CookieMode, JsChallenge, Sticky, StickyCookie, StickySessions, DEFAULT_STICKY_COOKIE,
    JS_CHALLENGE_CODES,
};
use crate::tree::{Directive, Node};
use crate::validate::once::Seen;
use crate::validate::values::{Checker, INT_MAX};

/// One `sticky` block as written; `None` fields are inherited.
#[derive(Debug, Clone, Default)]
pub struct StickyDraft {
    pub cookie: Option<StickyCookie>,
    pub secret: Option<Option<String>>,
    pub sess_lifetime: Option<Option<Duration>>,
    pub sessions: Option<StickySessions>,
}

impl StickyDraft {
    /// The effective settings: this block's, else `parent`'s. The cookie
    /// comes with its options and challenge as a unit, as in Tempesta.
    pub fn resolve(&self, parent: &Sticky) -> Sticky {
        Sticky {
            cookie: self.cookie.clone().or_else(|| parent.cookie.clone()),
            secret: self.secret.clone().unwrap_or_else(|| parent.secret.clone()),
            sess_lifetime: self.sess_lifetime.unwrap_or(parent.sess_lifetime),
            sessions: self.sessions.or(parent.sessions),
        }
    }
}

/// What the block's directives gave, before the cross-checks.
#[derive(Default)]
struct Parts {
    cookie: Option<(StickyCookie, Pos)>,
    options: Option<(Vec<String>, Pos)>,
    js: Option<(JsChallenge, Pos)>,
}

/// Parses a `sticky` block; `None` after reporting a malformed one.
pub fn block(c: &mut Checker<'_>, d: &Directive) -> Option<StickyDraft> {
    let usage =
        "sticky { cookie [name=N] [enforce] [max_misses=K]; secret \"...\"; sess_lifetime N; }";
    c.attrs_only(d, &[]);
    let (Some(children), []) = (&d.children, d.args.as_slice()) else {
        c.error(&d.pos, "`sticky` takes a block and no arguments", usage);
        return None;
    };
    let mut draft = StickyDraft::default();
    let mut parts = Parts::default();
    let mut seen = Seen::default();
    for node in children {
        let x = match node {
            Node::Directive(x) => x,
            Node::Rule(r) => {
                c.error(
                    &r.pos,
                    "http_chain rules are not allowed in `sticky`",
                    usage,
                );
                continue;
            }
        };
        if !seen.check(c, x, STICKY_LEVEL) {
            continue;
        }
        match x.name.as_str() {
            "cookie" | "learn" => {
                if let Some((_, first)) = &parts.cookie {
                    c.error(
                        &x.pos,
                        "`cookie` and `learn` cannot be used together",
                        format!(
                            "the sticky cookie is already defined on line {}; keep one",
                            first.line
                        ),
                    );
                } else if let Some(ck) = cookie(c, x) {
                    parts.cookie = Some((ck, x.pos.clone()));
                }
            }
            "cookie_options" => {
                if let Some(o) = cookie_options(c, x) {
                    parts.options = Some((o, x.pos.clone()));
                }
            }
            "secret" => {
                if let Some(v) = c.single(x, "secret \"STRING\"") {
                    secret(c, v, &mut draft);
                }
            }
            "sess_lifetime" => {
                if let Some(v) = c.single(x, "sess_lifetime SECONDS") {
                    if let Some(t) = c.secs(v, "session lifetime") {
                        draft.sess_lifetime = Some((!t.is_zero()).then_some(t));
                    }
                }
            }
            "sticky_sessions" => {
                if let Some(s) = sessions(c, x) {
                    draft.sessions = Some(s);
                }
            }
            "js_challenge" => {
                if let Some(js) = js_challenge(c, x) {
                    parts.js = Some((js, x.pos.clone()));
                }
            }
            _ => crate::validate::unknown_here(c, x, "`sticky`", STICKY_LEVEL),
        }
    }
    combine(c, parts, &mut draft);
    Some(draft)
}

fn secret(c: &mut Checker<'_>, v: &crate::tree::Value, draft: &mut StickyDraft) {
    // Tempesta keeps an overriding secret in a 1024-byte buffer.
    if v.text.len() >= 1024 {
        c.error(
            &v.pos,
            format!("the sticky secret is {} bytes long", v.text.len()),
            "use at most 1023 bytes (20 random bytes are plenty for HMAC-SHA1)",
        );
        return;
    }
    draft.secret = Some((!v.text.is_empty()).then(|| v.text.clone()));
}

/// Attaches the options and the challenge to the cookie of the same block.
fn combine(c: &mut Checker<'_>, parts: Parts, draft: &mut StickyDraft) {
    let Parts {
        cookie,
        options,
        js,
    } = parts;
    let Some((mut ck, _)) = cookie else {
        if let Some((_, pos)) = options {
            c.error(
                &pos,
                "`cookie_options` without a sticky cookie",
                "add `cookie;` (or `learn name=...;`) to this same `sticky` block",
            );
        }
        if let Some((_, pos)) = js {
            c.error(
                &pos,
                "`js_challenge` without a sticky cookie",
                "add `cookie enforce;` to this same `sticky` block; the challenge sets that cookie",
            );
        }
        return;
    };
    let mut opts = options.map(|(o, _)| o).unwrap_or_default();
    if !opts
        .iter()
        .any(|o| option_key(o).eq_ignore_ascii_case("Path"))
    {
        opts.insert(0, "Path=/".to_string());
    }
    ck.options = opts;
    if let Some((js, pos)) = js {
        match &mut ck.mode {
            CookieMode::Learned => c.error(
                &pos,
                "`js_challenge` cannot be used with a learned cookie",
                "the challenge sets the proxy's own cookie: use `cookie enforce;` instead of `learn`",
            ),
            CookieMode::Issued { enforce, max_misses } => {
                if !*enforce {
                    c.sink.warning(
                        &pos,
                        "`js_challenge` enforces the sticky cookie: `cookie` acts as `cookie enforce`",
                    );
                    *enforce = true;
                    max_misses.get_or_insert(1);
                }
                ck.js_challenge = Some(js);
            }
        }
    }
    draft.cookie = Some(ck);
}

/// `cookie [name=N] [enforce] [max_misses=K]` or `learn name=N`.
fn cookie(c: &mut Checker<'_>, d: &Directive) -> Option<StickyCookie> {
    let learn = d.name == "learn";
    let allowed: &[&str] = if learn {
        &["name"]
    } else {
        &["name", "max_misses"]
    };
    if !(c.no_block(d) & c.attrs_only(d, allowed) & no_repeated_attrs(c, d)) {
        return None;
    }
    let name_attr = c.attr(d, "name");
    let name = match (name_attr, learn) {
        (Some(a), _) => cookie_name(c, &a.value)?,
        (None, false) => DEFAULT_STICKY_COOKIE.to_string(),
        (None, true) => {
            c.error(
                &d.pos,
                "`learn` needs the backend's cookie name",
                "write `learn name=COOKIE;`",
            );
            return None;
        }
    };
    if learn {
        if let Some(v) = d.args.first() {
            c.error(
                &v.pos,
                "`learn` takes no arguments",
                "write `learn name=COOKIE;`",
            );
            return None;
        }
        return Some(StickyCookie {
            name,
            mode: CookieMode::Learned,
            options: Vec::new(),
            js_challenge: None,
        });
    }
    let mut enforce = false;
    for v in &d.args {
        if v.text.eq_ignore_ascii_case("enforce") {
            enforce = true;
        } else {
            c.error(
                &v.pos,
                format!("unknown `cookie` argument `{}`", v.text),
                "usage: `cookie [name=NAME] [enforce] [max_misses=K];`",
            );
            return None;
        }
    }
    let max_misses = match c.attr(d, "max_misses") {
        Some(a) => {
            let n = c.u32(&a.value, "max_misses")?;
            if n > 0 && !enforce {
                c.error(
                    &a.pos,
                    "`max_misses` needs `enforce`",
                    "misses are counted only when the cookie is enforced: `cookie enforce max_misses=K;`",
                );
                return None;
            }
            (n != 0).then_some(n)
        }
        None => enforce.then_some(1),
    };
    Some(StickyCookie {
        name,
        mode: CookieMode::Issued {
            enforce,
            max_misses,
        },
        options: Vec::new(),
        js_challenge: None,
    })
}

/// A cookie name: 1..=32 bytes (Tempesta's limit) of RFC 6265 token
/// characters.
fn cookie_name(c: &mut Checker<'_>, v: &crate::tree::Value) -> Option<String> {
    let t = &v.text;
    let token = t
        .bytes()
        .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b));
    if t.is_empty() || t.len() > 32 || !token {
        c.error(
            &v.pos,
            format!("`{t}` is not a valid cookie name"),
            "use 1 to 32 letters, digits or `-_.!#$%&'*+^`|~`",
        );
        return None;
    }
    Some(t.clone())
}

/// Refuses `key=` given twice (Tempesta checks each attribute once).
fn no_repeated_attrs(c: &mut Checker<'_>, d: &Directive) -> bool {
    let mut ok = true;
    for (i, a) in d.attrs.iter().enumerate() {
        if d.attrs[..i]
            .iter()
            .any(|b| b.key.eq_ignore_ascii_case(&a.key))
        {
            c.error(&a.pos, format!("`{}=` is given twice", a.key), "keep one");
            ok = false;
        }
    }
    ok
}

fn option_key(o: &str) -> &str {
    o.split_once('=').map_or(o, |(k, _)| k)
}

/// `cookie_options KEY=VALUE... FLAG...`: `Path`, `Max-Age` and `Expires`
/// at most once; at most 256 bytes in `Set-Cookie`, as in Tempesta.
fn cookie_options(c: &mut Checker<'_>, d: &Directive) -> Option<Vec<String>> {
    if !c.no_block(d) {
        return None;
    }
    if d.args.is_empty() && d.attrs.is_empty() {
        c.error(
            &d.pos,
            "`cookie_options` needs options",
            "e.g. `cookie_options Max-Age=600 Secure HttpOnly;`",
        );
        return None;
    }
    let mut out = Vec::new();
    for (i, a) in d.attrs.iter().enumerate() {
        let single = ["Path", "Max-Age", "Expires"]
            .iter()
            .any(|k| k.eq_ignore_ascii_case(&a.key));
        if single
            && d.attrs[..i]
                .iter()
                .any(|b| b.key.eq_ignore_ascii_case(&a.key))
        {
            c.error(
                &a.pos,
                format!("`{}` is given twice", a.key),
                "a cookie has one Path, Max-Age and Expires",
            );
            return None;
        }
        out.push(format!("{}={}", a.key, a.value.text));
    }
    out.extend(d.args.iter().map(|v| v.text.clone()));
    if let Some(bad) = out
        .iter()
        .find(|o| o.bytes().any(|b| b == b';' || b.is_ascii_control()))
    {
        c.error(
            &d.pos,
            format!("cookie option `{bad}` contains `;` or a control character"),
            "give each option as its own word",
        );
        return None;
    }
    let len: usize = out.iter().map(|o| o.len() + 2).sum::<usize>() + "; Path=/".len();
    if len > 256 {
        c.error(
            &d.pos,
            format!("cookie options are {len} bytes long"),
            "Tempesta allows 256 bytes of options; shorten them",
        );
        return None;
    }
    Some(out)
}

/// `sticky_sessions [allow_failover]` (in `sticky` or in a `srv_group`).
pub fn sessions(c: &mut Checker<'_>, d: &Directive) -> Option<StickySessions> {
    if !c.shape(d, 0, 1, "sticky_sessions [allow_failover]") {
        return None;
    }
    match d.args.first() {
        None => Some(StickySessions {
            allow_failover: false,
        }),
        Some(v) if v.text.eq_ignore_ascii_case("allow_failover") => Some(StickySessions {
            allow_failover: true,
        }),
        Some(v) => {
            c.error(
                &v.pos,
                format!("unknown `sticky_sessions` option `{}`", v.text),
                "the only option is `allow_failover`",
            );
            None
        }
    }
}

/// `learn name=C` in a `srv_group`: the backend cookie's name.
pub fn learn_name(c: &mut Checker<'_>, d: &Directive) -> Option<String> {
    cookie(c, d).map(|ck| ck.name)
}

/// `js_challenge delay_min=MS delay_range=MS [resp_code=C] [TEMPLATE]`.
fn js_challenge(c: &mut Checker<'_>, d: &Directive) -> Option<JsChallenge> {
    let usage = "js_challenge delay_min=MS delay_range=MS [resp_code=CODE] [TEMPLATE]";
    if !(c.no_block(d)
        & c.attrs_only(d, &["delay_min", "delay_range", "resp_code"])
        & no_repeated_attrs(c, d))
    {
        return None;
    }
    if let Some(extra) = d.args.get(1) {
        c.error(
            &extra.pos,
            "`js_challenge` takes one template at most",
            usage,
        );
        return None;
    }
    let mut delay = |key: &str| -> Option<Duration> {
        let Some(a) = c.attr(d, key) else {
            c.error(&d.pos, format!("`js_challenge` needs `{key}=`"), usage);
            return None;
        };
        let ms = c.u32_in(&a.value, key, 1, INT_MAX)?;
        Some(Duration::from_millis(u64::from(ms)))
    };
    let delay_min = delay("delay_min");
    let delay_range = delay("delay_range");
    let resp_code = match c.attr(d, "resp_code") {
        None => Some(503),
        Some(a) => match a.value.text.parse::<u16>() {
            Ok(n) if JS_CHALLENGE_CODES.contains(&n) => Some(n),
            _ => {
                let codes: Vec<String> = JS_CHALLENGE_CODES.iter().map(u16::to_string).collect();
                c.error(
                    &a.value.pos,
                    format!("`{}` is not a challenge status", a.value.text),
                    format!("use one of {}", codes.join(" ")),
                );
                None
            }
        },
    };
    let template = d.args.first().map(|v| c.path(v));
    Some(JsChallenge {
        delay_min: delay_min?,
        delay_range: delay_range?,
        resp_code: resp_code?,
        template,
    })
}
