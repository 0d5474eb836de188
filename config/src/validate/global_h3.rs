//! Extension: the `h3_*` bounds of the QUIC side of HTTP/3 (`model_h3.rs` says what each
//! caps and its default). Each takes one number, sizes with an optional K or M suffix.

use crate::model::Config;
use crate::tree::Directive;
use crate::validate::values::Checker;

/// A count directive's range: at least one, at most a bound no worker would want.
const COUNTS: (u32, u32) = (1, 1_000_000);

/// Handles `d` if it is one of this module's directives.
pub fn apply(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) -> bool {
    let h3 = &mut cfg.h3;
    let (field, lo, hi, bytes) = match d.name.as_str() {
        "h3_max_handshakes" => (&mut h3.max_handshakes, COUNTS.0, COUNTS.1, false),
        "h3_retry_above" => (&mut h3.retry_above, 0, COUNTS.1, false),
        "h3_qpack_blocked_streams" => (&mut h3.qpack_blocked_streams, 0, 65_536, false),
        // QUIC's smallest sensible window is a datagram; 1 GiB is far past any need.
        "h3_stream_window" => (&mut h3.stream_window, 1200, 1 << 30, true),
        "h3_connection_window" => (&mut h3.connection_window, 1200, 1 << 30, true),
        "h3_send_window" => (&mut h3.send_window, 1200, 1 << 30, true),
        // A TLS handshake's messages need a few KiB out of order at most.
        "h3_crypto_buffer" => (&mut h3.crypto_buffer, 4096, 1 << 20, true),
        "h3_qpack_table" => (&mut h3.qpack_table, 0, 1 << 20, true),
        _ => return false,
    };
    let unit = if bytes { "BYTES" } else { "N" };
    let usage = format!("{} {unit} ({lo}..={hi})", d.name);
    let Some(v) = c.single(d, &usage) else {
        return true;
    };
    let n = match bytes {
        true => c.size(v, "size"),
        false => c.u32(v, "count").map(u64::from),
    };
    let Some(n) = n else {
        return true;
    };
    match u32::try_from(n).ok().filter(|n| (lo..=hi).contains(n)) {
        Some(n) => *field = n,
        None => c.error(
            &v.pos,
            format!("`{}` {} is out of range", d.name, v.text),
            format!("expected {lo}..={hi}"),
        ),
    }
    true
}
