//! `http_chain [NAME] { [FIELD [NAME] (==|!=|~) ARG] -> ACTION [= VAL]; }`
//! with Tempesta's ordering rules: vhosts and chains are referenced only
//! after they are defined, the unnamed main chain comes last, and a rule
//! without condition ends its chain.

use std::collections::HashSet;

use crate::diag::Pos;
use crate::lexer::{Token, TokenKind};
use crate::model::{Action, HttpChain, Rule};
use crate::tree::{Directive, Node, RuleTokens};
use crate::validate::chain_action::parse_action;
use crate::validate::chain_condition::parse_condition;
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
    let Some(name) = chain_name(c, d, state) else {
        return;
    };
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

/// The chain's name (`None` for the main chain), or `None` after an error: at most one
/// name, not an action keyword, not taken, and nothing after the main chain.
fn chain_name(c: &mut Checker<'_>, d: &Directive, state: &ChainState) -> Option<Option<String>> {
    let name = match d.args.as_slice() {
        [] => None,
        [n] => Some(n.text.clone()),
        [_, extra, ..] => {
            c.error(
                &extra.pos,
                "`http_chain` takes at most one name",
                "write `http_chain NAME { ... }`",
            );
            return None;
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
        return None;
    }
    if let Some(n) = &name {
        if state.chains.iter().any(|ch| ch.name.as_deref() == Some(n)) {
            c.error(
                &d.pos,
                format!("duplicate http_chain `{n}`"),
                "give each chain a distinct name",
            );
            return None;
        }
        if n == "block" || n == "mark" || n == "cache_ttl" || n == "cache_disable" {
            c.error(
                &d.args[0].pos,
                format!("`{n}` is an action keyword and cannot name a chain"),
                "choose another name",
            );
            return None;
        }
    }
    Some(name)
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

pub(super) fn text_of(t: &Token) -> Option<&str> {
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
