//! `frang_limits { ... }`: every limit current Tempesta documents, with the
//! 0.7 spellings as aliases. A limit of 0 means "unlimited" (`None`).

use crate::diag::did_you_mean;
use crate::directives::{FRANG_GLOBAL, FRANG_HTTP};
use crate::model::{FrangGlobal, FrangHttp, IpBlock, Method, RespCodeBlock};
use crate::tree::{Directive, Node};
use crate::validate::once::{unique_args, Seen};
use crate::validate::values::Checker;

/// Tempesta 0.7 spellings name the same limit as the current ones.
fn canonical(name: &str) -> &str {
    match name {
        "connection_rate" => "tcp_connection_rate",
        "connection_burst" => "tcp_connection_burst",
        "concurrent_connections" => "concurrent_tcp_connections",
        "http_field_len" => "http_hdr_len",
        "http_host_required" => "http_strict_host_checking",
        other => other,
    }
}

/// Applies a `frang_limits` block. `global` is `Some` only at top level;
/// client-level limits elsewhere are errors, as in Tempesta.
pub fn apply(
    c: &mut Checker<'_>,
    block: &Directive,
    mut global: Option<&mut FrangGlobal>,
    http: &mut FrangHttp,
) {
    if !block.args.is_empty() || !block.attrs.is_empty() {
        c.error(
            &block.pos,
            "`frang_limits` takes no arguments",
            "write `frang_limits { ... }`",
        );
    }
    let Some(children) = &block.children else {
        c.error(
            &block.pos,
            "`frang_limits` needs a block",
            "write `frang_limits { http_uri_len 1024; ... }`",
        );
        return;
    };
    let mut seen = Seen::default();
    for node in children {
        let d = match node {
            Node::Directive(d) => d,
            Node::Rule(r) => {
                c.error(
                    &r.pos,
                    "http_chain rules are not allowed in `frang_limits`",
                    "move the rule into an `http_chain` block",
                );
                continue;
            }
        };
        let name = d.name.as_str();
        let known = FRANG_GLOBAL.contains(&name) || FRANG_HTTP.contains(&name);
        if known && !seen.first(c, d, canonical(name)) {
            continue;
        }
        if FRANG_GLOBAL.contains(&name) {
            match global.as_deref_mut() {
                Some(g) => apply_global(c, d, g),
                None => c.error(
                    &d.pos,
                    format!("`{name}` can be used only in a top-level `frang_limits`"),
                    "it limits a client as a whole; move it to a `frang_limits` block outside any vhost",
                ),
            }
        } else if FRANG_HTTP.contains(&name) {
            apply_http(c, d, http);
        } else {
            let mut err =
                crate::diag::Diagnostic::error(&d.pos, format!("unknown frang limit `{name}`"));
            if let Some(s) = did_you_mean(name, FRANG_GLOBAL.iter().chain(FRANG_HTTP).copied()) {
                err = err.with_hint(format!("did you mean `{s}`?"));
            }
            c.sink.push(err);
        }
    }
}

fn apply_global(c: &mut Checker<'_>, d: &Directive, g: &mut FrangGlobal) {
    let name = d.name.as_str();
    let usage = format!("{name} NUM");
    if name == "ip_block" {
        if let Some(v) = c.single(d, "ip_block off|on|SECONDS") {
            g.ip_block = match v.text.to_ascii_lowercase().as_str() {
                "off" | "false" => IpBlock::Off,
                "on" | "true" => IpBlock::Forever,
                _ => match c.u32(v, "ip_block duration").map(u64::from) {
                    Some(0) => IpBlock::Forever,
                    Some(n) => IpBlock::For(std::time::Duration::from_secs(n)),
                    None => return,
                },
            };
        }
        return;
    }
    let is_rate = matches!(
        name,
        "request_rate" | "tcp_connection_rate" | "connection_rate"
    );
    let v = if is_rate {
        rate_args(c, d, g)
    } else {
        c.single(d, &usage)
    };
    let Some(v) = v else { return };
    if matches!(name, "client_header_timeout" | "client_body_timeout") {
        let Some(t) = c.secs(v, "timeout in seconds") else {
            return;
        };
        let t = (!t.is_zero()).then_some(t);
        if name == "client_header_timeout" {
            g.client_header_timeout = t;
        } else {
            g.client_body_timeout = t;
        }
        return;
    }
    let Some(n) = c.limit(v, "limit") else { return };
    let slot = match name {
        "request_rate" => &mut g.request_rate,
        "request_burst" => &mut g.request_burst,
        "tcp_connection_rate" | "connection_rate" => &mut g.tcp_connection_rate,
        "tcp_connection_burst" | "connection_burst" => &mut g.tcp_connection_burst,
        "concurrent_tcp_connections" | "concurrent_connections" => {
            &mut g.concurrent_tcp_connections
        }
        "tls_connection_rate" => &mut g.tls_connection_rate,
        "tls_connection_burst" => &mut g.tls_connection_burst,
        "tls_incomplete_connection_rate" => &mut g.tls_incomplete_connection_rate,
        "http_header_chunk_cnt" => &mut g.http_header_chunk_cnt,
        "http_body_chunk_cnt" => &mut g.http_body_chunk_cnt,
        "http_hdr_len" | "http_field_len" => &mut g.http_hdr_len,
        _ => &mut g.http_header_cnt,
    };
    *slot = n;
}

/// `request_rate N [FRAME]`, `tcp_connection_rate N [FRAME]`: Tempesta
/// accepts a time frame of 1..65535 seconds. Stores the frame and returns
/// the rate's value.
fn rate_args<'d>(
    c: &mut Checker<'_>,
    d: &'d Directive,
    g: &mut FrangGlobal,
) -> Option<&'d crate::tree::Value> {
    let usage = format!("{} NUM [SECONDS]", d.name);
    if !c.shape(d, 1, 2, &usage) {
        return None;
    }
    if let Some(frame) = d.args.get(1) {
        let secs = c.u32_in(frame, "time frame", 1, 65535)?;
        let slot = if d.name == "request_rate" {
            &mut g.request_rate_frame
        } else {
            &mut g.tcp_connection_rate_frame
        };
        *slot = std::time::Duration::from_secs(u64::from(secs));
    }
    d.args.first()
}

/// `http_methods METHOD... [unknown]`: the methods a request may have (`unknown`: every
/// method outside Tempesta's list).
fn http_methods(c: &mut Checker<'_>, d: &Directive, h: &mut FrangHttp) {
    if !c.shape(d, 1, usize::MAX, "http_methods METHOD...") {
        return;
    }
    unique_args(c, d, &d.args, |v| Method::parse(&v.text), false);
    let mut methods = Vec::new();
    h.http_methods_unknown = false;
    for v in &d.args {
        if v.text.eq_ignore_ascii_case("unknown") {
            h.http_methods_unknown = true;
            continue;
        }
        match Method::parse(&v.text) {
            Some(m) => {
                if !methods.contains(&m) {
                    methods.push(m);
                }
            }
            None => c.error(
                &v.pos,
                format!("unknown HTTP method `{}`", v.text),
                format!(
                    "expected one of {}",
                    Method::ALL
                        .iter()
                        .map(|m| m.as_str())
                        .chain(["unknown"])
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            ),
        }
    }
    h.http_methods = methods;
}

fn apply_http(c: &mut Checker<'_>, d: &Directive, h: &mut FrangHttp) {
    let name = d.name.as_str();
    match name {
        "http_uri_len" => {
            if let Some(v) = c.single(d, "http_uri_len NUM") {
                if let Some(n) = c.limit(v, "length") {
                    h.http_uri_len = n;
                }
            }
        }
        "http_body_len" => {
            if let Some(v) = c.single(d, "http_body_len NUM") {
                // A C `long` in Tempesta.
                if let Some(n) = c.u64(v, "length") {
                    if n > i64::MAX as u64 {
                        c.error(
                            &v.pos,
                            format!("length {n} is out of range"),
                            "expected 0..=9223372036854775807",
                        );
                    } else {
                        h.http_body_len = (n != 0).then_some(n);
                    }
                }
            }
        }
        "http_strict_host_checking"
        | "http_host_required"
        | "http_ct_required"
        | "http_trailer_split_allowed"
        | "http_method_override_allowed" => {
            // A bare name means "true", as Tempesta's boolean directives allow.
            if !c.shape(d, 0, 1, &format!("{name} true|false")) {
                return;
            }
            let value = match d.args.first() {
                Some(v) => match c.bool(v) {
                    Some(b) => b,
                    None => return,
                },
                None => true,
            };
            match name {
                "http_strict_host_checking" | "http_host_required" => {
                    h.http_strict_host_checking = value
                }
                "http_ct_required" => h.http_ct_required = value,
                "http_trailer_split_allowed" => h.http_trailer_split_allowed = value,
                _ => h.http_method_override_allowed = value,
            }
        }
        "http_methods" => http_methods(c, d, h),
        "http_ct_vals" => {
            if c.shape(d, 1, usize::MAX, "http_ct_vals \"TYPE\"...") {
                h.http_ct_vals = d.args.iter().map(|v| v.text.clone()).collect();
            }
        }
        _ => resp_code_block(c, d, h),
    }
}

/// `http_resp_code_block CODE... LIMIT TIMEFRAME`.
fn resp_code_block(c: &mut Checker<'_>, d: &Directive, h: &mut FrangHttp) {
    let usage = "http_resp_code_block CODE... LIMIT SECONDS";
    if !c.shape(d, 3, usize::MAX, usage) {
        return;
    }
    let n = d.args.len();
    let mut codes = Vec::new();
    let mut ok = true;
    unique_args(
        c,
        d,
        &d.args[..n - 2],
        |v| v.text.parse::<u16>().ok(),
        false,
    );
    for v in &d.args[..n - 2] {
        match c.u32_in(v, "status code", 100, 599) {
            Some(code) if !codes.contains(&(code as u16)) => codes.push(code as u16),
            Some(_) => {}
            None => ok = false,
        }
    }
    // Tempesta keeps both in 16 bits and refuses 0.
    let limit = c.u32_in(&d.args[n - 2], "response limit", 1, 65535);
    let timeframe = c.u32_in(&d.args[n - 1], "time frame in seconds", 1, 65535);
    if let (true, Some(limit), Some(timeframe)) = (ok, limit, timeframe) {
        h.http_resp_code_block = Some(RespCodeBlock {
            codes,
            limit,
            timeframe: std::time::Duration::from_secs(u64::from(timeframe)),
        });
    }
}
