//! `response_body CODE|4*|5* FILE`: Tempesta's custom bodies for the error responses the
//! proxy makes itself (its blocks, 502s, 504s...), read once when the configuration loads.
//! As in Tempesta the directives apply in order, each to the statuses it names, so a later
//! one wins: `response_body 4* a; response_body 404 b;` gives 404 `b` and the other 4xx `a`.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use config::{Config, StatusPattern};

#[derive(Default)]
pub struct ErrorPages {
    pages: Vec<(StatusPattern, Arc<[u8]>)>,
}

/// A `response_body` file that could not be read.
#[derive(Debug)]
pub struct PageError {
    pub path: PathBuf,
    pub error: std::io::Error,
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot read response_body file {}: {} (the path is relative to the config file's \
             directory; Tempesta refuses such a configuration too)",
            self.path.display(),
            self.error
        )
    }
}

impl ErrorPages {
    /// Reads every `response_body` file of `config`.
    pub fn load(config: &Config) -> Result<ErrorPages, PageError> {
        let mut pages = Vec::with_capacity(config.response_bodies.len());
        for r in &config.response_bodies {
            let body = std::fs::read(&r.path).map_err(|error| PageError {
                path: r.path.clone(),
                error,
            })?;
            pages.push((r.status, Arc::from(body)));
        }
        Ok(ErrorPages { pages })
    }

    /// The configured body for the proxy's own response with `status` (4xx and 5xx only:
    /// Tempesta's `response_body` covers its error responses).
    pub fn page(&self, status: u16) -> Option<&[u8]> {
        if !(400..600).contains(&status) {
            return None;
        }
        self.pages
            .iter()
            .rev()
            .find(|(pattern, _)| pattern.matches(status))
            .map(|(_, body)| &body[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_matching_directive_wins_and_only_errors_get_pages() {
        let page = |s: &str| Arc::<[u8]>::from(s.as_bytes());
        let pages = ErrorPages {
            pages: vec![
                (StatusPattern::Class(4), page("any 4xx")),
                (StatusPattern::Exact(404), page("not found")),
                (StatusPattern::Exact(502), page("bad gateway")),
                (StatusPattern::Class(5), page("any 5xx")),
            ],
        };
        assert_eq!(pages.page(403), Some(&b"any 4xx"[..]));
        assert_eq!(pages.page(404), Some(&b"not found"[..]));
        assert_eq!(pages.page(502), Some(&b"any 5xx"[..]), "5* came after 502");
        assert_eq!(pages.page(200), None);
        assert_eq!(pages.page(302), None);
    }
}
