//! Top-level directives that set process-wide values: listeners, block
//! actions, global cache settings, logging, health monitors, byte ranges
//! and this project's extensions.

use crate::model::{BlockAction, Config, KtlsMode, Listener, Proto, ResponseBody, StatusPattern};
use crate::tree::Directive;
use crate::validate::once::unique_args;
use crate::validate::values::Checker;
use crate::validate::{
    global_cache, global_h3, global_health, global_limits, global_log, resolver,
};

/// Handles `d` if it is one of this module's directives.
pub fn apply(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) -> bool {
    if global_cache::apply(c, d, cfg)
        || global_log::apply(c, d, cfg)
        || global_health::apply(c, d, cfg)
        || global_limits::apply(c, d, cfg)
        || global_h3::apply(c, d, cfg)
        || resolver::apply(c, d, cfg)
    {
        return true;
    }
    let name = d.name.as_str();
    match name {
        "listen" => listen(c, d, cfg),
        "block_action" => block_action(c, d, cfg),
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
        "response_body" => response_body(c, d, cfg),
        "tls_match_any_server_name" => {
            if c.flag(d) {
                cfg.tls.match_any_server_name = true;
            }
        }
        "h3_alt_svc" => h3_alt_svc(c, d, cfg),
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
        "worker_processes" | "worker_threads" => workers(c, d, cfg),
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
    let usage = "listen PORT | IPADDR[:PORT] [proto=http|https|h2|\"h2,https\"|h2c|h3|\"h2,h3\"]";
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
                "h3" => protos.push(Proto::H3),
                _ => {
                    c.error(
                        &a.value.pos,
                        format!("unknown protocol `{p}`"),
                        "expected http, https, h2, \"h2,https\", h2c, h3 or \"h2,h3\"",
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
    if protos.contains(&Proto::H3) && protos.iter().any(|p| matches!(p, Proto::Http | Proto::H2c)) {
        c.error(
            &d.pos,
            "`h3` (HTTP/3, always over TLS) cannot share a listener with cleartext `http` or `h2c`",
            "serve h3 alone (proto=h3) or beside https/h2 (proto=\"h2,h3\")",
        );
        return;
    }
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

/// `h3_alt_svc off | max_age=SECONDS` (an extension, as HTTP/3 is).
fn h3_alt_svc(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) {
    let usage = "h3_alt_svc off | max_age=SECONDS (0-2147483647)";
    if !(c.no_block(d) & c.attrs_only(d, &["max_age"])) {
        return;
    }
    match (d.args.as_slice(), c.attr(d, "max_age")) {
        ([off], None) if off.text == "off" => cfg.h3_alt_svc = None,
        ([], Some(a)) => {
            if let Some(n) = c.u32_in(&a.value, "max_age", 0, i32::MAX as u32) {
                cfg.h3_alt_svc = Some(n);
            }
        }
        _ => c.error(
            &d.pos,
            "`h3_alt_svc` takes `off` or `max_age=SECONDS`",
            usage,
        ),
    }
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

/// `worker_processes N|auto`, `worker_threads N|auto` (`auto`: one process, and the default
/// number of threads).
fn workers(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) {
    let name = d.name.as_str();
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

/// `response_body CODE|4*|5* FILE`: the page of the proxy's own answers with those statuses.
fn response_body(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) {
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
