//! Tempesta refuses a second occurrence of most directives within one block
//! ("duplicate entry: only one such entry is allowed"): only a few are
//! repeatable (`listen`, `server`, `block_action`, header rules, cache
//! rules, `location`...). This module knows which directives are
//! single-valued in which block and reports the second occurrence, and the
//! duplicate members of list arguments.

use std::collections::HashMap;

use crate::diag::Pos;
use crate::tree::{Directive, Value};
use crate::validate::values::Checker;

/// Single-valued directives of a `vhost` block.
pub const VHOST: &[&str] = &[
    "proxy_pass",
    "cache_use_stale",
    "cache_purge",
    "cache_purge_acl",
    "http_post_validate",
    "tls_tickets",
    "sticky",
];

/// Single-valued directives of a `location` block.
pub const LOCATION: &[&str] = &[
    "proxy_pass",
    "cache_use_stale",
    "http_post_validate",
    "frang_limits",
];

/// Single-valued directives of a `srv_group` block (and of the implicit
/// group's settings at top level).
pub const GROUP: &[&str] = &[
    "sched",
    "server_queue_size",
    "server_forward_timeout",
    "server_forward_retries",
    "server_retry_nonidempotent",
    "server_connect_retries",
    "server_tls",
    "server_tls_ca",
    "server_tls_verify",
    "server_tls_sni",
    "server_tls_cert",
    "server_proto",
    "health",
    "sticky_sessions",
    "learn",
];

/// Single-valued directives at top level.
pub const TOP: &[&str] = &[
    "client_lru_size",
    "cache",
    "cache_size",
    "cache_ttl",
    "cache_heuristic",
    "cache_targeted_fields",
    "cache_methods",
    "cache_max_object_size",
    "cache_use_stale",
    "cache_purge",
    "cache_purge_acl",
    "keepalive_timeout",
    "max_concurrent_streams",
    "tls_match_any_server_name",
    "h3_alt_svc",
    "h3_max_handshakes",
    "h3_retry_above",
    "h3_stream_window",
    "h3_connection_window",
    "h3_send_window",
    "h3_crypto_buffer",
    "h3_qpack_table",
    "h3_qpack_blocked_streams",
    "tls_ktls",
    "tls_tickets",
    "worker_processes",
    "worker_threads",
    "stats_listen",
    "pid",
    "cluster",
    "acme",
    "tft",
    "tfh",
    "tf_blocklist",
    "access_log_format",
    "client_mem",
    "hdr_via",
    "http_post_validate",
    "whitelist_mark",
    "http_max_header_list_size",
    "ctrl_frame_rate_multiplier",
    "window_update_frame_rate_multiplier",
    "h2_stall_timeout",
    "http_allow_empty_body_content_type",
    "grace_shutdown_time",
    "client_ws_timeout",
    "resolver",
    "http_uri_brange",
    "http_token_brange",
    "http_qetoken_brange",
    "http_nctl_brange",
    "http_ctext_vchar_brange",
    "http_xff_brange",
    "http_user_agent_brange",
    "http_cookie_brange",
    "http_etag_brange",
];

/// Where each single-valued directive of one block was first seen.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    first: HashMap<String, Pos>,
}

impl Seen {
    /// Records `d` under `key` (a directive name, or the canonical name of
    /// an alias). Returns false, after reporting, when it was already set in
    /// this block.
    pub fn first(&mut self, c: &mut Checker<'_>, d: &Directive, key: &str) -> bool {
        if let Some(first) = self.first.get(key) {
            let also = if key == d.name {
                String::new()
            } else {
                format!(" (`{key}`)")
            };
            c.error(
                &d.pos,
                format!("duplicate `{}`{also}", d.name),
                format!(
                    "Tempesta allows it once per block; it was already set on line {}, keep one",
                    first.line
                ),
            );
            return false;
        }
        self.first.insert(key.to_string(), d.pos.clone());
        true
    }

    /// `first` for directives listed in `single`; others always pass.
    pub fn check(&mut self, c: &mut Checker<'_>, d: &Directive, single: &[&str]) -> bool {
        if single.contains(&d.name.as_str()) {
            self.first(c, d, &d.name)
        } else {
            true
        }
    }
}

/// Reports every argument whose `key` repeats an earlier one: as an error
/// when Tempesta refuses the directive, else as a warning (the repeat is
/// dropped). Returns false if an error was reported.
pub fn unique_args<K: PartialEq>(
    c: &mut Checker<'_>,
    d: &Directive,
    args: &[Value],
    key: impl Fn(&Value) -> Option<K>,
    refuse: bool,
) -> bool {
    let mut keys: Vec<K> = Vec::new();
    let mut ok = true;
    for v in args {
        let Some(k) = key(v) else { continue };
        if keys.contains(&k) {
            let msg = format!("`{}` is listed twice in `{}`", v.text, d.name);
            if refuse {
                c.error(&v.pos, msg, "remove the repeated entry");
                ok = false;
            } else {
                c.sink
                    .warning(&v.pos, format!("{msg}; the repeat is ignored"));
            }
        } else {
            keys.push(k);
        }
    }
    ok
}
