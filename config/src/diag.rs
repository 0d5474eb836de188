//! Diagnostics: errors and warnings with a file position and an optional
//! hint, printed as `FILE:LINE:COL: error: MESSAGE`.

use std::fmt;
use std::sync::Arc;

/// Where a token starts. Lines and columns count from 1; columns count
/// characters, not bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pos {
    pub file: Arc<str>,
    pub line: u32,
    pub col: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Warning,
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One message about the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: String,
    /// 0 when the message concerns the whole file (e.g. TOML type errors
    /// without a position).
    pub line: u32,
    pub col: u32,
    pub message: String,
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(pos: &Pos, message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(Severity::Error, pos, message)
    }

    pub fn warning(pos: &Pos, message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(Severity::Warning, pos, message)
    }

    fn new(severity: Severity, pos: &Pos, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity,
            file: pos.file.to_string(),
            line: pos.line,
            col: pos.col,
            message: message.into(),
            hint: None,
        }
    }

    /// A message about a file as a whole (cannot be read, TOML syntax...).
    pub fn file_error(file: &str, line: u32, col: u32, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            file: file.to_string(),
            line,
            col,
            message: message.into(),
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}:{}: ", self.file, self.line, self.col)?;
        } else {
            write!(f, "{}: ", self.file)?;
        }
        write!(f, "{}: {}", self.severity, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

/// A configuration that failed to load: at least one error, plus the
/// warnings found on the way, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics {
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
}

impl Diagnostics {
    /// Everything, sorted by position (errors and warnings interleaved).
    pub fn all(&self) -> Vec<&Diagnostic> {
        let mut v: Vec<&Diagnostic> = self.errors.iter().chain(&self.warnings).collect();
        v.sort_by(|a, b| (&a.file, a.line, a.col).cmp(&(&b.file, b.line, b.col)));
        v
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in self.all() {
            writeln!(f, "{d}")?;
        }
        let n = self.errors.len();
        write!(
            f,
            "{n} error{} in configuration",
            if n == 1 { "" } else { "s" }
        )
    }
}

impl std::error::Error for Diagnostics {}

/// Collects diagnostics while a file is checked, so that every problem is
/// reported in one run instead of one per run.
#[derive(Debug, Default)]
pub struct Sink {
    items: Vec<Diagnostic>,
}

impl Sink {
    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    pub fn error(&mut self, pos: &Pos, message: impl Into<String>) {
        self.push(Diagnostic::error(pos, message));
    }

    pub fn error_hint(&mut self, pos: &Pos, message: impl Into<String>, hint: impl Into<String>) {
        self.push(Diagnostic::error(pos, message).with_hint(hint));
    }

    pub fn warning(&mut self, pos: &Pos, message: impl Into<String>) {
        self.push(Diagnostic::warning(pos, message));
    }

    pub fn has_errors(&self) -> bool {
        self.items.iter().any(Diagnostic::is_error)
    }

    /// Splits into (errors, warnings), each in position order.
    pub fn split(mut self) -> (Vec<Diagnostic>, Vec<Diagnostic>) {
        self.items
            .sort_by(|a, b| (&a.file, a.line, a.col).cmp(&(&b.file, b.line, b.col)));
        self.items.into_iter().partition(Diagnostic::is_error)
    }
}

/// Levenshtein distance, for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The closest candidate within a distance that still looks like a typo.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let len = word.chars().count();
    let limit = (len / 3).clamp(2, 3);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit && *d < len)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_edits() {
        assert_eq!(edit_distance("listen", "listen"), 0);
        assert_eq!(edit_distance("lisen", "listen"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestion_only_for_near_misses() {
        let names = ["listen", "vhost", "cache"];
        assert_eq!(did_you_mean("lsten", names), Some("listen"));
        assert_eq!(did_you_mean("vhots", names), Some("vhost"));
        assert_eq!(did_you_mean("frobnicate", names), None);
    }

    #[test]
    fn display_has_position_severity_and_hint() {
        let pos = Pos {
            file: "a.conf".into(),
            line: 3,
            col: 5,
        };
        let d = Diagnostic::error(&pos, "unknown directive `lsten`")
            .with_hint("did you mean `listen`?");
        assert_eq!(
            d.to_string(),
            "a.conf:3:5: error: unknown directive `lsten` (hint: did you mean `listen`?)"
        );
    }
}
