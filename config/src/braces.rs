//! A missing `}` found where the indentation says the block ends.
//!
//! Without this, the parser only learns that a `}` is missing at the end of
//! the file, after the open block has swallowed every directive below it;
//! each of those is then refused as "not allowed in `srv_group`", knock-on
//! errors that hide the one mistake. When the file has fewer `}` than `{`,
//! a line that starts at or left of the column of an open, indented block's
//! directive (or a `}` left of it) ends that block: the block is reported
//! once, at its `{`, and a `}` is put back before that line so that the rest
//! of the file is read as the operator wrote it. Files whose braces balance
//! are returned untouched, so unindented configurations read as before.

use crate::diag::{Pos, Sink};
use crate::lexer::{Token, TokenKind};

/// A block still open at some point of the scan.
struct OpenBlock {
    name: String,
    /// The column of the block's directive name.
    col: u32,
    brace: Pos,
    /// Whether its first line inside starts right of `col`: only then does
    /// a line back at `col` say the block has ended.
    indented: Option<bool>,
}

/// Returns `tokens` with a `}` added where each block left open ends, and
/// reports each such block.
pub fn close_left_open_blocks(tokens: Vec<Token>, sink: &mut Sink) -> Vec<Token> {
    let opened = tokens
        .iter()
        .filter(|t| t.kind == TokenKind::LBrace)
        .count();
    let closed = tokens
        .iter()
        .filter(|t| t.kind == TokenKind::RBrace)
        .count();
    let mut missing = opened.saturating_sub(closed);
    if missing == 0 {
        return tokens;
    }
    let mut open: Vec<OpenBlock> = Vec::new();
    let mut out = Vec::with_capacity(tokens.len() + missing);
    let mut statement: Option<(String, u32)> = None;
    let mut prev_line = 0u32;
    for tok in tokens {
        let starts_line = tok.pos.line > prev_line;
        prev_line = tok.end.line;
        if starts_line {
            if let Some(top) = open.last_mut() {
                top.indented.get_or_insert(tok.pos.col > top.col);
            }
        }
        while missing > 0 && starts_line && ends_top_block(&open, &tok) {
            let Some(top) = open.pop() else { break };
            report(sink, &top, &tok);
            out.push(Token {
                kind: TokenKind::RBrace,
                pos: tok.pos.clone(),
                end: tok.pos.clone(),
            });
            missing -= 1;
        }
        match &tok.kind {
            TokenKind::LBrace => {
                let (name, col) = statement.take().unwrap_or_default();
                open.push(OpenBlock {
                    name,
                    col,
                    brace: tok.pos.clone(),
                    indented: None,
                });
            }
            TokenKind::RBrace => {
                open.pop();
                statement = None;
            }
            TokenKind::Semicolon => statement = None,
            kind => {
                if statement.is_none() {
                    let name = kind.text().unwrap_or_default().to_string();
                    statement = Some((name, tok.pos.col));
                }
            }
        }
        out.push(tok);
    }
    out
}

/// Whether `tok`, first on its line, is outside the innermost open block.
fn ends_top_block(open: &[OpenBlock], tok: &Token) -> bool {
    let Some(top) = open.last() else {
        return false;
    };
    if top.indented != Some(true) {
        return false;
    }
    match tok.kind {
        // A `}` at the block's own column is its own.
        TokenKind::RBrace => tok.pos.col < top.col,
        _ => tok.pos.col <= top.col,
    }
}

fn report(sink: &mut Sink, block: &OpenBlock, next: &Token) {
    let before = match next.kind.text() {
        Some(name) if next.kind != TokenKind::RBrace => format!(" (`{name}`)"),
        _ => String::new(),
    };
    sink.error_hint(
        &block.brace,
        format!("block `{}` is never closed", block.name),
        format!(
            "add a `}}` before line {}{before}, where the indentation ends the block",
            next.pos.line
        ),
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::lexer::tokenize;

    fn closed(text: &str) -> (Vec<(u32, u32, String)>, Vec<Token>) {
        let mut sink = Sink::default();
        let file: Arc<str> = "t.conf".into();
        let tokens = close_left_open_blocks(tokenize(&file, text, &mut sink), &mut sink);
        let errors = sink
            .split()
            .0
            .into_iter()
            .map(|d| (d.line, d.col, d.message))
            .collect();
        (errors, tokens)
    }

    #[test]
    fn a_dedented_line_closes_the_block_left_open() {
        let (e, tokens) = closed("srv_group g {\n    server a;\nvhost v {\n    x;\n}\n");
        assert_eq!(e, vec![(1, 13, "block `srv_group` is never closed".into())]);
        // The `}` put back sits before `vhost`.
        let at = tokens.iter().position(|t| t.kind.text() == Some("vhost"));
        assert_eq!(at.map(|i| &tokens[i - 1].kind), Some(&TokenKind::RBrace));
    }

    #[test]
    fn a_closing_brace_left_of_an_inner_block_closes_it() {
        let (e, _) = closed("vhost v {\n    location prefix \"/\" {\n        x;\n    y;\n}\n");
        assert_eq!(e, vec![(2, 25, "block `location` is never closed".into())]);
    }

    #[test]
    fn balanced_or_unindented_files_are_left_alone() {
        let text = "vhost v {\nx;\n}\n";
        let (e, tokens) = closed(text);
        assert!(e.is_empty());
        assert_eq!(tokens.len(), 6);
        let (e, tokens) = closed("vhost v {\nx;\nvhost w {\ny;\n}\n");
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(tokens.len(), 11);
    }
}
