//! The action of an `http_chain` rule: a vhost or chain to go to, `block`, a setting
//! (`mark`, `cache_ttl`, `cache_disable`) or a redirect.

use std::time::Duration;

use crate::diag::{did_you_mean, Pos};
use crate::lexer::{Token, TokenKind};
use crate::model::{Action, UrlPart, UrlTemplate};
use crate::validate::chain::{text_of, ChainState, Targets};
use crate::validate::values::Checker;

/// Tempesta keeps the variables of a redirect in an 8-slot array and
/// refuses a location that fills it.
const MAX_REDIRECT_VARS: usize = 7;

pub(super) fn parse_action(
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
        ("mark" | "cache_ttl" | "cache_disable", value) => setting_action(c, &lower, value, pos),
        (code, Some((url, vpos))) if code.bytes().all(|b| b.is_ascii_digit()) => {
            redirect_action(c, code, url, vpos, pos)
        }
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

/// `mark = N`, `cache_ttl = N`, `cache_disable [= 0|1]`: the actions that set something and
/// go on to the next rule.
fn setting_action(
    c: &mut Checker<'_>,
    name: &str,
    value: Option<(&str, &Pos)>,
    pos: &Pos,
) -> Option<Action> {
    match (name, value) {
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
        _ => None,
    }
}

/// `CODE = URL`: a redirect, its status one Tempesta allows and its URL a template of at
/// most `MAX_REDIRECT_VARS` variables.
fn redirect_action(
    c: &mut Checker<'_>,
    code: &str,
    url: &str,
    vpos: &Pos,
    pos: &Pos,
) -> Option<Action> {
    match code {
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
    }
}
