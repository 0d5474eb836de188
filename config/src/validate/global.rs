//! Top-level directives that set process-wide values: listeners, block
//! actions, global cache settings, logging, health monitors, byte ranges
//! and this project's extensions.

use crate::model::{
    AccessLogDestination, AccessLogFormat, BlockAction, CacheMode, ClientMem, Config, FailoverHttp,
    HealthCheck, KtlsMode, Listener, Method, PidFile, Proto, ResponseBody, StatusPattern,
};
use crate::tree::{Directive, Node};
use crate::validate::once::unique_args;
use crate::validate::values::Checker;

/// Handles `d` if it is one of this module's directives.
pub fn apply(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) -> bool {
    let name = d.name.as_str();
    match name {
        "listen" => listen(c, d, cfg),
        "block_action" => block_action(c, d, cfg),
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
        "access_log" => access_log(c, d, cfg),
        "access_log_file" => {
            if let Some(v) = c.single(d, "access_log_file PATH") {
                let p = c.path(v);
                cfg.access_log
                    .destinations
                    .push(AccessLogDestination::File(p));
            }
        }
        "access_log_format" => {
            if let Some(v) = c.single(d, "access_log_format tempesta|json") {
                match v.text.as_str() {
                    "tempesta" => cfg.access_log.format = AccessLogFormat::Tempesta,
                    "json" => cfg.access_log.format = AccessLogFormat::Json,
                    other => c.error(
                        &v.pos,
                        format!("unknown access log format `{other}`"),
                        "expected `tempesta` (Tempesta's line) or `json` (one object per line)",
                    ),
                }
            }
        }
        "pid" => {
            if let Some(v) = c.single(d, "pid PATH|off") {
                cfg.pid = if v.text == "off" {
                    PidFile::Off
                } else {
                    PidFile::Path(c.path(v))
                };
            }
        }
        "health_check" => health_check(c, d, cfg),
        "server_failover_http" => {
            if c.shape(d, 3, 3, "server_failover_http CODE COUNT SECONDS") {
                let code = c.u32_in(&d.args[0], "status code", 100, 599);
                let count = c.u32(&d.args[1], "response count");
                let tf = c.secs(&d.args[2], "time frame");
                if let (Some(code), Some(count), Some(timeframe)) = (code, count, tf) {
                    cfg.server_failover_http.push(FailoverHttp {
                        code: code as u16,
                        count,
                        timeframe,
                    });
                }
            }
        }
        "whitelist_mark" => {
            if c.shape(d, 1, usize::MAX, "whitelist_mark MARK...") {
                unique_args(c, d, &d.args, |v| v.text.parse::<u32>().ok(), false);
                for v in &d.args {
                    if let Some(m) = c.u32(v, "mark") {
                        if !cfg.whitelist_marks.contains(&m) {
                            cfg.whitelist_marks.push(m);
                        }
                    }
                }
            }
        }
        "response_body" => {
            if c.shape(d, 2, 2, "response_body CODE|4*|5* FILE") {
                match d.args[0].text.parse::<StatusPattern>() {
                    Ok(status) => {
                        let path = c.path(&d.args[1]);
                        cfg.response_bodies.push(ResponseBody { status, path });
                    }
                    Err(e) => c.error(
                        &d.args[0].pos,
                        format!("bad status `{}`", d.args[0].text),
                        e,
                    ),
                }
            }
        }
        "client_mem" => {
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
        "tls_match_any_server_name" => {
            if c.flag(d) {
                cfg.tls.match_any_server_name = true;
            }
        }
        "tls_ktls" => {
            if let Some(v) = c.single(d, "tls_ktls auto|on|user|off") {
                match v.text.as_str() {
                    "auto" => cfg.tls.ktls = KtlsMode::Auto,
                    "on" => cfg.tls.ktls = KtlsMode::On,
                    "user" => cfg.tls.ktls = KtlsMode::User,
                    "off" => cfg.tls.ktls = KtlsMode::Off,
                    _ => c.error(
                        &v.pos,
                        format!("`{}` is not a kTLS mode", v.text),
                        "expected auto, on, user or off",
                    ),
                }
            }
        }
        "worker_processes" | "worker_threads" => {
            if let Some(v) = c.single(d, &format!("{name} N")) {
                let auto = v.text == "auto";
                let n = if auto {
                    Some(0)
                } else {
                    c.u32_in(v, "count", 1, 1024)
                };
                match (name, n) {
                    ("worker_processes", Some(0)) => cfg.worker_processes = 1,
                    ("worker_processes", Some(n)) => cfg.worker_processes = n,
                    (_, Some(0)) => cfg.worker_threads = None,
                    (_, Some(n)) => cfg.worker_threads = Some(n),
                    _ => {}
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
        "stats_listen" => {
            if let Some(v) = c.single(d, "stats_listen ADDR:PORT") {
                if let Some(a) = c.socket_addr(v, 80) {
                    cfg.stats_listen = Some(a);
                }
            }
        }
        _ if name.starts_with("http_") && name.ends_with("_brange") => {
            return super::brange::apply(c, d, cfg)
        }
        _ => return false,
    }
    true
}

fn listen(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) {
    let usage = "listen PORT | IPADDR[:PORT] [proto=http|https|h2|\"h2,https\"|h2c]";
    if !(c.no_block(d) & c.attrs_only(d, &["proto"])) {
        return;
    }
    let [addr_v] = d.args.as_slice() else {
        c.error(&d.pos, "`listen` needs exactly one address", usage);
        return;
    };
    let Some(addr) = c.socket_addr(addr_v, 80) else {
        return;
    };
    let mut protos = Vec::new();
    if let Some(a) = c.attr(d, "proto") {
        for p in a.value.text.split(',').map(str::trim) {
            match p {
                "http" => protos.push(Proto::Http),
                "https" => protos.push(Proto::Https),
                "h2" => protos.push(Proto::H2),
                "h2c" => protos.push(Proto::H2c),
                _ => {
                    c.error(
                        &a.value.pos,
                        format!("unknown protocol `{p}`"),
                        "expected http, https, h2, \"h2,https\" or h2c",
                    );
                    return;
                }
            }
        }
    } else {
        protos.push(Proto::Http);
    }
    protos.sort();
    protos.dedup();
    if protos.contains(&Proto::H2c) && protos.len() > 1 {
        c.error(
            &d.pos,
            "`h2c` (cleartext HTTP/2) cannot share a listener with another protocol",
            "use a separate `listen` line for h2c",
        );
        return;
    }
    if protos.contains(&Proto::Http) && protos.len() > 1 {
        c.error(
            &d.pos,
            "a listener cannot be both plain `http` and TLS",
            "use separate `listen` lines for the plain and the TLS port",
        );
        return;
    }
    if cfg.listeners.iter().any(|l| l.addr == addr) {
        c.error(
            &addr_v.pos,
            format!("duplicate listener on {addr}"),
            "each address:port may be listened on once",
        );
        return;
    }
    cfg.listeners.push(Listener { addr, protos });
}

fn block_action(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) {
    let usage = "block_action error|attack drop|reply [nolog]";
    if !c.shape(d, 2, 3, usage) {
        return;
    }
    let reply = match d.args[1].text.as_str() {
        "reply" => true,
        "drop" => false,
        other => {
            c.error(
                &d.args[1].pos,
                format!("unknown block action `{other}`"),
                "expected `drop` or `reply`",
            );
            return;
        }
    };
    let log = match d.args.get(2).map(|v| (v, v.text.as_str())) {
        None => true,
        Some((_, "nolog")) => false,
        Some((v, other)) => {
            c.error(
                &v.pos,
                format!("unknown option `{other}`"),
                "the only option is `nolog`",
            );
            return;
        }
    };
    let action = BlockAction { reply, log };
    match d.args[0].text.as_str() {
        "error" => cfg.block_action.error = action,
        "attack" => cfg.block_action.attack = action,
        other => c.error(
            &d.args[0].pos,
            format!("unknown message type `{other}`"),
            "expected `error` or `attack`",
        ),
    }
}

fn access_log(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) {
    let usage = "access_log off|on|dmesg|mmap [logger_config=FILE]";
    if !(c.no_block(d) & c.attrs_only(d, &["logger_config"])) {
        return;
    }
    if d.args.is_empty() {
        c.error(&d.pos, "`access_log` needs a value", usage);
        return;
    }
    let mut dests = Vec::new();
    let mut off = false;
    for v in &d.args {
        match v.text.to_ascii_lowercase().as_str() {
            "off" => off = true,
            // 0.7 `access_log on` logged to the kernel log, like `dmesg`.
            "on" | "dmesg" => dests.push(AccessLogDestination::Dmesg),
            "mmap" => dests.push(AccessLogDestination::Mmap),
            other => {
                c.error(&v.pos, format!("unknown access_log value `{other}`"), usage);
                return;
            }
        }
    }
    if off && !dests.is_empty() {
        c.error(&d.pos, "`off` must be the only access_log value", usage);
        return;
    }
    if dests.contains(&AccessLogDestination::Mmap) {
        c.sink.warning(&d.pos, "access_log `mmap` (ClickHouse buffer) is not implemented; those entries are not written");
    }
    if let Some(a) = c.attr(d, "logger_config") {
        cfg.access_log.logger_config = Some(c.path(&a.value));
    }
    // Keep an extension file destination set by `access_log_file`.
    cfg.access_log
        .destinations
        .retain(|x| matches!(x, AccessLogDestination::File(_)));
    dests.dedup();
    cfg.access_log.destinations.extend(dests);
}

fn health_check(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) {
    let usage = "health_check NAME { request \"...\"; request_url \"/\"; resp_code 200; resp_crc32 0x...|auto; timeout N; }";
    c.attrs_only(d, &[]);
    let (Some(children), [name]) = (&d.children, d.args.as_slice()) else {
        c.error(&d.pos, "`health_check` needs a name and a block", usage);
        return;
    };
    if cfg.health_checks.iter().any(|h| h.name == name.text) {
        c.error(
            &name.pos,
            format!("duplicate health_check `{}`", name.text),
            "give each monitor a distinct name",
        );
        return;
    }
    let mut h = HealthCheck {
        name: name.text.clone(),
        ..HealthCheck::default()
    };
    let mut seen = crate::validate::once::Seen::default();
    for node in children {
        let Node::Directive(x) = node else {
            c.error(
                node.pos(),
                "http_chain rules are not allowed in `health_check`",
                usage,
            );
            continue;
        };
        if !seen.check(c, x, crate::directives::HEALTH_CHECK_LEVEL) {
            continue;
        }
        match x.name.as_str() {
            "request" => {
                if let Some(v) = c.single(x, "request \"GET / HTTP/1.0\\r\\n\\r\\n\"") {
                    h.request = v.text.clone();
                }
            }
            "request_url" => {
                if let Some(v) = c.single(x, "request_url \"/\"") {
                    h.request_url = v.text.clone();
                }
            }
            "resp_code" => {
                if c.shape(x, 1, usize::MAX, "resp_code CODE...") {
                    unique_args(c, x, &x.args, |v| v.text.parse::<u16>().ok(), false);
                    let mut codes: Vec<u16> = Vec::new();
                    for v in &x.args {
                        match c.u32_in(v, "status code", 100, 599) {
                            Some(n) if !codes.contains(&(n as u16)) => codes.push(n as u16),
                            _ => {}
                        }
                    }
                    h.resp_codes = codes;
                }
            }
            "resp_crc32" => {
                if let Some(v) = c.single(x, "resp_crc32 0xHEX|auto") {
                    if v.text.eq_ignore_ascii_case("auto") {
                        // Tempesta applies `auto` to its `auto` monitor only, and takes it
                        // silently elsewhere.
                        if h.name == "auto" {
                            h.resp_crc32_auto = true;
                        } else {
                            c.sink.warning(
                                &v.pos,
                                format!(
                                    "`resp_crc32 auto` has effect only in `health_check auto` \
                                     (as in Tempesta); `{}` checks no CRC32",
                                    h.name
                                ),
                            );
                        }
                        continue;
                    }
                    let t = v.text.trim_start_matches("0x").trim_start_matches("0X");
                    match u32::from_str_radix(t, 16) {
                        Ok(n) => h.resp_crc32 = Some(n),
                        Err(_) => c.error(
                            &v.pos,
                            format!("`{}` is not a CRC32", v.text),
                            "expected a hex number such as 0x3a1f9e22",
                        ),
                    }
                }
            }
            "timeout" => {
                if let Some(v) = c.single(x, "timeout SECONDS") {
                    if let Some(t) = c.secs(v, "timeout") {
                        h.timeout = t;
                    }
                }
            }
            _ => crate::validate::unknown_here(
                c,
                x,
                "health_check",
                crate::directives::HEALTH_CHECK_LEVEL,
            ),
        }
    }
    cfg.health_checks.push(h);
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
