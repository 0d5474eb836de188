//! `http_chain [NAME] { [FIELD [NAME] (==|!=|~) ARG] -> ACTION [= VAL]; }`
//! with Tempesta's ordering rules: vhosts and chains are referenced only
//! after they are defined, the unnamed main chain comes last, and a rule
//! without condition ends its chain.

use std::collections::HashSet;
use std::time::Duration;

use crate::diag::{did_you_mean, Pos};
use crate::lexer::{Token, TokenKind};
use crate::model::{
    Action, Condition, Field, HttpChain, Method, Pattern, Rule, UrlPart, UrlTemplate,
};

/// Tempesta keeps the variables of a redirect in an 8-slot array and
/// refuses a location that fills it.
const MAX_REDIRECT_VARS: usize = 7;
use crate::tree::{Directive, Node, RuleTokens};
use crate::validate::tempesta_regex::translate;
use crate::validate::values::Checker;

#[derive(Debug, Default)]
pub struct ChainState {
    pub chains: Vec<HttpChain>,
    pub main: Option<(HttpChain, Pos)>,
}

/// Names a rule may jump to.
pub struct Targets<'a> {
    /// Vhosts defined before this chain (`default` included when it exists).
    pub vhosts: &'a HashSet<String>,
    /// Vhosts defined anywhere (for a better message when defined too late).
    pub later_vhosts: &'a HashSet<String>,
}

pub fn http_chain(
    c: &mut Checker<'_>,
    d: &Directive,
    state: &mut ChainState,
    targets: &Targets<'_>,
) {
    c.attrs_only(d, &[]);
    let Some(children) = &d.children else {
        c.error(
            &d.pos,
            "`http_chain` needs a block of rules",
            "write `http_chain [NAME] { COND -> ACTION; ... }`",
        );
        return;
    };
    let name = match d.args.as_slice() {
        [] => None,
        [n] => Some(n.text.clone()),
        [_, extra, ..] => {
            c.error(
                &extra.pos,
                "`http_chain` takes at most one name",
                "write `http_chain NAME { ... }`",
            );
            return;
        }
    };
    if let Some((_, main_pos)) = &state.main {
        let what = name
            .as_deref()
            .map_or("a second main chain".to_string(), |n| {
                format!("chain `{n}`")
            });
        c.error(
            &d.pos,
            format!("{what} comes after the main `http_chain`"),
            format!(
                "the unnamed main chain (line {}) must be the last one; move this chain above it",
                main_pos.line
            ),
        );
        return;
    }
    if let Some(n) = &name {
        if state.chains.iter().any(|ch| ch.name.as_deref() == Some(n)) {
            c.error(
                &d.pos,
                format!("duplicate http_chain `{n}`"),
                "give each chain a distinct name",
            );
            return;
        }
        if n == "block" || n == "mark" || n == "cache_ttl" || n == "cache_disable" {
            c.error(
                &d.args[0].pos,
                format!("`{n}` is an action keyword and cannot name a chain"),
                "choose another name",
            );
            return;
        }
    }
    let mut rules = Vec::new();
    let mut default_rule_at: Option<Pos> = None;
    for node in children {
        let r = match node {
            Node::Rule(r) => r,
            Node::Directive(x) => {
                c.error(
                    &x.pos,
                    format!("`{}` is not an http_chain rule", x.name),
                    "a rule is `FIELD == \"VALUE\" -> ACTION;` or `-> ACTION;`",
                );
                continue;
            }
        };
        if let Some(p) = &default_rule_at {
            c.error(
                &r.pos,
                "rule after the default rule is never used",
                format!(
                    "the rule without condition (line {}) must be the last rule of its chain",
                    p.line
                ),
            );
        }
        if let Some(rule) = parse_rule(c, r, state, name.as_deref(), targets) {
            if rule.condition.is_none() && default_rule_at.is_none() && is_terminal(&rule.action) {
                default_rule_at = Some(r.pos.clone());
            }
            rules.push(rule);
        }
    }
    let chain = HttpChain { name, rules };
    if chain.name.is_none() {
        state.main = Some((chain, d.pos.clone()));
    } else {
        state.chains.push(chain);
    }
}

/// `mark`, `cache_ttl` and `cache_disable` set something and go on to the
/// next rule, so a condition-less rule with them may be followed by others
/// (as in Tempesta's own examples: `-> mark = 7; -> heavy;`).
fn is_terminal(a: &Action) -> bool {
    !matches!(
        a,
        Action::Mark(_) | Action::CacheTtl(_) | Action::CacheDisable(_)
    )
}

fn text_of(t: &Token) -> Option<&str> {
    t.kind.text()
}

fn parse_rule(
    c: &mut Checker<'_>,
    r: &RuleTokens,
    state: &ChainState,
    this_chain: Option<&str>,
    targets: &Targets<'_>,
) -> Option<Rule> {
    let toks = &r.tokens;
    let Some(arrow) = toks.iter().position(|t| t.kind == TokenKind::Arrow) else {
        c.error(&r.pos, "rule has no `->`", "write `CONDITION -> ACTION;`");
        return None;
    };
    let condition = if arrow == 0 {
        None
    } else {
        Some(parse_condition(c, &toks[..arrow], &r.pos)?)
    };
    let action = parse_action(
        c,
        &toks[arrow + 1..],
        &toks[arrow].pos,
        state,
        this_chain,
        targets,
    )?;
    Some(Rule { condition, action })
}

fn parse_condition(c: &mut Checker<'_>, toks: &[Token], start: &Pos) -> Option<Condition> {
    let usage =
        "FIELD [\"HEADER\"] ==|!=|~ \"VALUE\" (FIELD: uri, host, hdr, cookie, method, mark)";
    let Some(op_at) = toks.iter().position(|t| {
        matches!(
            t.kind,
            TokenKind::Equal | TokenKind::NotEqual | TokenKind::Tilde | TokenKind::NotTilde
        )
    }) else {
        c.error(start, "condition has no comparison operator", usage);
        return None;
    };
    let op = &toks[op_at];
    if op.kind == TokenKind::NotTilde {
        c.error(&op.pos, "`!~` is not supported", "Tempesta has only `==`, `!=` and `~`; rewrite the regular expression to match the opposite");
        return None;
    }
    let lhs = &toks[..op_at];
    let rhs = &toks[op_at + 1..];
    let Some(field_tok) = lhs.first() else {
        c.error(&op.pos, "comparison without a field", usage);
        return None;
    };
    let Some(field_name) = text_of(field_tok) else {
        c.error(
            &field_tok.pos,
            format!("expected a field name, found {}", field_tok.kind.describe()),
            usage,
        );
        return None;
    };
    let arg_name = match lhs.get(1..) {
        Some([]) | None => None,
        Some([n]) => match text_of(n) {
            Some(s) => Some((s.to_string(), n.pos.clone())),
            None => {
                c.error(&n.pos, format!("unexpected {}", n.kind.describe()), usage);
                return None;
            }
        },
        Some([_, extra, ..]) => {
            c.error(
                &extra.pos,
                format!("unexpected {} in condition", extra.kind.describe()),
                usage,
            );
            return None;
        }
    };
    let field = field(c, field_name, &field_tok.pos, arg_name)?;
    let arg = match rhs {
        [a] if text_of(a).is_some() => a,
        [] => {
            c.error(&op.pos, "comparison without a value", usage);
            return None;
        }
        [a, ..] if text_of(a).is_none() => {
            c.error(
                &a.pos,
                format!("expected a value, found {}", a.kind.describe()),
                usage,
            );
            return None;
        }
        [_] => return None,
        [_, extra, ..] => {
            c.error(
                &extra.pos,
                format!("unexpected {} after the value", extra.kind.describe()),
                "quote values that contain spaces",
            );
            return None;
        }
    };
    let text = text_of(arg).unwrap_or_default();
    let regex = op.kind == TokenKind::Tilde;
    let pattern = pattern(c, &field, regex, text, &arg.pos)?;
    Some(Condition {
        field,
        negate: op.kind == TokenKind::NotEqual,
        pattern,
    })
}

fn field(c: &mut Checker<'_>, name: &str, pos: &Pos, arg: Option<(String, Pos)>) -> Option<Field> {
    // Tempesta 0.5 spellings: a field per special header.
    let legacy = match name {
        "hdr_host" => Some("Host"),
        "hdr_conn" => Some("Connection"),
        "hdr_ref" => Some("Referer"),
        _ => None,
    };
    let needs_name = matches!(name, "hdr" | "cookie");
    match (&arg, needs_name) {
        (None, true) => {
            c.error(
                pos,
                format!("`{name}` needs a name"),
                format!("write `{name} \"NAME\" == \"VALUE\"`"),
            );
            return None;
        }
        (Some((_, p)), false) => {
            c.error(
                p,
                format!("`{name}` takes no name before the operator"),
                format!("write `{name} == \"VALUE\"`"),
            );
            return None;
        }
        (Some((n, p)), true) if n.trim().is_empty() => {
            c.error(
                p,
                format!("empty {name} name"),
                "give the header or cookie name (Tempesta refuses a name of only spaces)",
            );
            return None;
        }
        _ => {}
    }
    if let Some(h) = legacy {
        c.sink.warning(
            pos,
            format!("`{name}` is an old spelling; use `hdr \"{h}\"`"),
        );
        return Some(Field::Header(h.to_string()));
    }
    let arg = arg.map(|(n, _)| n).unwrap_or_default();
    Some(match name {
        "uri" => Field::Uri,
        "host" => Field::Host,
        "method" => Field::Method,
        "mark" => Field::Mark,
        "scheme" => Field::Scheme,
        // Tempesta trims spaces around a raw header name (http_match.c find_spaces).
        "hdr" => Field::Header(arg.trim().to_string()),
        // A cookie name may be `*`, `prefix*` or `*suffix`; `*both*` Tempesta refuses.
        "cookie" if arg.len() > 1 && arg.starts_with('*') && arg.ends_with('*') => {
            c.error(
                pos,
                format!("double-wildcard cookie name `{arg}` cannot be matched"),
                "write `\"prefix*\"` or `\"*suffix\"`",
            );
            return None;
        }
        "cookie" => Field::Cookie(arg),
        other => {
            let mut hint = "expected uri, host, hdr, cookie, method, mark or scheme".to_string();
            let known = ["uri", "host", "hdr", "cookie", "method", "mark", "scheme"];
            if let Some(s) = did_you_mean(other, known) {
                hint = format!("did you mean `{s}`?");
            }
            c.error(pos, format!("unknown field `{other}`"), hint);
            return None;
        }
    })
}

/// `scheme == http|https`: the only two schemes a listener serves.
fn scheme_pattern(c: &mut Checker<'_>, regex: bool, text: &str, pos: &Pos) -> Option<Pattern> {
    if regex {
        c.error(
            pos,
            "`scheme` cannot be matched with `~`",
            "write `scheme == \"http\"` or `scheme == \"https\"`",
        );
        return None;
    }
    let scheme = text.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        c.error(
            pos,
            format!("`{text}` is not a scheme a listener serves"),
            "expected http (a plain listener) or https (a TLS one)",
        );
        return None;
    }
    Some(Pattern::Exact(scheme))
}

fn pattern(
    c: &mut Checker<'_>,
    field: &Field,
    regex: bool,
    text: &str,
    pos: &Pos,
) -> Option<Pattern> {
    // Spaces around a header value are not part of it (Tempesta's find_spaces; a regular
    // expression is taken as written).
    let written = text;
    let text = match field {
        Field::Header(_) if !regex => text.trim(),
        _ => text,
    };
    match field {
        Field::Mark => {
            if regex {
                c.error(
                    pos,
                    "`mark` cannot be matched with `~`",
                    "write `mark == N`",
                );
                return None;
            }
            return match text.parse::<u32>() {
                Ok(n) => Some(Pattern::Mark(n)),
                Err(_) => {
                    c.error(
                        pos,
                        format!("`{text}` is not a mark"),
                        "expected an unsigned integer",
                    );
                    None
                }
            };
        }
        Field::Scheme => return scheme_pattern(c, regex, text, pos),
        Field::Method => {
            if regex {
                c.error(
                    pos,
                    "`method` cannot be matched with `~`",
                    "write `method == get`",
                );
                return None;
            }
            return match Method::parse(text) {
                Some(m) => Some(Pattern::Method(m)),
                None => {
                    c.error(
                        pos,
                        format!("unknown HTTP method `{text}`"),
                        "expected e.g. get, post, head, purge",
                    );
                    None
                }
            };
        }
        _ => {}
    }
    if regex {
        if text == "*" {
            c.error(
                pos,
                "`*` is a wildcard, not a regular expression",
                "write `== \"*\"` instead of `~ \"*\"`",
            );
            return None;
        }
        if matches!(field, Field::Cookie(_)) {
            c.error(
                pos,
                "cookie values cannot be matched with `~`",
                "match the whole header: `hdr \"Cookie\" ~ \"...\"`",
            );
            return None;
        }
        return match translate(text) {
            Ok(translated) => Some(Pattern::Regex(translated)),
            Err(e) => {
                c.error(pos, e.message, e.hint);
                None
            }
        };
    }
    if text == "*" {
        return Some(Pattern::Any);
    }
    // Tempesta trims spaces around a header value to match; nothing is left.
    if matches!(field, Field::Header(_)) && text.is_empty() && !written.is_empty() {
        c.error(
            pos,
            "the header value is only whitespace",
            "give a value, or `*` to match any value",
        );
        return None;
    }
    if text.is_empty() {
        c.error(pos, "empty value", "give a value, or `*` to match anything");
        return None;
    }
    if text.len() > 1 && text.starts_with('*') && text.ends_with('*') {
        c.sink.warning(
            pos,
            format!("double-wildcard pattern `{text}` cannot be matched; it is used as a prefix"),
        );
        return Some(Pattern::Prefix(text[..text.len() - 1].to_string()));
    }
    if let Some(rest) = text.strip_prefix('*') {
        return Some(Pattern::Suffix(rest.to_string()));
    }
    if let Some(rest) = text.strip_suffix('*') {
        return Some(Pattern::Prefix(rest.to_string()));
    }
    Some(Pattern::Exact(text.to_string()))
}

fn parse_action(
    c: &mut Checker<'_>,
    toks: &[Token],
    arrow: &Pos,
    state: &ChainState,
    this_chain: Option<&str>,
    targets: &Targets<'_>,
) -> Option<Action> {
    let usage = "ACTION is a vhost, a chain, `block`, `mark = N`, `cache_ttl = N`, `cache_disable [= 0|1]` or `301|302|303|307|308 = URL`";
    let (name_tok, value) = match toks {
        [n] => (n, None),
        [n, eq, v] if eq.kind == TokenKind::Assign && text_of(v).is_some() => {
            (n, Some((text_of(v).unwrap_or_default(), &v.pos)))
        }
        [] => {
            c.error(arrow, "`->` without an action", usage);
            return None;
        }
        [_, t, ..] => {
            c.error(
                &t.pos,
                format!("unexpected {} in the action", t.kind.describe()),
                usage,
            );
            return None;
        }
    };
    let Some(name) = text_of(name_tok) else {
        c.error(
            &name_tok.pos,
            format!("expected an action, found {}", name_tok.kind.describe()),
            usage,
        );
        return None;
    };
    let pos = &name_tok.pos;
    let lower = name.to_ascii_lowercase();
    match (lower.as_str(), value) {
        ("mark", Some((v, vpos))) => match v.parse::<u32>() {
            Ok(n) => Some(Action::Mark(n)),
            Err(_) => {
                c.error(
                    vpos,
                    format!("`{v}` is not a mark"),
                    "the mark action takes an unsigned integer: `-> mark = 7`",
                );
                None
            }
        },
        ("mark", None) => {
            c.error(pos, "`mark` needs a value", "write `-> mark = N`");
            None
        }
        ("cache_disable", None) => Some(Action::CacheDisable(true)),
        ("cache_disable", Some((v, _))) => Some(Action::CacheDisable(v.starts_with('1'))),
        ("cache_ttl", Some((v, vpos))) => match v.parse::<u64>() {
            Ok(n) => Some(Action::CacheTtl(Duration::from_secs(n))),
            Err(_) => {
                c.error(
                    vpos,
                    format!("`{v}` is not a cache lifetime"),
                    "write `-> cache_ttl = SECONDS`",
                );
                None
            }
        },
        ("cache_ttl", None) => {
            c.error(
                pos,
                "`cache_ttl` needs a value",
                "write `-> cache_ttl = SECONDS`",
            );
            None
        }
        (code, Some((url, vpos))) if code.bytes().all(|b| b.is_ascii_digit()) => match code {
            "301" | "302" | "303" | "307" | "308" => {
                if url.is_empty() {
                    c.error(
                        vpos,
                        "empty redirect location",
                        "write `-> 301 = https://$host$request_uri`",
                    );
                    return None;
                }
                let url = UrlTemplate::parse(url);
                let vars = url
                    .parts
                    .iter()
                    .filter(|p| !matches!(p, UrlPart::Literal(_)))
                    .count();
                if vars > MAX_REDIRECT_VARS {
                    c.error(
                        vpos,
                        format!("{vars} variables in the redirect location"),
                        format!("Tempesta allows at most {MAX_REDIRECT_VARS} `$host`/`$request_uri` in one location"),
                    );
                    return None;
                }
                Some(Action::Redirect {
                    status: code.parse().unwrap_or(301),
                    url,
                })
            }
            _ => {
                c.error(
                    pos,
                    format!("{code} is not a redirect status"),
                    "use 301, 302, 303, 307 or 308",
                );
                None
            }
        },
        (_, Some((_, vpos))) => {
            c.error(
                vpos,
                format!("action `{name}` takes no value"),
                "only mark, cache_ttl, cache_disable and redirects take `= VALUE`",
            );
            None
        }
        ("block", None) => Some(Action::Block),
        (_, None) => jump_target(c, name, pos, state, this_chain, targets),
    }
}

fn jump_target(
    c: &mut Checker<'_>,
    name: &str,
    pos: &Pos,
    state: &ChainState,
    this_chain: Option<&str>,
    targets: &Targets<'_>,
) -> Option<Action> {
    if this_chain == Some(name) {
        c.error(
            pos,
            format!("chain `{name}` jumps to itself"),
            "a chain can jump only to chains defined before it",
        );
        return None;
    }
    // Tempesta looks chains up first, then vhosts.
    if state
        .chains
        .iter()
        .any(|ch| ch.name.as_deref() == Some(name))
    {
        return Some(Action::Chain(name.to_string()));
    }
    if targets.vhosts.contains(name) {
        return Some(Action::Vhost(name.to_string()));
    }
    let hint = if targets.later_vhosts.contains(name) {
        format!(
            "vhost `{name}` is defined after this chain; vhosts must come before http_chain blocks"
        )
    } else {
        let candidates = state
            .chains
            .iter()
            .filter_map(|ch| ch.name.as_deref())
            .chain(targets.vhosts.iter().map(String::as_str))
            .chain(["block"]);
        match did_you_mean(name, candidates) {
            Some(s) => format!("did you mean `{s}`?"),
            None => "define the vhost or http_chain before this rule".to_string(),
        }
    };
    c.error(pos, format!("no vhost or http_chain named `{name}`"), hint);
    None
}
