//! `srv_group`, `server`, `sched` and the `server_*` group settings.
//! Settings given at top level configure the implicit `default` group and
//! are the defaults of explicit groups that do not set them (Tempesta does
//! this for `sched`; we do it for every group setting, order-independent).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::diag::Pos;
use crate::model::{
    parse_host_port, DynamicWeight, GroupSticky, Prediction, RatioMode, Scheduler, Server,
    ServerGroup, ServerName,
};
use crate::tree::Directive;
use crate::validate::once::Seen;
use crate::validate::values::{parse_socket_addr, Checker};

#[derive(Debug, Clone, Default)]
pub struct GroupDraft {
    pub name: String,
    pub pos: Option<Pos>,
    pub servers: Vec<Server>,
    pub sched: Option<Scheduler>,
    pub forward_retries: Option<u32>,
    pub forward_timeout: Option<Duration>,
    pub connect_retries: Option<u32>,
    pub queue_size: Option<u32>,
    pub retry_nonidempotent: Option<bool>,
    pub health: Option<(String, Pos)>,
    pub sticky: Option<GroupSticky>,
    /// `server_tls` and its options (`server_tls.rs`).
    pub tls: super::server_tls::TlsDraft,
    /// `server_proto` and where (`server_proto.rs`).
    pub proto: Option<(crate::model::ServerProto, Pos)>,
    /// Single-valued group settings seen so far.
    pub seen: Seen,
    /// Where each `resolve` flag is: each needs a `resolver` (checked once all is read).
    pub resolve_at: Vec<Pos>,
}

impl GroupDraft {
    /// The final group: own settings, else the top-level ones, else defaults.
    pub fn resolve(&self, top: &GroupDraft) -> ServerGroup {
        let d = ServerGroup::default();
        ServerGroup {
            name: self.name.clone(),
            servers: self.servers.clone(),
            sched: self.sched.or(top.sched).unwrap_or(d.sched),
            forward_retries: self
                .forward_retries
                .or(top.forward_retries)
                .unwrap_or(d.forward_retries),
            forward_timeout: self
                .forward_timeout
                .or(top.forward_timeout)
                .unwrap_or(d.forward_timeout),
            connect_retries: self
                .connect_retries
                .or(top.connect_retries)
                .unwrap_or(d.connect_retries),
            queue_size: self.queue_size.or(top.queue_size).unwrap_or(d.queue_size),
            retry_nonidempotent: self
                .retry_nonidempotent
                .or(top.retry_nonidempotent)
                .unwrap_or(false),
            health: self
                .health
                .as_ref()
                .or(top.health.as_ref())
                .map(|(n, _)| n.clone()),
            sticky: self.sticky.clone().or_else(|| top.sticky.clone()),
            tls: self.tls.resolve(&top.tls),
            proto: super::server_proto::resolve(&self.proto, &top.proto),
        }
    }
}

/// Handles a group-level directive (inside `srv_group`, or at top level for
/// the implicit group); false if `d` is not one.
pub fn apply(c: &mut Checker<'_>, d: &Directive, g: &mut GroupDraft) -> bool {
    let name = d.name.as_str();
    match name {
        "server" => server(c, d, g),
        "sched" => {
            if let Some(s) = sched(c, d) {
                g.sched = Some(s);
            }
        }
        "server_forward_retries" | "server_connect_retries" | "server_queue_size" => {
            if let Some(v) = c.single(d, &format!("{name} NUM")) {
                // Tempesta: retries fit 16 bits, the others a C `int`.
                let max = if name == "server_forward_retries" {
                    65535
                } else {
                    super::values::INT_MAX
                };
                if let Some(n) = c.u32_in(v, name, 0, max) {
                    let slot = match name {
                        "server_forward_retries" => &mut g.forward_retries,
                        "server_connect_retries" => &mut g.connect_retries,
                        _ => &mut g.queue_size,
                    };
                    *slot = Some(n);
                }
            }
        }
        "server_forward_timeout" => {
            if let Some(v) = c.single(d, "server_forward_timeout SECONDS") {
                if let Some(t) = c.secs(v, "timeout in seconds") {
                    g.forward_timeout = Some(t);
                }
            }
        }
        "server_retry_nonidempotent" => {
            if c.flag(d) {
                g.retry_nonidempotent = Some(true);
            }
        }
        "health" => {
            if let Some(v) = c.single(d, "health NAME") {
                g.health = Some((v.text.clone(), v.pos.clone()));
            }
        }
        "sticky_sessions" => {
            if let Some(s) = super::sticky::sessions(c, d) {
                g.sticky
                    .get_or_insert_with(GroupSticky::default)
                    .allow_failover = s.allow_failover;
            }
        }
        "learn" => {
            if let Some(name) = super::sticky::learn_name(c, d) {
                g.sticky.get_or_insert_with(GroupSticky::default).learn = Some(name);
            }
        }
        _ => {
            return super::server_tls::apply(c, d, &mut g.tls)
                || super::server_proto::apply(c, d, &mut g.proto)
        }
    }
    true
}

fn server(c: &mut Checker<'_>, d: &Directive, g: &mut GroupDraft) {
    let usage =
        "server IPADDR[:PORT]|NAME[:PORT] [conns_n=N] [weight=N] [backup] [resolve] [service=NAME]";
    if !(c.no_block(d) & c.attrs_only(d, &["conns_n", "weight", "service"])) {
        return;
    }
    let (addr_v, flags) = match d.args.split_first() {
        Some(x) => x,
        None => {
            c.error(&d.pos, "`server` needs an address", usage);
            return;
        }
    };
    let mut s = Server::default();
    let mut ok = true;
    let mut resolve = None;
    for f in flags {
        match f.text.as_str() {
            "backup" => s.backup = true,
            "resolve" => resolve = Some(f.pos.clone()),
            _ => {
                c.error(
                    &f.pos,
                    format!("unexpected `{}` in `server`", f.text),
                    usage,
                );
                ok = false;
            }
        }
    }
    match server_addr(c, addr_v) {
        Some(ServerAddr::Ip(a)) => {
            s.addr = a;
            for (what, pos) in [
                ("resolve", resolve.as_ref()),
                ("service=", c.attr(d, "service").map(|a| &a.value.pos)),
            ] {
                if let Some(pos) = pos {
                    c.error(
                        pos,
                        format!("`{what}` is for a server given by name; this one is an address"),
                        format!("remove `{what}`"),
                    );
                    ok = false;
                }
            }
        }
        Some(ServerAddr::Name(host, port)) => {
            s.addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
            match named(c, d, (addr_v, host, port), resolve.is_some()) {
                Some(name) => s.name = Some(name),
                None => ok = false,
            }
            g.resolve_at.extend(resolve);
        }
        None => ok = false,
    }
    if !(server_numbers(c, d, &mut s) && ok) {
        return;
    }
    let same = |x: &Server| match (&x.name, &s.name) {
        (Some(a), Some(b)) => a.host == b.host && a.port == b.port && a.service == b.service,
        (None, None) => x.addr == s.addr,
        _ => false,
    };
    if g.servers.iter().any(same) {
        let shown = s
            .name
            .as_ref()
            .map_or_else(|| s.addr.to_string(), |n| format!("{}:{}", n.host, n.port));
        c.error(
            &addr_v.pos,
            format!("server {shown} is listed twice in group `{}`", g.name),
            "remove the duplicate (use conns_n= for more connections)",
        );
        return;
    }
    g.servers.push(s);
}

/// The name of a `server NAME` line, with its `service=` (an SRV question, RFC 2782: the
/// ports come from the records, so none is written, and it is asked again: `resolve`).
fn named(
    c: &mut Checker<'_>,
    d: &Directive,
    (v, host, port): (&crate::tree::Value, String, u16),
    resolve: bool,
) -> Option<ServerName> {
    let service = match c.attr(d, "service") {
        None => None,
        Some(a) => {
            let text = a.value.text.as_str();
            let bytes_ok = text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            let shape_ok = (1..=15).contains(&text.len())
                && bytes_ok
                && text.bytes().any(|b| b.is_ascii_lowercase())
                && !text.starts_with('-')
                && !text.ends_with('-');
            if !shape_ok {
                c.error(
                    &a.value.pos,
                    format!("`{text}` is not a service name"),
                    "expected 1 to 15 lower-case letters, digits and hyphens, e.g. `service=http`",
                );
                return None;
            }
            if v.text.contains(':') {
                c.error(
                    &v.pos,
                    "a server with `service=` takes its ports from the SRV records",
                    "remove the port",
                );
                return None;
            }
            if !resolve {
                c.error(
                    &a.value.pos,
                    "`service=` needs `resolve`: SRV records are asked of the `resolver`",
                    "add `resolve`",
                );
                return None;
            }
            Some(text.to_string())
        }
    };
    Some(ServerName {
        host,
        port,
        resolve,
        service,
        at: format!("{}:{}:{}", d.pos.file, d.pos.line, d.pos.col),
    })
}

/// A `server` line's `conns_n=` and `weight=`; false if one is refused.
fn server_numbers(c: &mut Checker<'_>, d: &Directive, s: &mut Server) -> bool {
    let mut ok = true;
    if let Some(a) = c.attr(d, "conns_n") {
        match c.u32_in(&a.value, "conns_n", 1, 65535) {
            Some(n) => s.conns_n = n,
            None => ok = false,
        }
    }
    if let Some(a) = c.attr(d, "weight") {
        match c.u32_in(&a.value, "weight", 1, 100) {
            Some(n) => s.weight = n,
            None => ok = false,
        }
    }
    ok
}

/// What a `server` line names: an address, or (an extension) a DNS name and port.
enum ServerAddr {
    Ip(SocketAddr),
    Name(String, u16),
}

fn server_addr(c: &mut Checker<'_>, v: &crate::tree::Value) -> Option<ServerAddr> {
    if let Some(a) = parse_socket_addr(&v.text, 80) {
        // A bare number is a port for `listen`, but a server needs an address.
        if v.text.parse::<u16>().is_ok() {
            c.error(
                &v.pos,
                "`server` needs an IP address, not just a port",
                "write e.g. `127.0.0.1:8000`",
            );
            return None;
        }
        return Some(ServerAddr::Ip(a));
    }
    if let Some((host, port)) = parse_host_port(&v.text, 80) {
        return Some(ServerAddr::Name(host, port));
    }
    c.error(
        &v.pos,
        format!("`{}` is neither an address nor a host name", v.text),
        "expected IPv4[:PORT], [IPv6][:PORT] or NAME[:PORT] (letters, digits, hyphens and dots)",
    );
    None
}

fn weight_kind(c: &mut Checker<'_>, args: &[crate::tree::Value]) -> Option<DynamicWeight> {
    let Some(first) = args.first() else {
        return Some(DynamicWeight::Average);
    };
    let kind = match first.text.as_str() {
        "minimum" => DynamicWeight::Minimum,
        "maximum" => DynamicWeight::Maximum,
        "average" => DynamicWeight::Average,
        "percentile" => {
            let p = match args.get(1) {
                None => 90,
                Some(v) => match v.text.as_str() {
                    "50" | "75" | "90" | "95" | "99" => v.text.parse().unwrap_or(90),
                    _ => {
                        c.error(
                            &v.pos,
                            format!("unsupported percentile `{}`", v.text),
                            "expected 50, 75, 90, 95 or 99",
                        );
                        return None;
                    }
                },
            };
            if let Some(extra) = args.get(2) {
                c.error(
                    &extra.pos,
                    format!("unexpected `{}` in `sched`", extra.text),
                    "usage: `sched ratio dynamic percentile [N];`",
                );
                return None;
            }
            return Some(DynamicWeight::Percentile(p));
        }
        other => {
            c.error(
                &first.pos,
                format!("unknown weight type `{other}`"),
                "expected minimum, maximum, average or percentile [N]",
            );
            return None;
        }
    };
    if let Some(extra) = args.get(1) {
        c.error(
            &extra.pos,
            format!("unexpected `{}` in `sched`", extra.text),
            "usage: `sched ratio dynamic average;`",
        );
        return None;
    }
    Some(kind)
}

fn sched(c: &mut Checker<'_>, d: &Directive) -> Option<Scheduler> {
    let usage = "sched ratio [static|dynamic [TYPE]|predict [TYPE] [past=N] [rate=N] [ahead=N]] | sched hash";
    if !(c.no_block(d) & c.attrs_only(d, &["past", "rate", "ahead"])) {
        return None;
    }
    let Some(kind) = d.args.first() else {
        c.error(&d.pos, "`sched` needs a scheduler name", usage);
        return None;
    };
    let predict_attrs = !d.attrs.is_empty();
    match kind.text.as_str() {
        "hash" => {
            if let Some(extra) = d.args.get(1) {
                c.error(
                    &extra.pos,
                    "the hash scheduler takes no options",
                    "write `sched hash;`",
                );
                return None;
            }
            if predict_attrs {
                c.error(
                    &d.pos,
                    "past=, rate= and ahead= apply only to `sched ratio predict`",
                    usage,
                );
                return None;
            }
            Some(Scheduler::Hash)
        }
        "ratio" => {
            let mode = d.args.get(1).map(|v| (v, v.text.as_str()));
            let needs_predict = !matches!(mode, Some((_, "predict")));
            if predict_attrs && needs_predict {
                c.error(
                    &d.pos,
                    "past=, rate= and ahead= apply only to `sched ratio predict`",
                    usage,
                );
                return None;
            }
            let rest = d.args.get(2..).unwrap_or(&[]);
            let mode = match mode {
                None | Some((_, "static")) => {
                    if let Some(extra) = rest.first() {
                        c.error(
                            &extra.pos,
                            "static ratio takes no options",
                            "write `sched ratio static;`",
                        );
                        return None;
                    }
                    RatioMode::Static
                }
                Some((_, "dynamic")) => RatioMode::Dynamic(weight_kind(c, rest)?),
                Some((_, "predict")) => {
                    let weight = weight_kind(c, rest)?;
                    RatioMode::Predict(prediction(c, d, weight)?)
                }
                Some((v, other)) => {
                    c.error(
                        &v.pos,
                        format!("unknown ratio mode `{other}`"),
                        "expected static, dynamic or predict",
                    );
                    return None;
                }
            };
            Some(Scheduler::Ratio(mode))
        }
        other => {
            c.error(
                &kind.pos,
                format!("unknown scheduler `{other}`"),
                "expected `ratio` or `hash`",
            );
            None
        }
    }
}

fn prediction(c: &mut Checker<'_>, d: &Directive, weight: DynamicWeight) -> Option<Prediction> {
    let mut p = Prediction {
        weight,
        past: Duration::from_secs(30),
        rate: 20,
        ahead: Duration::from_secs(15),
    };
    if let Some(a) = c.attr(d, "past") {
        p.past = Duration::from_secs(u64::from(c.u32_in(&a.value, "past", 1, 3600)?));
    }
    if let Some(a) = c.attr(d, "rate") {
        p.rate = c.u32_in(&a.value, "rate", 1, 1000)?;
    }
    if let Some(a) = c.attr(d, "ahead") {
        p.ahead = Duration::from_secs(u64::from(c.u32_in(&a.value, "ahead", 1, 1800)?));
        if p.ahead > p.past / 2 {
            c.error(
                &a.value.pos,
                "`ahead` can't be more than half of `past`",
                format!("use ahead={} or less", p.past.as_secs() / 2),
            );
            return None;
        }
    }
    Some(p)
}
