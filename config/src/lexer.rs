//! Tokens of the Tempesta configuration language.
//!
//! The rules follow Tempesta's own lexer so that files it accepts split the
//! same way here: a bare word runs until whitespace or one of `" # { } ; =`,
//! and also stops before `->` and `!=` (so `a->b` is three tokens while
//! `tempesta-tech.com` stays one word). `=`, `==`, `!=`, `->`, `~` are
//! operator tokens. A backslash keeps the next character in a bare word
//! (`/var/foo\ bar`). Quoted strings may span lines; inside them `\"`, `\\`,
//! `\n`, `\r`, `\t` are escapes and any other backslash is kept as written,
//! so regular expressions such as `"\.jpg$"` survive.

use std::sync::Arc;

use crate::diag::{Pos, Sink};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenKind {
    /// An unquoted word.
    Word(String),
    /// A double-quoted string, unescaped.
    Quoted(String),
    LBrace,
    RBrace,
    Semicolon,
    /// `=`
    Assign,
    /// `==`
    Equal,
    /// `!=`
    NotEqual,
    /// `->`
    Arrow,
    /// `~`
    Tilde,
    /// `!~` (not part of Tempesta; lexed to give a clear error)
    NotTilde,
}

impl TokenKind {
    /// How the token is shown in messages.
    pub fn describe(&self) -> String {
        match self {
            TokenKind::Word(w) => format!("`{w}`"),
            TokenKind::Quoted(q) => format!("\"{q}\""),
            TokenKind::LBrace => "`{`".into(),
            TokenKind::RBrace => "`}`".into(),
            TokenKind::Semicolon => "`;`".into(),
            TokenKind::Assign => "`=`".into(),
            TokenKind::Equal => "`==`".into(),
            TokenKind::NotEqual => "`!=`".into(),
            TokenKind::Arrow => "`->`".into(),
            TokenKind::Tilde => "`~`".into(),
            TokenKind::NotTilde => "`!~`".into(),
        }
    }

    /// The text of a word or quoted string.
    pub fn text(&self) -> Option<&str> {
        match self {
            TokenKind::Word(s) | TokenKind::Quoted(s) => Some(s),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub pos: Pos,
    /// Just after the token's last character: where a missing `;` belongs.
    pub end: Pos,
}

struct Cursor<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    file: Arc<str>,
    line: u32,
    col: u32,
}

impl Cursor<'_> {
    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    /// The character after the next one, without consuming anything.
    fn peek2(&self) -> Option<char> {
        let mut it = self.chars.clone();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line = self.line.saturating_add(1);
            self.col = 1;
        } else {
            self.col = self.col.saturating_add(1);
        }
        Some(c)
    }

    fn pos(&self) -> Pos {
        Pos {
            file: self.file.clone(),
            line: self.line,
            col: self.col,
        }
    }
}

fn ends_word(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '#' | '{' | '}' | ';' | '=')
}

/// Splits `text` into tokens; problems (unterminated strings) go to `sink`
/// and lexing continues, so later errors are still found.
pub fn tokenize(file: &Arc<str>, text: &str, sink: &mut Sink) -> Vec<Token> {
    let mut cur = Cursor {
        chars: text.chars().peekable(),
        file: file.clone(),
        line: 1,
        col: 1,
    };
    let mut tokens = Vec::new();
    while let Some(c) = cur.peek() {
        if c.is_whitespace() {
            cur.bump();
            continue;
        }
        if c == '#' {
            while cur.peek().is_some_and(|c| c != '\n') {
                cur.bump();
            }
            continue;
        }
        let pos = cur.pos();
        let next = cur.peek2();
        let op = match (c, next) {
            ('{', _) => Some((TokenKind::LBrace, 1)),
            ('}', _) => Some((TokenKind::RBrace, 1)),
            (';', _) => Some((TokenKind::Semicolon, 1)),
            ('=', Some('=')) => Some((TokenKind::Equal, 2)),
            ('=', _) => Some((TokenKind::Assign, 1)),
            ('!', Some('=')) => Some((TokenKind::NotEqual, 2)),
            ('!', Some('~')) => Some((TokenKind::NotTilde, 2)),
            ('-', Some('>')) => Some((TokenKind::Arrow, 2)),
            ('~', _) => Some((TokenKind::Tilde, 1)),
            _ => None,
        };
        if let Some((kind, len)) = op {
            for _ in 0..len {
                cur.bump();
            }
            tokens.push(Token {
                kind,
                pos,
                end: cur.pos(),
            });
            continue;
        }
        if c == '"' {
            cur.bump();
            match quoted(&mut cur) {
                Some(s) => tokens.push(Token {
                    kind: TokenKind::Quoted(s),
                    pos,
                    end: cur.pos(),
                }),
                None => sink.error_hint(
                    &pos,
                    "unterminated quoted string",
                    "add the closing `\"`; write `\\\"` for a quote inside the string",
                ),
            }
            continue;
        }
        let kind = TokenKind::Word(word(&mut cur));
        tokens.push(Token {
            kind,
            pos,
            end: cur.pos(),
        });
    }
    tokens
}

/// Reads a quoted string after its opening quote; `None` at end of input.
fn quoted(cur: &mut Cursor<'_>) -> Option<String> {
    let mut s = String::new();
    loop {
        match cur.bump()? {
            '"' => return Some(s),
            '\\' => match cur.bump()? {
                '"' => s.push('"'),
                '\\' => s.push('\\'),
                'n' => s.push('\n'),
                'r' => s.push('\r'),
                't' => s.push('\t'),
                other => {
                    s.push('\\');
                    s.push(other);
                }
            },
            c => s.push(c),
        }
    }
}

fn word(cur: &mut Cursor<'_>) -> String {
    let mut s = String::new();
    while let Some(c) = cur.peek() {
        if ends_word(c) {
            break;
        }
        // `->` and `!=` end a word even without a space before them.
        if (c == '-' && cur.peek2() == Some('>')) || (c == '!' && cur.peek2() == Some('=')) {
            break;
        }
        cur.bump();
        if c == '\\' {
            match cur.bump() {
                Some(escaped) => s.push(escaped),
                None => s.push('\\'),
            }
        } else {
            s.push(c);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use TokenKind::*;

    fn kinds(text: &str) -> (Vec<TokenKind>, Sink) {
        let mut sink = Sink::default();
        let file: Arc<str> = "t.conf".into();
        let toks = tokenize(&file, text, &mut sink);
        (toks.into_iter().map(|t| t.kind).collect(), sink)
    }

    fn w(s: &str) -> TokenKind {
        Word(s.into())
    }

    #[test]
    fn directives_attributes_and_blocks() {
        let (k, sink) = kinds("listen 127.0.0.1:443 proto=https; # c\nvhost a-b.com { x; }");
        assert!(!sink.has_errors());
        assert_eq!(
            k,
            vec![
                w("listen"),
                w("127.0.0.1:443"),
                w("proto"),
                Assign,
                w("https"),
                Semicolon,
                w("vhost"),
                w("a-b.com"),
                LBrace,
                w("x"),
                Semicolon,
                RBrace
            ]
        );
    }

    #[test]
    fn chain_operators_split_words() {
        let (k, _) =
            kinds("uri==\"/a\"->301=/b; host!=x->block; hdr \"X\" ~ \"^a\\.b$\"->mark = 1; a !~ b");
        assert_eq!(
            k,
            vec![
                w("uri"),
                Equal,
                Quoted("/a".into()),
                Arrow,
                w("301"),
                Assign,
                w("/b"),
                Semicolon,
                w("host"),
                NotEqual,
                w("x"),
                Arrow,
                w("block"),
                Semicolon,
                w("hdr"),
                Quoted("X".into()),
                Tilde,
                Quoted("^a\\.b$".into()),
                Arrow,
                w("mark"),
                Assign,
                w("1"),
                Semicolon,
                w("a"),
                NotTilde,
                w("b"),
            ]
        );
    }

    #[test]
    fn quoted_escapes_and_bare_backslash() {
        let (k, _) = kinds(r#""a \"q\" \\ \r\n" /var/foo\ bar"#);
        assert_eq!(k, vec![Quoted("a \"q\" \\ \r\n".into()), w("/var/foo bar")]);
    }

    #[test]
    fn positions_are_line_and_column() {
        let mut sink = Sink::default();
        let file: Arc<str> = "t.conf".into();
        let toks = tokenize(&file, "a\n  bb \"x\ny\" c", &mut sink);
        let at: Vec<(u32, u32)> = toks.iter().map(|t| (t.pos.line, t.pos.col)).collect();
        assert_eq!(at, vec![(1, 1), (2, 3), (2, 6), (3, 4)]);
    }

    #[test]
    fn unterminated_string_is_reported_at_its_start() {
        let (_, sink) = kinds("a;\n  b \"oops;\n");
        let (errors, _) = sink.split();
        assert_eq!(errors.len(), 1);
        assert_eq!((errors[0].line, errors[0].col), (2, 5));
    }
}
