//! Reading the client's `Cookie` fields (RFC 6265 §5.4: `name=value` pairs separated by
//! `;` and optional whitespace, possibly over several fields, as HTTP/2 clients send them)
//! and removing one cookie from them before the request goes upstream, leaving every other
//! pair byte for byte as the client sent it.

/// The pairs of one `Cookie` field value, each without its surrounding whitespace.
fn pairs(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b';')
        .map(|p| p.trim_ascii())
        .filter(|p| !p.is_empty())
}

/// A pair's name and value (`name` alone when it has no `=`).
fn split_pair(pair: &[u8]) -> (&[u8], &[u8]) {
    match pair.iter().position(|&b| b == b'=') {
        Some(eq) => (&pair[..eq], &pair[eq + 1..]),
        None => (pair, &[]),
    }
}

/// The value of the first cookie called `name` (names compare exactly, as browsers do),
/// without the double quotes RFC 6265 allows around it.
pub fn find<'a>(fields: impl Iterator<Item = &'a [u8]>, name: &[u8]) -> Option<&'a [u8]> {
    for field in fields {
        for pair in pairs(field) {
            let (n, v) = split_pair(pair);
            if n.trim_ascii() == name {
                let v = v.trim_ascii();
                return Some(
                    v.strip_prefix(b"\"")
                        .and_then(|x| x.strip_suffix(b"\""))
                        .unwrap_or(v),
                );
            }
        }
    }
    None
}

/// What to forward instead of the client's `Cookie` fields once the cookie `name` is taken
/// out: `None` when no field holds it (forward them untouched); `Some(rest)` otherwise, the
/// other pairs joined with `; ` (empty: send no `Cookie` field at all).
pub fn without(fields: &[&[u8]], name: &[u8]) -> Option<Vec<u8>> {
    let holds = |f: &&[u8]| pairs(f).any(|p| split_pair(p).0.trim_ascii() == name);
    if !fields.iter().any(holds) {
        return None;
    }
    let mut rest = Vec::new();
    for field in fields {
        for pair in pairs(field) {
            if split_pair(pair).0.trim_ascii() == name {
                continue;
            }
            if !rest.is_empty() {
                rest.extend_from_slice(b"; ");
            }
            rest.extend_from_slice(pair);
        }
    }
    Some(rest)
}

/// The value the `Set-Cookie` field `set_cookie` gives the cookie `name`, if it names it.
pub fn set_cookie_value<'a>(set_cookie: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let first = set_cookie.split(|&b| b == b';').next()?;
    let (n, v) = split_pair(first.trim_ascii());
    (n.trim_ascii() == name).then(|| v.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_cookie_among_others_and_across_fields() {
        let fields: [&[u8]; 2] = [b"a=1; __tfw=abc ;b=2", b"c=3"];
        assert_eq!(find(fields.iter().copied(), b"__tfw"), Some(&b"abc"[..]));
        assert_eq!(find(fields.iter().copied(), b"c"), Some(&b"3"[..]));
        assert_eq!(find(fields.iter().copied(), b"__TFW"), None);
        let quoted: [&[u8]; 1] = [b"__tfw=\"q\""];
        assert_eq!(find(quoted.iter().copied(), b"__tfw"), Some(&b"q"[..]));
        // The first one wins, as for a browser that sends the most specific path first.
        let twice: [&[u8]; 1] = [b"__tfw=1; __tfw=2"];
        assert_eq!(find(twice.iter().copied(), b"__tfw"), Some(&b"1"[..]));
    }

    #[test]
    fn strips_only_the_named_cookie_keeping_the_others_byte_exact() {
        let one: [&[u8]; 1] = [b"a=1;  __tfw=abc; b=\"x y\";c"];
        assert_eq!(
            without(&one, b"__tfw").as_deref(),
            Some(&b"a=1; b=\"x y\"; c"[..])
        );
        let only: [&[u8]; 1] = [b"__tfw=abc"];
        assert_eq!(without(&only, b"__tfw").as_deref(), Some(&b""[..]));
        let none: [&[u8]; 1] = [b"a=1;b=2"];
        assert_eq!(without(&none, b"__tfw"), None, "untouched when absent");
        let crumbs: [&[u8]; 3] = [b"a=1", b"__tfw=v", b"b=2"];
        assert_eq!(
            without(&crumbs, b"__tfw").as_deref(),
            Some(&b"a=1; b=2"[..])
        );
        // A cookie whose name merely starts with ours stays.
        let prefix: [&[u8]; 1] = [b"__tfwx=1; __tfw=2"];
        assert_eq!(
            without(&prefix, b"__tfw").as_deref(),
            Some(&b"__tfwx=1"[..])
        );
    }

    #[test]
    fn reads_the_value_a_backend_sets() {
        assert_eq!(
            set_cookie_value(b"sid=42; Path=/; HttpOnly", b"sid"),
            Some(&b"42"[..])
        );
        assert_eq!(set_cookie_value(b"other=1; sid=2", b"sid"), None);
        assert_eq!(set_cookie_value(b"", b"sid"), None);
    }
}
