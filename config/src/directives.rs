//! Which directive names exist, where, and which ones are accepted but not
//! implemented. Used for dispatch checks, warnings and "did you mean" hints.

/// Directives of current Tempesta FW that this project parses and ignores,
/// with a warning naming them (their blocks are skipped unread).
pub const UNSUPPORTED: &[&str] = &[
    // Tempesta DB files and tables: this proxy keeps everything in memory.
    "cache_db",
    "client_db",
    "client_tbl_size",
    "filter_db",
    "filter_tbl_size",
    "drop_tbl_size",
    "sessions_db",
    "sessions_tbl_size",
    // Fingerprinting under its old names (Tempesta master knows only `tft`, `tfh`),
    // HTTP/2 tuning, stats.
    "ja5t",
    "ja5h",
    "mmap_log_buffer_size",
    "health_stat",
    "health_stat_server",
];

/// Directives that only this project has.
pub const EXTENSIONS: &[&str] = &[
    "worker_processes",
    "worker_threads",
    "stats_listen",
    "tls_ktls",
    "cache_max_object_size",
    "cache_heuristic",
    "cache_targeted_fields",
    "access_log_file",
    "access_log_format",
    "pid",
    "cluster",
    "acme",
    "tf_blocklist",
    "resolver",
    "server_tls",
    "server_tls_ca",
    "server_tls_verify",
    "server_tls_sni",
    "server_tls_cert",
    "server_proto",
    "h3_alt_svc",
    "h3_max_handshakes",
    "h3_retry_above",
    "h3_stream_window",
    "h3_connection_window",
    "h3_send_window",
    "h3_crypto_buffer",
    "h3_qpack_table",
    "h3_qpack_blocked_streams",
];

/// Directives allowed at top level only (besides the vhost-level ones,
/// which at top level configure the `default` vhost).
pub const TOP_LEVEL: &[&str] = &[
    "client_lru_size",
    "tft",
    "tfh",
    "listen",
    "srv_group",
    "server",
    "sched",
    "server_forward_retries",
    "server_forward_timeout",
    "server_connect_retries",
    "server_queue_size",
    "server_retry_nonidempotent",
    "server_tls",
    "server_tls_ca",
    "server_tls_verify",
    "server_tls_sni",
    "server_tls_cert",
    "server_proto",
    "health",
    "vhost",
    "http_chain",
    "block_action",
    "cache",
    "cache_methods",
    "cache_size",
    "cache_ttl",
    "cache_heuristic",
    "cache_targeted_fields",
    "keepalive_timeout",
    "max_concurrent_streams",
    "access_log",
    "health_check",
    "server_failover_http",
    "http_uri_brange",
    "http_token_brange",
    "http_qetoken_brange",
    "http_nctl_brange",
    "http_ctext_vchar_brange",
    "http_xff_brange",
    "http_user_agent_brange",
    "http_cookie_brange",
    "http_etag_brange",
    "whitelist_mark",
    "response_body",
    "client_mem",
    "http_max_header_list_size",
    "ctrl_frame_rate_multiplier",
    "window_update_frame_rate_multiplier",
    "h2_stall_timeout",
    "http_allow_empty_body_content_type",
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
    "grace_shutdown_time",
    "client_ws_timeout",
    "resolver",
];

/// Directives of a `vhost` block (and of the implicit default vhost).
pub const VHOST_LEVEL: &[&str] = &[
    "proxy_pass",
    "location",
    "tls_certificate",
    "tls_certificate_key",
    "tls_tickets",
    "req_hdr_set",
    "req_hdr_add",
    "resp_hdr_set",
    "resp_hdr_add",
    "cache_fulfill",
    "cache_bypass",
    "cache_control_ignore",
    "cache_use_stale",
    "cache_resp_hdr_del",
    "cache_purge",
    "cache_purge_acl",
    "frang_limits",
    "hdr_via",
    "nonidempotent",
    "http_post_validate",
    "sticky",
];

/// Directives of a `location` block.
pub const LOCATION_LEVEL: &[&str] = &[
    "proxy_pass",
    "req_hdr_set",
    "req_hdr_add",
    "resp_hdr_set",
    "resp_hdr_add",
    "cache_fulfill",
    "cache_bypass",
    "cache_control_ignore",
    "cache_use_stale",
    "cache_resp_hdr_del",
    "frang_limits",
    "nonidempotent",
    "http_post_validate",
];

/// Directives of a `srv_group` block.
pub const SRV_GROUP_LEVEL: &[&str] = &[
    "server",
    "sched",
    "server_forward_retries",
    "server_forward_timeout",
    "server_connect_retries",
    "server_queue_size",
    "server_retry_nonidempotent",
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

/// Directives of a `sticky` block (top level or vhost).
pub const STICKY_LEVEL: &[&str] = &[
    "cookie",
    "cookie_options",
    "learn",
    "secret",
    "sess_lifetime",
    "sticky_sessions",
    "js_challenge",
];

/// Client-level frang limits: top-level `frang_limits` only.
pub const FRANG_GLOBAL: &[&str] = &[
    "ip_block",
    "request_rate",
    "request_burst",
    "tcp_connection_rate",
    "tcp_connection_burst",
    "concurrent_tcp_connections",
    "tls_connection_rate",
    "tls_connection_burst",
    "tls_incomplete_connection_rate",
    "client_header_timeout",
    "client_body_timeout",
    "http_header_chunk_cnt",
    "http_body_chunk_cnt",
    "http_hdr_len",
    "http_header_cnt",
    // Tempesta 0.7 spellings.
    "connection_rate",
    "connection_burst",
    "concurrent_connections",
    "http_field_len",
];

/// Request-level frang limits: any `frang_limits`.
pub const FRANG_HTTP: &[&str] = &[
    "http_uri_len",
    "http_body_len",
    "http_strict_host_checking",
    "http_ct_required",
    "http_trailer_split_allowed",
    "http_method_override_allowed",
    "http_methods",
    "http_ct_vals",
    "http_resp_code_block",
    // Tempesta 0.7 spelling of http_strict_host_checking.
    "http_host_required",
];

/// Directives of the `acme` block (an extension).
pub const ACME_LEVEL: &[&str] = &["directory", "contact", "state_dir", "ca_root", "challenges"];

/// Directives of the `tft` and `tfh` blocks.
pub const FINGERPRINT_LEVEL: &[&str] = &["hash"];

/// Directives of the `cluster` block (an extension).
pub const CLUSTER_LEVEL: &[&str] = &[
    "redis",
    "sync_interval",
    "on_redis_failure",
    "peer",
    "self",
    "peer_timeout",
];

pub const HEALTH_CHECK_LEVEL: &[&str] = &[
    "request",
    "request_url",
    "resp_code",
    "resp_crc32",
    "timeout",
];

/// Every name that is a directive somewhere (for hints and the reference
/// coverage test).
pub fn all_known() -> impl Iterator<Item = &'static str> {
    TOP_LEVEL
        .iter()
        .chain(VHOST_LEVEL)
        .chain(LOCATION_LEVEL)
        .chain(SRV_GROUP_LEVEL)
        .chain(FRANG_GLOBAL)
        .chain(FRANG_HTTP)
        .chain(HEALTH_CHECK_LEVEL)
        .chain(STICKY_LEVEL)
        .chain(CLUSTER_LEVEL)
        .chain(FINGERPRINT_LEVEL)
        .chain(ACME_LEVEL)
        .chain(EXTENSIONS)
        .chain(UNSUPPORTED)
        .copied()
}

/// True when `name` is a directive this crate knows in any context
/// (implemented, extension, or accepted with a warning).
pub fn is_known(name: &str) -> bool {
    all_known().any(|n| n == name)
}
