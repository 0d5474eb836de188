//! Frang limits of the model (`frang_limits`). `None` means unlimited,
//! Tempesta's 0.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::Method;
use crate::model_serde::{limit, opt_secs, secs};

/// Client-level limits, allowed only in a top-level `frang_limits`.
/// `None` means unlimited (Tempesta's 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FrangGlobal {
    /// `ip_block off|on|SECONDS`: block the client IP after a violation.
    pub ip_block: IpBlock,
    #[serde(with = "limit")]
    pub request_rate: Option<u32>,
    /// `request_rate NUM [FRAME]`: the window of `request_rate` in seconds
    /// (1..=65535, default 1).
    #[serde(with = "secs")]
    pub request_rate_frame: Duration,
    #[serde(with = "limit")]
    pub request_burst: Option<u32>,
    #[serde(with = "limit")]
    pub tcp_connection_rate: Option<u32>,
    /// `tcp_connection_rate NUM [FRAME]`, as `request_rate_frame`.
    #[serde(with = "secs")]
    pub tcp_connection_rate_frame: Duration,
    #[serde(with = "limit")]
    pub tcp_connection_burst: Option<u32>,
    /// Default 1000.
    #[serde(with = "limit")]
    pub concurrent_tcp_connections: Option<u32>,
    #[serde(with = "limit")]
    pub tls_connection_rate: Option<u32>,
    #[serde(with = "limit")]
    pub tls_connection_burst: Option<u32>,
    #[serde(with = "limit")]
    pub tls_incomplete_connection_rate: Option<u32>,
    #[serde(with = "opt_secs")]
    pub client_header_timeout: Option<Duration>,
    #[serde(with = "opt_secs")]
    pub client_body_timeout: Option<Duration>,
    #[serde(with = "limit")]
    pub http_header_chunk_cnt: Option<u32>,
    #[serde(with = "limit")]
    pub http_body_chunk_cnt: Option<u32>,
    /// `http_hdr_len` (0.7: `http_field_len`): max length of one header.
    #[serde(with = "limit")]
    pub http_hdr_len: Option<u32>,
    /// Default 50.
    #[serde(with = "limit")]
    pub http_header_cnt: Option<u32>,
}

impl Default for FrangGlobal {
    fn default() -> Self {
        FrangGlobal {
            ip_block: IpBlock::Off,
            request_rate: None,
            request_rate_frame: Duration::from_secs(1),
            request_burst: None,
            tcp_connection_rate: None,
            tcp_connection_rate_frame: Duration::from_secs(1),
            tcp_connection_burst: None,
            concurrent_tcp_connections: Some(1000),
            tls_connection_rate: None,
            tls_connection_burst: None,
            tls_incomplete_connection_rate: None,
            client_header_timeout: None,
            client_body_timeout: None,
            http_header_chunk_cnt: None,
            http_body_chunk_cnt: None,
            http_hdr_len: None,
            http_header_cnt: Some(50),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IpBlock {
    /// Violations close the connection only.
    #[default]
    Off,
    /// Block the address until restart (`ip_block on` or `ip_block 0`).
    Forever,
    /// Block the address for this long.
    #[serde(with = "secs")]
    For(Duration),
}

/// Request-level limits: top level, `vhost` and `location`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FrangHttp {
    #[serde(with = "limit")]
    pub http_uri_len: Option<u32>,
    /// Default 1 GiB.
    #[serde(with = "limit")]
    pub http_body_len: Option<u64>,
    /// Default true. (0.7 `http_host_required` maps here.)
    pub http_strict_host_checking: bool,
    pub http_ct_required: bool,
    pub http_trailer_split_allowed: bool,
    pub http_method_override_allowed: bool,
    /// Allowed methods (default GET, POST, HEAD); empty means any.
    pub http_methods: Vec<Method>,
    /// `unknown` among `http_methods`: methods outside Tempesta's list (CONNECT, any other
    /// token) pass frang, as Tempesta's `_TFW_HTTP_METH_UNKNOWN` bit does.
    pub http_methods_unknown: bool,
    /// Allowed Content-Type prefixes for POST; empty means any.
    pub http_ct_vals: Vec<String>,
    pub http_resp_code_block: Option<RespCodeBlock>,
}

impl Default for FrangHttp {
    fn default() -> Self {
        FrangHttp {
            http_uri_len: None,
            http_body_len: Some(1 << 30),
            http_strict_host_checking: true,
            http_ct_required: false,
            http_trailer_split_allowed: false,
            http_method_override_allowed: false,
            http_methods: vec![Method::Get, Method::Post, Method::Head],
            http_methods_unknown: false,
            http_ct_vals: Vec::new(),
            http_resp_code_block: None,
        }
    }
}

/// `http_resp_code_block CODE... LIMIT TIMEFRAME`: block a client that got
/// more than `limit` responses with these codes within `timeframe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RespCodeBlock {
    pub codes: Vec<u16>,
    pub limit: u32,
    #[serde(with = "secs")]
    pub timeframe: Duration,
}
