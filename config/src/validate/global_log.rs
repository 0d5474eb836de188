//! Where the access log goes and in what form (`access_log`, `access_log_file`,
//! `access_log_format`), and the pid file.

use crate::model::{AccessLogDestination, AccessLogFormat, Config, PidFile};
use crate::tree::Directive;
use crate::validate::values::Checker;

/// Handles `d` if it is one of this module's directives.
pub fn apply(c: &mut Checker<'_>, d: &Directive, cfg: &mut Config) -> bool {
    let name = d.name.as_str();
    match name {
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
        _ => return false,
    }
    true
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
