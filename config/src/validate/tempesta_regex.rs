//! Tempesta's regular expressions (`~ "/PATTERN/FLAGS"` in `http_chain`, `location ~` or
//! `location regex`) in the syntax of the `regex` crate.
//!
//! Tempesta hands each expression to Hyperscan's `hscollider`, which reads it in the
//! `/PATTERN/FLAGS` form: the pattern between the first and the last `/`, single-letter flags
//! after it. So `"/shop/i"` matches `WorkShop.com` and `"^/api"` (no delimiters) does not
//! load in Tempesta. The proxy reads the same form and refuses what Hyperscan refuses where
//! the difference would change what matches: an unknown flag, an empty pattern, and a pattern
//! that matches the empty string without the `V` flag.
//!
//! Hyperscan scans bytes: without `8` (UTF-8) or `W` (Unicode properties) `.` and classes
//! are byte-wise and `i` folds ASCII only, which `(?-u)` gives. The flags that change only
//! how Hyperscan reports a match (`H` single match, `L` leftmost start, `P` prefilter, `Q`
//! quiet) do not change whether a request matches, so they are accepted and have no effect.

use regex::bytes::RegexBuilder;

/// Compiled expressions may not grow past this (the `regex` crate's default is 10 MiB per
/// expression; a configuration has at most a few hundred).
const SIZE_LIMIT: usize = 1 << 20;

/// Why an expression is refused; `hint` says how to write it.
#[derive(Debug, PartialEq, Eq)]
pub struct RegexError {
    pub message: String,
    pub hint: String,
}

fn error(message: impl Into<String>, hint: impl Into<String>) -> RegexError {
    RegexError {
        message: message.into(),
        hint: hint.into(),
    }
}

/// `text` (as written in the configuration) in the `regex` crate's syntax, inline flags first.
pub fn translate(text: &str) -> Result<String, RegexError> {
    let form = "write it as Tempesta does, between slashes with optional flags: \"/PATTERN/\" \
                or \"/PATTERN/i\"";
    let Some(body) = text.strip_prefix('/') else {
        return Err(error(
            format!("regular expression `{text}` does not start with `/`"),
            form,
        ));
    };
    let Some(end) = body.rfind('/') else {
        return Err(error(
            format!("regular expression `{text}` has no closing `/`"),
            form,
        ));
    };
    let (pattern, flags) = (&body[..end], &body[end + 1..]);
    if pattern.is_empty() {
        return Err(error(
            format!("regular expression `{text}` is empty"),
            "put the pattern between the slashes",
        ));
    }
    let mut inline = String::new();
    let mut unicode = false;
    let mut allow_empty = false;
    for flag in flags.chars() {
        match flag {
            'i' | 's' | 'm' => {
                if !inline.contains(flag) {
                    inline.push(flag);
                }
            }
            '8' | 'W' => unicode = true,
            'V' => allow_empty = true,
            'H' | 'L' | 'P' | 'Q' => {}
            'C' => {
                return Err(error(
                    format!("regular expression `{text}`: logical combinations (flag `C`) are not supported"),
                    "write one rule per expression",
                ))
            }
            other => {
                return Err(error(
                    format!("regular expression `{text}` has an unknown flag `{other}`"),
                    format!(
                        "flags are i, s, m, 8, W, V, H, L, P, Q after the closing `/`; \
                         if `{flags}` belongs to the pattern, end it with `/`: \"{text}/\""
                    ),
                ))
            }
        }
    }
    if !unicode {
        inline.push_str("-u");
    }
    let translated = if inline.is_empty() {
        pattern.to_string()
    } else {
        format!("(?{inline}){pattern}")
    };
    let compiled = RegexBuilder::new(&translated)
        .size_limit(SIZE_LIMIT)
        .build()
        .map_err(|e| {
            error(
                format!("invalid regular expression `{text}`"),
                e.to_string().replace('\n', " "),
            )
        })?;
    if !allow_empty && compiled.is_match(b"") {
        return Err(error(
            format!("regular expression `{text}` matches the empty string"),
            "Tempesta (Hyperscan) refuses such a pattern; add the `V` flag if that is meant",
        ));
    }
    Ok(translated)
}

#[cfg(test)]
mod tests {
    use super::translate;

    fn matches(text: &str, subject: &str) -> bool {
        let t = translate(text).expect(text);
        regex::bytes::Regex::new(&t)
            .unwrap()
            .is_match(subject.as_bytes())
    }

    #[test]
    fn the_pattern_is_between_the_first_and_the_last_slash() {
        assert!(matches("/^/article/id/[0-9]+/", "/article/id/1234"));
        assert!(!matches("/^/article/id/[0-9]+/", "/article/id/abc"));
        assert!(matches("/shop/", "/testshop"));
        assert!(!matches("/shop/", "/testShop"));
        assert!(matches(
            "/app|ad12:ca16/i",
            "[fd80::1cb2:ad12:ca16:98ef]:8080"
        ));
        assert!(matches("/host\\./", "host=forwarded.host.ignored"));
    }

    #[test]
    fn flags_change_what_matches_as_in_hyperscan() {
        assert!(matches("/shop/i", "WorkShop.com"));
        assert!(!matches("/a.b/", "a\nb"));
        assert!(matches("/a.b/s", "a\nb"));
        assert!(matches("/^b/m", "a\nb"));
        assert!(!matches("/^b/", "a\nb"));
        // Byte-wise without 8: `.` is one byte, so two dots match one two-byte letter.
        assert!(matches("/^..$/", "é"));
        assert!(!matches("/^..$/8", "é"));
        assert!(matches("/shop/HLPQ", "shop"));
    }

    #[test]
    fn what_hyperscan_refuses_is_refused_with_the_form_to_write() {
        for bad in ["^/api", "/api", "//", "/api/v1", "/a/C", "/(/"] {
            let e = translate(bad).expect_err(bad);
            assert!(!e.hint.is_empty(), "{bad}: {e:?}");
        }
        assert!(translate("/api/v1")
            .unwrap_err()
            .hint
            .contains("\"/api/v1/\""));
        assert!(translate("/a*/").is_err());
        assert!(translate("/^/").is_err());
        assert!(matches("/a*/V", "bbb"));
        // ReDoS-shaped patterns compile to a linear-time automaton.
        assert!(!matches("/(a+)+$/", &format!("{}X", "a".repeat(64))));
        assert!(matches("/(a+)+$/", "aaa"));
    }
}
