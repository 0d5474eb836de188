//! The condition of an `http_chain` rule: `FIELD ["NAME"] ==|!=|~ "VALUE"`, the field and
//! its pattern as Tempesta reads them.

use crate::diag::{did_you_mean, Pos};
use crate::lexer::{Token, TokenKind};
use crate::model::{Condition, Field, Method, Pattern};
use crate::validate::chain::text_of;
use crate::validate::tempesta_regex::translate;
use crate::validate::values::Checker;

pub(super) fn parse_condition(
    c: &mut Checker<'_>,
    toks: &[Token],
    start: &Pos,
) -> Option<Condition> {
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
    let arg = condition_value(c, &op.pos, rhs, usage)?;
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

/// The one value after a condition's operator at `op`.
fn condition_value<'t>(
    c: &mut Checker<'_>,
    op: &Pos,
    rhs: &'t [Token],
    usage: &str,
) -> Option<&'t Token> {
    match rhs {
        [a] if text_of(a).is_some() => Some(a),
        [] => {
            c.error(op, "comparison without a value", usage);
            None
        }
        [a, ..] if text_of(a).is_none() => {
            c.error(
                &a.pos,
                format!("expected a value, found {}", a.kind.describe()),
                usage,
            );
            None
        }
        [_] => None,
        [_, extra, ..] => {
            c.error(
                &extra.pos,
                format!("unexpected {} after the value", extra.kind.describe()),
                "quote values that contain spaces",
            );
            None
        }
    }
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
    if let Some(keyword) = keyword_pattern(c, field, regex, text, pos) {
        return keyword;
    }
    if regex {
        return regex_pattern(c, field, text, pos);
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

/// The pattern of a field with values of its own kind (`mark`, `method`, `scheme`):
/// `Some(None)` after an error, `None` for a field matched as text.
fn keyword_pattern(
    c: &mut Checker<'_>,
    field: &Field,
    regex: bool,
    text: &str,
    pos: &Pos,
) -> Option<Option<Pattern>> {
    Some(match field {
        Field::Mark => {
            if regex {
                c.error(
                    pos,
                    "`mark` cannot be matched with `~`",
                    "write `mark == N`",
                );
                return Some(None);
            }
            match text.parse::<u32>() {
                Ok(n) => Some(Pattern::Mark(n)),
                Err(_) => {
                    c.error(
                        pos,
                        format!("`{text}` is not a mark"),
                        "expected an unsigned integer",
                    );
                    None
                }
            }
        }
        Field::Scheme => scheme_pattern(c, regex, text, pos),
        Field::Method => {
            if regex {
                c.error(
                    pos,
                    "`method` cannot be matched with `~`",
                    "write `method == get`",
                );
                return Some(None);
            }
            match Method::parse(text) {
                Some(m) => Some(Pattern::Method(m)),
                None => {
                    c.error(
                        pos,
                        format!("unknown HTTP method `{text}`"),
                        "expected e.g. get, post, head, purge",
                    );
                    None
                }
            }
        }
        _ => return None,
    })
}

/// `~ "/PATTERN/FLAGS"`: where an expression is allowed, translated (tempesta_regex.rs).
fn regex_pattern(c: &mut Checker<'_>, field: &Field, text: &str, pos: &Pos) -> Option<Pattern> {
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
    match translate(text) {
        Ok(translated) => Some(Pattern::Regex(translated)),
        Err(e) => {
            c.error(pos, e.message, e.hint);
            None
        }
    }
}
