//! `http_*_brange`: the bytes an HTTP field may contain. Tempesta refuses
//! a set that allows a byte its parser relies on as a delimiter or that
//! can never be valid in that field (controls, space, `,` between list
//! items, `;` and `=` in cookies, `"` around etags...).

use crate::model::{ByteSet, Config};
use crate::tree::Directive;
use crate::validate::values::Checker;

/// The bytes each directive may not allow, as Tempesta's parser defines
/// them (`user_agent` is this project's own and has no such rule).
fn forbidden(name: &str) -> Option<&'static [(u8, u8)]> {
    Some(match name {
        "http_uri_brange" => &[(0x00, 0x20)],
        "http_token_brange" => &[(0x00, 0x20), (0x2c, 0x2c), (0x3b, 0x3b)],
        "http_qetoken_brange" => &[
            (0x00, 0x08),
            (0x0a, 0x1f),
            (0x22, 0x22),
            (0x5c, 0x5c),
            (0x7f, 0x7f),
        ],
        "http_nctl_brange" | "http_ctext_vchar_brange" => &[(0x00, 0x1f)],
        "http_xff_brange" => &[(0x00, 0x20), (0x2c, 0x2c)],
        "http_cookie_brange" => &[(0x00, 0x20), (0x3b, 0x3b), (0x3d, 0x3d)],
        "http_etag_brange" => &[(0x00, 0x20), (0x22, 0x22)],
        _ => return None,
    })
}

fn show(ranges: &[(u8, u8)]) -> String {
    ranges
        .iter()
        .map(|&(a, b)| {
            if a == b {
                format!("{a:#04x}")
            } else {
                format!("{a:#04x}-{b:#04x}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Handles a `http_*_brange` directive; false if `d` is not one.
pub fn apply(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) -> bool {
    let r = &mut cfg.byte_ranges;
    let slot = match d.name.as_str() {
        "http_uri_brange" => &mut r.uri,
        "http_token_brange" => &mut r.token,
        "http_qetoken_brange" => &mut r.qetoken,
        "http_nctl_brange" => &mut r.nctl,
        "http_ctext_vchar_brange" => &mut r.ctext_vchar,
        "http_xff_brange" => &mut r.xff,
        "http_user_agent_brange" => &mut r.user_agent,
        "http_cookie_brange" => &mut r.cookie,
        "http_etag_brange" => &mut r.etag,
        _ => return false,
    };
    if !(c.no_block(d) & c.attrs_only(d, &[])) {
        return true;
    }
    if d.args.is_empty() {
        c.error(
            &d.pos,
            format!("`{}` needs byte ranges", d.name),
            "e.g. `0x2f 0x41-0x5a 48`",
        );
        return true;
    }
    let banned = forbidden(&d.name).unwrap_or(&[]);
    let mut set = ByteSet::default();
    let mut ok = true;
    for v in &d.args {
        let mut item = ByteSet::default();
        if let Err(e) = item.add_item(&v.text) {
            c.error(&v.pos, e.0, "bytes are 0..=255, decimal or 0x hex");
            ok = false;
            continue;
        }
        let bad = banned
            .iter()
            .flat_map(|&(a, b)| a..=b)
            .find(|&b| item.contains(b));
        if let Some(b) = bad {
            c.error(
                &v.pos,
                format!("`{}` cannot allow byte {b:#04x} (`{}`)", d.name, v.text),
                format!(
                    "Tempesta's HTTP parser never accepts {} here; leave them out",
                    show(banned)
                ),
            );
            ok = false;
            continue;
        }
        for (a, b) in item.ranges() {
            set.insert_range(a, b);
        }
    }
    if ok {
        *slot = Some(set);
    }
    true
}
