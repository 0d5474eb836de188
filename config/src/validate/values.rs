//! Checking the shape of a directive (argument count, attributes, block or
//! not) and converting argument text into typed values. Every failure is
//! reported to the sink with what was expected; callers get `None` and go
//! on, so all problems of a file come out in one run.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::diag::{Pos, Sink};
use crate::tree::{Attr, Directive, Value};

pub struct Checker<'a> {
    pub sink: &'a mut Sink,
    pub base_dir: &'a Path,
}

impl Checker<'_> {
    pub fn error(&mut self, pos: &Pos, msg: impl Into<String>, hint: impl Into<String>) {
        self.sink.error_hint(pos, msg, hint);
    }

    /// Refuses a `{ ... }` body on a plain directive.
    pub fn no_block(&mut self, d: &Directive) -> bool {
        if d.children.is_some() {
            self.error(
                &d.pos,
                format!("`{}` does not take a block", d.name),
                format!("write `{} ...;` without braces", d.name),
            );
            return false;
        }
        true
    }

    /// Refuses `key=value` attributes except the `allowed` keys.
    pub fn attrs_only(&mut self, d: &Directive, allowed: &[&str]) -> bool {
        let mut ok = true;
        for a in &d.attrs {
            if !allowed.contains(&a.key.as_str()) {
                let hint = if allowed.is_empty() {
                    format!("`{}` takes no key=value options", d.name)
                } else {
                    format!(
                        "allowed: {}",
                        allowed
                            .iter()
                            .map(|k| format!("`{k}=`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                self.error(
                    &a.pos,
                    format!("unknown option `{}=` for `{}`", a.key, d.name),
                    hint,
                );
                ok = false;
            }
        }
        ok
    }

    /// A plain directive with between `min` and `max` arguments and no
    /// attributes. `usage` is shown in the hint.
    pub fn shape(&mut self, d: &Directive, min: usize, max: usize, usage: &str) -> bool {
        let mut ok = self.no_block(d) & self.attrs_only(d, &[]);
        let n = d.args.len();
        if n < min || n > max {
            let what = if n < min { "too few" } else { "too many" };
            let pos = if n > max { &d.args[max].pos } else { &d.pos };
            self.error(
                pos,
                format!("{what} arguments for `{}`", d.name),
                format!("usage: `{usage};`"),
            );
            ok = false;
        }
        ok
    }

    /// The single argument of `name VALUE;`.
    pub fn single<'d>(&mut self, d: &'d Directive, usage: &str) -> Option<&'d Value> {
        if self.shape(d, 1, 1, usage) {
            d.args.first()
        } else {
            None
        }
    }

    /// A directive without arguments (`tls_match_any_server_name;`).
    pub fn flag(&mut self, d: &Directive) -> bool {
        self.shape(d, 0, 0, &d.name.clone())
    }

    pub fn attr<'d>(&self, d: &'d Directive, key: &str) -> Option<&'d Attr> {
        d.attrs.iter().find(|a| a.key == key)
    }

    pub fn u32(&mut self, v: &Value, what: &str) -> Option<u32> {
        match v.text.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(
                    &v.pos,
                    format!("`{}` is not a valid {what}", v.text),
                    "expected a non-negative integer below 4294967296",
                );
                None
            }
        }
    }

    pub fn u64(&mut self, v: &Value, what: &str) -> Option<u64> {
        match v.text.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                self.error(
                    &v.pos,
                    format!("`{}` is not a valid {what}", v.text),
                    "expected a non-negative integer",
                );
                None
            }
        }
    }

    pub fn u32_in(&mut self, v: &Value, what: &str, lo: u32, hi: u32) -> Option<u32> {
        let n = self.u32(v, what)?;
        if n < lo || n > hi {
            self.error(
                &v.pos,
                format!("{what} {n} is out of range"),
                format!("expected {lo}..={hi}"),
            );
            return None;
        }
        Some(n)
    }

    /// A limit where 0 means "unlimited". Tempesta keeps these in a C
    /// `int`, so values above `INT_MAX` are refused.
    pub fn limit(&mut self, v: &Value, what: &str) -> Option<Option<u32>> {
        self.u32_in(v, what, 0, INT_MAX)
            .map(|n| (n != 0).then_some(n))
    }

    /// Whole seconds, at most `INT_MAX` as in Tempesta.
    pub fn secs(&mut self, v: &Value, what: &str) -> Option<Duration> {
        let n = self.u64(v, what)?;
        if n > u64::from(INT_MAX) {
            self.error(
                &v.pos,
                format!("{what} {n} is out of range"),
                format!("expected 0..={INT_MAX} seconds"),
            );
            return None;
        }
        Some(Duration::from_secs(n))
    }

    /// A memory size as Tempesta's `memparse` reads it (K, M, G suffixes),
    /// within `lo..=hi` and a multiple of `unit` bytes.
    pub fn mem_in(&mut self, v: &Value, what: &str, lo: u64, hi: u64, unit: u64) -> Option<u64> {
        let n = self.size(v, what)?;
        if n < lo || n > hi {
            self.error(
                &v.pos,
                format!("{what} `{}` is out of range", v.text),
                format!("expected {}..={}", show_bytes(lo), show_bytes(hi)),
            );
            return None;
        }
        if !n.is_multiple_of(unit) {
            self.error(
                &v.pos,
                format!(
                    "{what} `{}` is not a multiple of {}",
                    v.text,
                    show_bytes(unit)
                ),
                format!(
                    "Tempesta allocates it in {} units; round it, e.g. to {}",
                    show_bytes(unit),
                    show_bytes((n / unit * unit).max(unit))
                ),
            );
            return None;
        }
        Some(n)
    }

    /// Tempesta's booleans: `on|off`, `true|false`, `enable|disable`,
    /// `yes|no`, `1|0`.
    pub fn bool(&mut self, v: &Value) -> Option<bool> {
        match v.text.to_ascii_lowercase().as_str() {
            "on" | "true" | "enable" | "yes" | "1" => Some(true),
            "off" | "false" | "disable" | "no" | "0" => Some(false),
            _ => {
                self.error(
                    &v.pos,
                    format!("`{}` is not a boolean", v.text),
                    "expected `true` or `false` (or on/off)",
                );
                None
            }
        }
    }

    /// A size in bytes, optionally with a K, M or G suffix (binary units).
    pub fn size(&mut self, v: &Value, what: &str) -> Option<u64> {
        let t = v.text.as_str();
        let (digits, mult) = match t.char_indices().last() {
            Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 1u64 << 10),
            Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 1 << 20),
            Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 1 << 30),
            _ => (t, 1),
        };
        match digits.parse::<u64>().ok().and_then(|n| n.checked_mul(mult)) {
            Some(n) => Some(n),
            None => {
                self.error(
                    &v.pos,
                    format!("`{t}` is not a valid {what}"),
                    "expected a number of bytes, optionally with K, M or G (e.g. `268435456` or `256M`)",
                );
                None
            }
        }
    }

    /// A path, relative ones resolved against the configuration's directory.
    pub fn path(&mut self, v: &Value) -> PathBuf {
        resolve_path(self.base_dir, &v.text)
    }

    /// `PORT`, `IP`, `IP:PORT`, `[IPv6]:PORT`, `[IPv6]`. A bare port means
    /// 0.0.0.0 (IPv4 any, as in Tempesta); a bare address uses `default_port`.
    pub fn socket_addr(&mut self, v: &Value, default_port: u16) -> Option<SocketAddr> {
        match parse_socket_addr(&v.text, default_port) {
            Some(a) => Some(a),
            None => {
                self.error(
                    &v.pos,
                    format!("`{}` is not an address", v.text),
                    "expected PORT, IPv4[:PORT] or [IPv6][:PORT] (host names are not allowed)",
                );
                None
            }
        }
    }
}

/// The largest value of Tempesta's integer directives (a C `int`).
pub const INT_MAX: u32 = i32::MAX as u32;

/// Bytes with the largest binary suffix that divides them: `2M`, `1K`, `1000`.
pub fn show_bytes(n: u64) -> String {
    for (shift, suffix) in [(30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

pub fn resolve_path(base_dir: &Path, text: &str) -> PathBuf {
    let p = Path::new(text);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

pub fn parse_socket_addr(text: &str, default_port: u16) -> Option<SocketAddr> {
    if let Ok(port) = text.parse::<u16>() {
        return Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Some(a);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        // A bare IPv6 must be bracketed, as in Tempesta.
        if ip.is_ipv6() {
            return None;
        }
        return Some(SocketAddr::new(ip, default_port));
    }
    let inner = text.strip_prefix('[')?.strip_suffix(']')?;
    let ip: std::net::Ipv6Addr = inner.parse().ok()?;
    Some(SocketAddr::new(IpAddr::V6(ip), default_port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_address_forms() {
        assert_eq!(
            parse_socket_addr("443", 80),
            Some("0.0.0.0:443".parse().unwrap())
        );
        assert_eq!(
            parse_socket_addr("127.0.0.1", 80),
            Some("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(
            parse_socket_addr("127.0.0.1:8443", 80),
            Some("127.0.0.1:8443".parse().unwrap())
        );
        assert_eq!(
            parse_socket_addr("[::1]:443", 80),
            Some("[::1]:443".parse().unwrap())
        );
        assert_eq!(
            parse_socket_addr("[::1]", 80),
            Some("[::1]:80".parse().unwrap())
        );
        assert_eq!(parse_socket_addr("::1", 80), None);
        assert_eq!(parse_socket_addr("example.com:80", 80), None);
        assert_eq!(parse_socket_addr("70000", 80), None);
    }

    #[test]
    fn relative_paths_join_the_base() {
        assert_eq!(
            resolve_path(Path::new("/etc/x"), "certs/a.pem"),
            PathBuf::from("/etc/x/certs/a.pem")
        );
        assert_eq!(
            resolve_path(Path::new("/etc/x"), "/abs"),
            PathBuf::from("/abs")
        );
    }
}
