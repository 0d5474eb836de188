//! `cache_use_stale CODE|4*|5*...`: the origin statuses for which a stale
//! cached response may be served instead. Tempesta accepts error statuses
//! only (400..=599), the class masks `4*` and `5*`, and refuses a code or
//! mask given twice or a code already covered by its class mask.

use crate::model::StatusPattern;
use crate::tree::Directive;
use crate::validate::values::Checker;

/// The checked list, or `None` after reporting what is wrong.
pub fn use_stale(c: &mut Checker<'_>, d: &Directive) -> Option<Vec<StatusPattern>> {
    let mut list: Vec<StatusPattern> = Vec::new();
    let mut ok = true;
    for v in &d.args {
        let p = match v.text.parse::<StatusPattern>() {
            Ok(p @ StatusPattern::Class(4 | 5)) => p,
            Ok(StatusPattern::Exact(n)) if (400..=599).contains(&n) => StatusPattern::Exact(n),
            Ok(_) => {
                c.error(
                    &v.pos,
                    format!("`{}` is not an error status", v.text),
                    "a stale response can stand in for errors only: 400..599, `4*` or `5*`",
                );
                ok = false;
                continue;
            }
            Err(e) => {
                c.error(&v.pos, format!("bad status `{}`", v.text), e);
                ok = false;
                continue;
            }
        };
        let class = |x: &StatusPattern| match *x {
            StatusPattern::Class(k) => k,
            StatusPattern::Exact(n) => (n / 100) as u8,
        };
        if list.contains(&p) {
            c.error(
                &v.pos,
                format!("`{}` is listed twice in `cache_use_stale`", v.text),
                "remove the repeated entry",
            );
            ok = false;
        } else if let Some(other) = list.iter().find(|x| {
            class(x) == class(&p)
                && matches!(
                    (x, p),
                    (StatusPattern::Class(_), _) | (_, StatusPattern::Class(_))
                )
        }) {
            c.error(
                &v.pos,
                format!("`{}` overlaps `{other}` in `cache_use_stale`", v.text),
                format!(
                    "`{}*` already covers every {}xx code; give either the mask or the codes",
                    class(&p),
                    class(&p)
                ),
            );
            ok = false;
        } else {
            list.push(p);
        }
    }
    ok.then_some(list)
}
