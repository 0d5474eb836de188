//! `tft { ... }` and `tfh { ... }` (Tempesta's fingerprint limits) and `tf_blocklist` (an
//! extension), checked as Tempesta's parser checks them (fw/tf_conf.c): a block without
//! arguments, at most one `storage_size=` attribute (a multiple of 2 MiB, Tempesta's
//! database extent, or 0), `hash` entries of a hexadecimal fingerprint and two unsigned
//! numbers.

use super::values::Checker;
use crate::model::{parse_fingerprint, FingerprintLimit, FingerprintLimits};
use crate::tree::{Directive, Node, Value};

/// Tempesta's database extent: `storage_size` must be a whole number of them.
const EXTENT: u64 = 1 << 21;

/// `tft { ... }` / `tfh { ... }` at top level: `None` after an error (reported).
pub fn apply(c: &mut Checker<'_>, d: &Directive) -> Option<FingerprintLimits> {
    let third = if d.name == "tft" {
        "RECORDS_PER_S"
    } else {
        "REQUESTS_PER_S"
    };
    let usage = format!(
        "{} [storage_size=BYTES] {{ hash HEX CONNS_PER_S {third}; ... }}",
        d.name
    );
    let mut ok = c.attrs_only(d, &["storage_size"]);
    let Some(children) = d.children.as_ref().filter(|_| d.args.is_empty()) else {
        c.error(
            &d.pos,
            format!("`{}` takes a block and no arguments", d.name),
            usage,
        );
        return None;
    };
    let mut limits = FingerprintLimits::default();
    if let Some(attr) = c.attr(d, "storage_size") {
        match storage_size(c, &attr.value) {
            Some(n) => limits.storage_size = n,
            None => ok = false,
        }
    }
    for node in children {
        let Node::Directive(x) = node else {
            if let Node::Rule(r) = node {
                c.error(
                    &r.pos,
                    format!("not a `hash` entry of `{}`", d.name),
                    &usage,
                );
            }
            ok = false;
            continue;
        };
        if x.name != "hash" {
            c.error(
                &x.pos,
                format!("unknown directive `{}` in `{}`", x.name, d.name),
                format!(
                    "`{}` holds only `hash HEX CONNS_PER_S {third};` entries",
                    d.name
                ),
            );
            ok = false;
            continue;
        }
        match hash_entry(c, x, third) {
            Some(entry) => {
                limits.hashes.retain(|h| h.hash != entry.hash);
                limits.hashes.push(entry);
            }
            None => ok = false,
        }
    }
    ok.then_some(limits)
}

/// `hash HEX CONNS_PER_S RECORDS_PER_S;`.
fn hash_entry(c: &mut Checker<'_>, x: &Directive, third: &str) -> Option<FingerprintLimit> {
    let usage = format!("hash HEX CONNS_PER_S {third}");
    if !c.shape(x, 3, 3, &usage) {
        return None;
    }
    let [hash, conns, records] = x.args.as_slice() else {
        return None;
    };
    let hash = fingerprint(c, hash);
    let connections = c.u32(conns, "connections per second");
    let records = c.u32(records, &format!("{} per second", third_noun(third)));
    Some(FingerprintLimit {
        hash: hash?,
        connections: connections?,
        records: records?,
    })
}

fn third_noun(third: &str) -> &'static str {
    if third == "RECORDS_PER_S" {
        "records"
    } else {
        "requests"
    }
}

fn fingerprint(c: &mut Checker<'_>, v: &Value) -> Option<u64> {
    let parsed = parse_fingerprint(&v.text);
    if parsed.is_none() {
        c.error(
            &v.pos,
            format!("`{}` is not a valid fingerprint", v.text),
            "expected up to 16 hexadecimal digits, as the access log prints `tft=` and `tfh=`",
        );
    }
    parsed
}

fn storage_size(c: &mut Checker<'_>, v: &Value) -> Option<u64> {
    let n = c.u64(v, "storage_size")?;
    if n % EXTENT != 0 {
        c.error(
            &v.pos,
            format!("storage_size={n} is not a multiple of 2 MiB"),
            format!("Tempesta's table grows by 2 MiB extents: use 0 (limits off) or a multiple of {EXTENT}"),
        );
        return None;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use crate::model::parse_fingerprint;

    #[test]
    fn fingerprints_are_hexadecimal_u64() {
        assert_eq!(
            parse_fingerprint("66cb9fd8d4250000"),
            Some(0x66cb_9fd8_d425_0000)
        );
        assert_eq!(parse_fingerprint("0xdeadbeef"), Some(0xdead_beef));
        assert_eq!(parse_fingerprint("invalid_hash"), None);
        assert_eq!(parse_fingerprint("1ffffffffffffffff"), None);
        assert_eq!(parse_fingerprint(""), None);
        assert_eq!(parse_fingerprint("-1"), None);
    }
}
