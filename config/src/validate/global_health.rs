//! Health monitors (`health_check` blocks) and `server_failover_http`.

use crate::model::{Config, FailoverHttp, HealthCheck};
use crate::tree::{Directive, Node};
use crate::validate::once::unique_args;
use crate::validate::values::Checker;

/// Handles `d` if it is one of this module's directives.
pub fn apply(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) -> bool {
    let name = d.name.as_str();
    match name {
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
        _ => return false,
    }
    true
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
            "resp_code" => resp_codes(c, x, &mut h),
            "resp_crc32" => resp_crc32(c, x, &mut h),
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

/// `resp_code CODE...`: the statuses a healthy answer may have (repeats refused as Tempesta
/// refuses them).
fn resp_codes(c: &mut Checker<'_>, x: &Directive, h: &mut HealthCheck) {
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

/// `resp_crc32 0xHEX|auto`: the body's CRC32, or learned from the first body (`auto`, in the
/// `auto` monitor only).
fn resp_crc32(c: &mut Checker<'_>, x: &Directive, h: &mut HealthCheck) {
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
            return;
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
