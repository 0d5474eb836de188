//! The generic syntax tree: statements `name args... key=value;`, blocks
//! `name args... { ... }`, and `http_chain` rules `[COND] -> ACTION [= V];`.
//! Nothing here knows what a directive means; `validate` does.

use std::sync::Arc;

use crate::diag::{Pos, Sink};
use crate::lexer::{tokenize, Token, TokenKind};

/// A word or quoted string with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub text: String,
    pub quoted: bool,
    pub pos: Pos,
}

/// `key=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub key: String,
    pub value: Value,
    pub pos: Pos,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub name: String,
    pub pos: Pos,
    pub args: Vec<Value>,
    pub attrs: Vec<Attr>,
    /// `Some` for a block (`name ... { ... }`).
    pub children: Option<Vec<Node>>,
}

/// A statement containing a chain operator: kept as its raw tokens (without
/// the final `;`) for the http_chain validator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleTokens {
    pub pos: Pos,
    pub tokens: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Directive(Directive),
    Rule(RuleTokens),
}

impl Node {
    pub fn pos(&self) -> &Pos {
        match self {
            Node::Directive(d) => &d.pos,
            Node::Rule(r) => &r.pos,
        }
    }
}

fn is_rule_operator(k: &TokenKind) -> bool {
    matches!(
        k,
        TokenKind::Arrow
            | TokenKind::Equal
            | TokenKind::NotEqual
            | TokenKind::Tilde
            | TokenKind::NotTilde
    )
}

/// Lexes and parses a whole file. Syntax errors go to `sink`; parsing
/// resynchronises at the next `;` or `}` so that later errors are found too.
pub fn parse(file: &Arc<str>, text: &str, sink: &mut Sink) -> Vec<Node> {
    let tokens = crate::braces::close_left_open_blocks(tokenize(file, text, sink), sink);
    let mut p = Parser {
        tokens,
        at: 0,
        file: file.clone(),
    };
    p.block_body(sink, None)
}

/// The block a body belongs to: its directive's name and its `{`.
struct Opened<'a> {
    name: &'a str,
    brace: &'a Pos,
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    file: Arc<str>,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        if t.is_some() {
            self.at += 1;
        }
        t
    }

    /// Whether the token at `index` starts a line at or left of `col`, the
    /// column of the statement before it: a new statement, so that one
    /// before it lacks its `;` (a continued statement is indented further).
    fn starts_statement_at(&self, index: usize, col: u32) -> bool {
        let (Some(prev), Some(tok)) = (
            index.checked_sub(1).and_then(|i| self.tokens.get(i)),
            self.tokens.get(index),
        ) else {
            return false;
        };
        tok.pos.line > prev.end.line && tok.pos.col <= col
    }

    /// Just after the token before `index`: where a missing `;` goes.
    fn end_of_previous(&self, index: usize) -> Pos {
        index
            .checked_sub(1)
            .and_then(|i| self.tokens.get(i))
            .map(|t| t.end.clone())
            .unwrap_or_else(|| self.end_pos())
    }

    fn end_pos(&self) -> Pos {
        match self.tokens.last() {
            Some(t) => t.pos.clone(),
            None => Pos {
                file: self.file.clone(),
                line: 1,
                col: 1,
            },
        }
    }

    /// Statements until `}` (when `open` is the position of the `{`) or the
    /// end of input (top level).
    fn block_body(&mut self, sink: &mut Sink, open: Option<Opened<'_>>) -> Vec<Node> {
        let mut nodes = Vec::new();
        loop {
            let Some(tok) = self.peek() else {
                if let Some(open) = open {
                    sink.error_hint(
                        open.brace,
                        format!("block `{}` is never closed", open.name),
                        "add a `}` at the end of the block",
                    );
                }
                return nodes;
            };
            match tok.kind {
                TokenKind::RBrace => {
                    let pos = tok.pos.clone();
                    self.at += 1;
                    if open.is_some() {
                        return nodes;
                    }
                    sink.error_hint(
                        &pos,
                        "unexpected `}`",
                        "remove it, or open the block it closes",
                    );
                }
                TokenKind::Semicolon => {
                    // A stray `;` (e.g. after a block's `}`) is harmless.
                    self.at += 1;
                }
                _ => {
                    if let Some(node) = self.statement(sink) {
                        nodes.push(node);
                    }
                }
            }
        }
    }

    /// One statement. Looks ahead to the terminating `;` or `{` to decide
    /// whether it is a chain rule (it contains `->`, `==`, `!=` or `~`).
    fn statement(&mut self, sink: &mut Sink) -> Option<Node> {
        let start = self.at;
        let mut end = start;
        let mut is_rule = false;
        while let Some(t) = self.tokens.get(end) {
            match t.kind {
                TokenKind::Semicolon | TokenKind::LBrace | TokenKind::RBrace => break,
                ref k if is_rule_operator(k) => is_rule = true,
                _ => {}
            }
            end += 1;
        }
        if is_rule && !self.is_location_regex(start) {
            let tokens = self.tokens[start..end].to_vec();
            self.at = end;
            let pos = tokens
                .first()
                .map(|t| t.pos.clone())
                .unwrap_or_else(|| self.end_pos());
            match self.peek().map(|t| &t.kind) {
                Some(TokenKind::Semicolon) => {
                    self.at += 1;
                }
                Some(other) => {
                    let p = self
                        .peek()
                        .map(|t| t.pos.clone())
                        .unwrap_or_else(|| self.end_pos());
                    sink.error_hint(
                        &p,
                        format!("expected `;` after the rule, found {}", other.describe()),
                        "end every http_chain rule with `;`",
                    );
                    if matches!(other, TokenKind::LBrace) {
                        self.skip_block(sink);
                    }
                }
                None => sink.error_hint(
                    &self.end_pos(),
                    "missing `;` at end of file",
                    "end the rule with `;`",
                ),
            }
            return Some(Node::Rule(RuleTokens { pos, tokens }));
        }
        self.directive(sink)
    }

    /// `location ~ "/PATTERN/" {`: Tempesta's lexer reads a `~` among a directive's values as
    /// the operator `regex`, so this is a location, not a chain rule.
    fn is_location_regex(&self, start: usize) -> bool {
        matches!(
            (self.tokens.get(start), self.tokens.get(start + 1)),
            (Some(Token { kind: TokenKind::Word(w), .. }), Some(Token { kind: TokenKind::Tilde, .. }))
                if w == "location"
        )
    }

    fn directive(&mut self, sink: &mut Sink) -> Option<Node> {
        let mut d = self.directive_name(sink)?;
        // Where the directive would end had its `;` been forgotten (see `{` below): the
        // token, and how many arguments and attributes come before it.
        let mut split: Option<(usize, usize, usize)> = None;
        loop {
            let Some(tok) = self.next() else {
                sink.error_hint(
                    &d.pos,
                    format!("directive `{}` is not terminated", d.name),
                    "end it with `;` (or open a block with `{`)",
                );
                return Some(Node::Directive(d));
            };
            match tok.kind {
                TokenKind::Semicolon => return Some(Node::Directive(d)),
                // A `{` after a word that began a new line at or left of the directive's
                // column: that word starts the block's own directive, and this one lacks
                // its `;`. Only then is the line break read as an end: a statement that
                // continues on the next line and ends with `;` is one statement, whatever
                // its indentation (Tempesta's language ignores layout).
                TokenKind::LBrace if split.is_some() => {
                    let (at, args, attrs) = split.unwrap_or_default();
                    d.args.truncate(args);
                    d.attrs.truncate(attrs);
                    self.at = at;
                    self.missing_semicolon(sink, &d);
                    return Some(Node::Directive(d));
                }
                TokenKind::LBrace => {
                    let opened = Opened {
                        name: &d.name,
                        brace: &tok.pos,
                    };
                    d.children = Some(self.block_body(sink, Some(opened)));
                    return Some(Node::Directive(d));
                }
                TokenKind::RBrace => {
                    // Leave the `}` for the enclosing block.
                    self.at -= 1;
                    self.missing_semicolon(sink, &d);
                    return Some(Node::Directive(d));
                }
                TokenKind::Tilde if d.name == "location" && d.args.is_empty() => {
                    d.args.push(Value {
                        text: "regex".into(),
                        quoted: false,
                        pos: tok.pos.clone(),
                    });
                }
                TokenKind::Word(_) | TokenKind::Quoted(_) => {
                    self.value(sink, &tok, &mut d, &mut split);
                }
                other => {
                    sink.error_hint(
                        &tok.pos,
                        format!("unexpected {} in directive `{}`", other.describe(), d.name),
                        "only http_chain rules use `==`, `!=`, `~` and `->`; elsewhere write `key=value`",
                    );
                }
            }
        }
    }

    /// A directive's name, read into an empty directive; `None` (after an error and
    /// recovery) when the statement does not start with a word.
    fn directive_name(&mut self, sink: &mut Sink) -> Option<Directive> {
        let first = self.next()?;
        let name = match &first.kind {
            TokenKind::Word(w) => w.clone(),
            other => {
                sink.error_hint(
                    &first.pos,
                    format!("expected a directive name, found {}", other.describe()),
                    "a directive starts with its name, e.g. `listen 443;`",
                );
                self.recover();
                return None;
            }
        };
        Some(Directive {
            name,
            pos: first.pos.clone(),
            args: Vec::new(),
            attrs: Vec::new(),
            children: None,
        })
    }

    /// A word or quoted string `tok` of `d`: an argument, or the key of a `KEY=VALUE`
    /// attribute. Notes in `split` where `d` would end had its `;` been forgotten.
    fn value(
        &mut self,
        sink: &mut Sink,
        tok: &Token,
        d: &mut Directive,
        split: &mut Option<(usize, usize, usize)>,
    ) {
        let Some(text) = tok.kind.text() else {
            return;
        };
        // Only a directive's name can start the next statement: an argument on a line of its
        // own (`vhost` / `example.com {`) is still one.
        let names_directive =
            matches!(tok.kind, TokenKind::Word(_)) && crate::directives::is_known(text);
        if split.is_none() && names_directive && self.starts_statement_at(self.at - 1, d.pos.col) {
            *split = Some((self.at - 1, d.args.len(), d.attrs.len()));
        }
        let quoted = matches!(tok.kind, TokenKind::Quoted(_));
        let value = Value {
            text: text.to_string(),
            quoted,
            pos: tok.pos.clone(),
        };
        if !quoted && matches!(self.peek().map(|t| &t.kind), Some(TokenKind::Assign)) {
            self.attribute(sink, value, d);
        } else {
            d.args.push(value);
        }
    }

    /// `KEY=VALUE`, the `=` next: an attribute of `d`, or an error when no value follows.
    fn attribute(&mut self, sink: &mut Sink, key: Value, d: &mut Directive) {
        let assign = self.next();
        match self.next() {
            Some(Token {
                kind: kind @ (TokenKind::Word(_) | TokenKind::Quoted(_)),
                pos,
                ..
            }) => {
                let vq = matches!(kind, TokenKind::Quoted(_));
                let text = kind.text().unwrap_or_default().to_string();
                d.attrs.push(Attr {
                    key: key.text,
                    value: Value {
                        text,
                        quoted: vq,
                        pos,
                    },
                    pos: key.pos,
                });
            }
            other => {
                let p = other
                    .as_ref()
                    .map(|t| t.pos.clone())
                    .or(assign.map(|t| t.pos))
                    .unwrap_or_else(|| self.end_pos());
                sink.error_hint(
                    &p,
                    format!("`{}=` needs a value", key.text),
                    format!("write `{}=VALUE`", key.text),
                );
                if other.is_some() {
                    self.at -= 1;
                }
            }
        }
    }

    /// Reports the `;` missing after `d`, whose last token was just read.
    fn missing_semicolon(&self, sink: &mut Sink, d: &Directive) {
        sink.error_hint(
            &self.end_of_previous(self.at),
            format!("missing `;` after directive `{}`", d.name),
            "end every directive with `;`",
        );
    }

    /// Skips to just after the next `;` at this nesting level, or stops
    /// before a `}`.
    fn recover(&mut self) {
        while let Some(t) = self.peek() {
            match t.kind {
                TokenKind::Semicolon => {
                    self.at += 1;
                    return;
                }
                TokenKind::RBrace => return,
                TokenKind::LBrace => {
                    self.at += 1;
                    self.skip_nested();
                    return;
                }
                _ => self.at += 1,
            }
        }
    }

    fn skip_block(&mut self, _sink: &mut Sink) {
        self.at += 1;
        self.skip_nested();
    }

    /// After a `{`: skips to its matching `}`.
    fn skip_nested(&mut self) {
        let mut depth = 1usize;
        while let Some(t) = self.next() {
            match t.kind {
                TokenKind::LBrace => depth += 1,
                TokenKind::RBrace => {
                    depth -= 1;
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(text: &str) -> Vec<Node> {
        let mut sink = Sink::default();
        let file: Arc<str> = "t.conf".into();
        let nodes = parse(&file, text, &mut sink);
        assert!(!sink.has_errors(), "{:?}", sink.split().0);
        nodes
    }

    fn errors(text: &str) -> Vec<(u32, u32, String)> {
        let mut sink = Sink::default();
        let file: Arc<str> = "t.conf".into();
        parse(&file, text, &mut sink);
        sink.split()
            .0
            .into_iter()
            .map(|d| (d.line, d.col, d.message))
            .collect()
    }

    #[test]
    fn builds_directives_with_args_attrs_and_children() {
        let nodes =
            parse_ok("listen 443 proto=h2;\nvhost a { tls_tickets secret=\"s;x\" lifetime=5; }");
        let Node::Directive(listen) = &nodes[0] else {
            panic!()
        };
        assert_eq!(listen.name, "listen");
        assert_eq!(listen.args[0].text, "443");
        assert_eq!(listen.attrs[0].key, "proto");
        assert_eq!(listen.attrs[0].value.text, "h2");
        let Node::Directive(vhost) = &nodes[1] else {
            panic!()
        };
        let children = vhost.children.as_ref().unwrap();
        let Node::Directive(t) = &children[0] else {
            panic!()
        };
        assert_eq!(t.attrs[0].value.text, "s;x");
        assert!(t.attrs[0].value.quoted);
        assert_eq!((t.pos.line, t.pos.col), (2, 11));
    }

    #[test]
    fn chain_statements_become_rules() {
        let nodes = parse_ok("http_chain { uri == \"/a\" -> b; -> mark = 3; }");
        let Node::Directive(c) = &nodes[0] else {
            panic!()
        };
        let rules = c.children.as_ref().unwrap();
        assert!(matches!(rules[0], Node::Rule(ref r) if r.tokens.len() == 5));
        assert!(matches!(rules[1], Node::Rule(ref r) if r.tokens.len() == 4));
    }

    #[test]
    fn syntax_errors_are_all_reported_with_positions() {
        let e = errors("a b\n}\nc { d;\n");
        let at: Vec<(u32, u32)> = e.iter().map(|e| (e.0, e.1)).collect();
        // `a b` runs into `}`: a `;` missing after `b` and a stray `}`; `c {`
        // never closed.
        assert_eq!(at, vec![(1, 4), (2, 1), (3, 3)], "{e:?}");
        assert!(e[2].2.contains("never closed"));
        let e = errors("x = 1;");
        assert_eq!((e[0].0, e[0].1), (1, 3));
        let e = errors("{ a; }");
        assert_eq!((e[0].0, e[0].1), (1, 1));
    }

    #[test]
    fn a_missing_semicolon_is_found_where_the_next_line_starts_a_statement() {
        let e = errors("listen 127.0.0.1:443 proto=https\nsrv_group g { server a; }\n");
        assert_eq!(
            e,
            vec![(1, 33, "missing `;` after directive `listen`".to_string())]
        );
        // A statement continued on a line indented further is one statement.
        let nodes = parse_ok("listen 443\n    proto=https;\n");
        assert_eq!(nodes.len(), 1);
        // So is a block's argument on a line of its own, at the block's column.
        let nodes = parse_ok("vhost\nexample.com {\n  proxy_pass default;\n}\n");
        assert_eq!(nodes.len(), 1);
        // So is one continued at its own column: layout means nothing in the language, and
        // a file Tempesta loads must load here. Only a directive's name before a `{` makes
        // the line break an end.
        let nodes = parse_ok("frang_limits {\n  http_methods get post\n  head;\n}\n");
        let Node::Directive(f) = &nodes[0] else {
            panic!()
        };
        assert_eq!(f.children.as_ref().map(Vec::len), Some(1));
    }
}
