//! Per-connection and per-client bounds set at top level: keep-alive and stream limits,
//! HTTP/2 frame-rate multipliers and stall timeout, `client_mem`, the client table's size,
//! grace and WebSocket timeouts.

use crate::model::{ClientMem, Config};
use crate::tree::Directive;
use crate::validate::values::Checker;

/// Handles `d` if it is one of this module's directives.
pub fn apply(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) -> bool {
    let name = d.name.as_str();
    match name {
        "keepalive_timeout" => {
            if let Some(v) = c.single(d, "keepalive_timeout SECONDS") {
                if let Some(t) = c.secs(v, "timeout in seconds") {
                    cfg.keepalive_timeout = t;
                }
            }
        }
        "max_concurrent_streams" => {
            if let Some(v) = c.single(d, "max_concurrent_streams NUM") {
                if let Some(n) = c.u32_in(v, "stream count", 1, 65536) {
                    cfg.max_concurrent_streams = n;
                }
            }
        }
        "client_mem" => client_mem(c, d, cfg),
        "http_max_header_list_size" => {
            if let Some(v) = c.single(d, "http_max_header_list_size BYTES") {
                if let Some(n) = c.u32(v, "size") {
                    cfg.http_max_header_list_size = (n != 0).then_some(n);
                }
            }
        }
        "ctrl_frame_rate_multiplier" | "window_update_frame_rate_multiplier" => {
            let usage = format!("{name} N (1-65536)");
            if let Some(v) = c.single(d, &usage) {
                if let Some(n) = c.u32_in(v, "multiplier", 1, 65_536) {
                    if name == "ctrl_frame_rate_multiplier" {
                        cfg.ctrl_frame_rate_multiplier = n;
                    } else {
                        cfg.window_update_frame_rate_multiplier = n;
                    }
                }
            }
        }
        "h2_stall_timeout" => {
            if let Some(v) = c.single(d, "h2_stall_timeout SECONDS (1-86400)") {
                if let Some(n) = c.u32_in(v, "timeout in seconds", 1, 86_400) {
                    cfg.h2_stall_timeout = std::time::Duration::from_secs(u64::from(n));
                }
            }
        }
        "http_allow_empty_body_content_type" => {
            if let Some(v) = c.single(d, "http_allow_empty_body_content_type true|false") {
                if let Some(b) = c.bool(v) {
                    cfg.http_allow_empty_body_content_type = b;
                }
            }
        }
        "client_lru_size" => {
            if let Some(v) = c.single(d, "client_lru_size N") {
                if let Some(n) = c.u32_in(v, "client count", 1, 100_000_000) {
                    cfg.client_lru_size = n;
                }
            }
        }
        "grace_shutdown_time" => {
            if let Some(v) = c.single(d, "grace_shutdown_time SECONDS") {
                if let Some(t) = c.secs(v, "grace time") {
                    cfg.grace_shutdown_time = t;
                }
            }
        }
        "client_ws_timeout" => {
            if let Some(v) = c.single(d, "client_ws_timeout SECONDS") {
                if let Some(t) = c.secs(v, "timeout in seconds") {
                    cfg.client_ws_timeout = (!t.is_zero()).then_some(t);
                }
            }
        }
        _ => return false,
    }
    true
}

/// `client_mem SOFT [HARD]`: the memory one client's connections may hold (HARD twice SOFT
/// by default; Tempesta takes 1K..100G, whole kilobytes).
fn client_mem(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) {
    if c.shape(d, 1, 2, "client_mem SOFT [HARD]") {
        // Tempesta: 1K..100G each, in whole kilobytes.
        let soft = c.mem_in(&d.args[0], "client_mem", 1 << 10, 100 << 30, 1 << 10);
        let hard = match d.args.get(1) {
            Some(v) => c.mem_in(v, "client_mem", 1 << 10, 100 << 30, 1 << 10),
            None => soft.map(|s| s.saturating_mul(2)),
        };
        if let (Some(soft), Some(hard)) = (soft, hard) {
            if hard < soft {
                c.error(
                    &d.pos,
                    "the hard client_mem limit is below the soft one",
                    "give SOFT first, then a larger HARD",
                );
            } else {
                cfg.client_mem = Some(ClientMem { soft, hard });
            }
        }
    }
}
