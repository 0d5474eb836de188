//! Top-level cache settings: `cache`, `cache_methods`, `cache_size`, `cache_max_object_size`,
//! `cache_ttl`, and the extensions `cache_heuristic` and `cache_targeted_fields`.

use crate::model::{CacheMode, Config, Method};
use crate::tree::Directive;
use crate::validate::once::unique_args;
use crate::validate::values::Checker;

/// Handles `d` if it is one of this module's directives.
pub fn apply(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) -> bool {
    let name = d.name.as_str();
    match name {
        "cache" => {
            if let Some(v) = c.single(d, "cache 0|1|2") {
                match v.text.as_str() {
                    "0" => cfg.cache.mode = CacheMode::Off,
                    "1" => cfg.cache.mode = CacheMode::Sharded,
                    "2" => cfg.cache.mode = CacheMode::Replicated,
                    _ => c.error(
                        &v.pos,
                        format!("`{}` is not a cache mode", v.text),
                        "expected 0 (off), 1 (sharded) or 2 (replicated)",
                    ),
                }
            }
        }
        "cache_methods" => {
            if c.shape(d, 1, usize::MAX, "cache_methods METHOD...") {
                cache_methods(c, d, cfg);
            }
        }
        "cache_size" => {
            if let Some(v) = c.single(d, "cache_size BYTES") {
                // Tempesta DB extents are 2 MiB; the file is 16 MiB..128 GiB.
                if let Some(n) = c.mem_in(v, "cache_size", 16 << 20, 128 << 30, 2 << 20) {
                    cfg.cache.size = n;
                }
            }
        }
        "cache_max_object_size" => {
            if let Some(v) = c.single(d, &format!("{name} BYTES")) {
                if let Some(n) = c.size(v, "size") {
                    if n == 0 {
                        c.error(
                            &v.pos,
                            format!("`{name}` must be positive"),
                            "give a size in bytes, e.g. 268435456",
                        );
                    } else {
                        cfg.cache.max_object_size = n;
                    }
                }
            }
        }
        "cache_heuristic" => cache_heuristic(c, d, cfg),
        "cache_targeted_fields" => cache_targeted_fields(c, d, cfg),
        "cache_ttl" => {
            if let Some(v) = c.single(d, "cache_ttl SECONDS") {
                if let Some(t) = c.secs(v, "lifetime in seconds") {
                    cfg.cache.ttl = (!t.is_zero()).then_some(t);
                }
            }
        }
        _ => return false,
    }
    true
}

/// `cache_methods`: Tempesta caches responses to GET, HEAD and POST only
/// (RFC 9110 cacheable methods) and warns about a repeated method.
fn cache_methods(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) {
    unique_args(c, d, &d.args, |v| Method::parse(&v.text), false);
    let mut methods = Vec::new();
    for v in &d.args {
        match Method::parse(&v.text) {
            Some(m @ (Method::Get | Method::Head | Method::Post)) => {
                if !methods.contains(&m) {
                    methods.push(m);
                }
            }
            Some(m) => c.error(
                &v.pos,
                format!("{m} responses cannot be cached"),
                "Tempesta caches only GET, HEAD and POST",
            ),
            None => c.error(
                &v.pos,
                format!("unknown HTTP method `{}`", v.text),
                "expected e.g. GET HEAD POST",
            ),
        }
    }
    cfg.cache.methods = methods;
}

/// `cache_targeted_fields NAME... | off` (RFC 9213 target list, first valid field wins).
fn cache_targeted_fields(c: &mut Checker, d: &Directive, cfg: &mut Config) {
    if !c.shape(d, 1, 16, "cache_targeted_fields NAME... | off") {
        return;
    }
    if d.args.len() == 1 && d.args[0].text.eq_ignore_ascii_case("off") {
        cfg.cache.targeted_fields = Vec::new();
        return;
    }
    let mut names = Vec::with_capacity(d.args.len());
    for v in &d.args {
        let token = !v.text.is_empty()
            && v.text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            c.error(
                &v.pos,
                format!("`{}` is not a header field name", v.text),
                "give field names such as CDN-Cache-Control, or `off`",
            );
            return;
        }
        names.push(v.text.clone());
    }
    cfg.cache.targeted_fields = names;
}

/// `cache_heuristic off | PERCENT [MAX_SECONDS]`.
fn cache_heuristic(c: &mut Checker, d: &Directive, cfg: &mut Config) {
    if !c.shape(d, 1, 2, "cache_heuristic off | PERCENT [MAX_SECONDS]") {
        return;
    }
    if d.args.len() == 1 && d.args[0].text.eq_ignore_ascii_case("off") {
        cfg.cache.heuristic = None;
        return;
    }
    let Some(percent) = c.u32_in(&d.args[0], "percentage", 1, 100) else {
        return;
    };
    let max_secs = match d.args.get(1) {
        Some(v) => match c.secs(v, "largest heuristic lifetime in seconds") {
            Some(t) => t.as_secs(),
            None => return,
        },
        None => crate::model::DEFAULT_CACHE_HEURISTIC.max_secs,
    };
    cfg.cache.heuristic = Some(crate::model::CacheHeuristic { percent, max_secs });
}
