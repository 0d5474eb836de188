//! What to load: the URL, where to connect, the Host header and SNI, and the request bytes.

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// Errors in the command line's description of the target.
#[derive(Debug)]
pub enum TargetError {
    Url(String, &'static str),
    Resolve(String, String),
    Header(String),
    Addr(String),
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetError::Url(url, why) => write!(
                f,
                "invalid URL `{url}`: {why}; expected http://HOST[:PORT]/PATH or https://..."
            ),
            TargetError::Resolve(host, e) => write!(
                f,
                "cannot resolve `{host}`: {e}; use an IP address or --connect ADDR:PORT"
            ),
            TargetError::Header(h) => {
                write!(f, "invalid header `{h}`; expected -H \"Name: value\"")
            }
            TargetError::Addr(a) => write!(
                f,
                "invalid address `{a}` in --addrs; expected IP or IP:PORT, comma-separated"
            ),
        }
    }
}

/// A parsed `http://` or `https://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub tls: bool,
    /// The host as written (without brackets for IPv6).
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, TargetError> {
        let bad = |why| TargetError::Url(url.to_string(), why);
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad("the scheme must be http or https"));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'?' => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or(bad("unclosed `[` in the host"))?;
            let port = match v6[end + 1..].strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad("invalid port"))?,
                None => default_port,
            };
            (v6[..end].to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad("invalid port"))?),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        Ok(Url {
            tls,
            host,
            port,
            path,
        })
    }

    /// The Host header value: the host, plus the port when it is not the scheme's default.
    pub fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default_port = if self.tls { 443 } else { 80 };
        if self.port == default_port {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// Resolves the host to the first address it has.
    pub fn resolve(&self) -> Result<SocketAddr, TargetError> {
        let host = self.host.as_str();
        let mut addrs = (host, self.port)
            .to_socket_addrs()
            .map_err(|e| TargetError::Resolve(host.to_string(), e.to_string()))?;
        addrs
            .next()
            .ok_or_else(|| TargetError::Resolve(host.to_string(), "no address".to_string()))
    }

    /// The SNI to send: the host name, unless it is an IP literal (RFC 6066 forbids those).
    pub fn default_sni(&self) -> Option<String> {
        self.host
            .parse::<IpAddr>()
            .is_err()
            .then(|| self.host.clone())
    }
}

/// Builds the request every connection sends: wrk's `GET PATH HTTP/1.1` with a Host header
/// (unless `-H` gives one) and the `-H` headers. Returns the bytes and whether a header asks
/// for `Connection: close`.
pub fn build_request(url: &Url, headers: &[String]) -> Result<(Vec<u8>, bool), TargetError> {
    let mut host_given = false;
    let mut close = false;
    let mut lines = Vec::new();
    for h in headers {
        let Some((name, value)) = h.split_once(':') else {
            return Err(TargetError::Header(h.clone()));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty() || name.contains(' ') || h.contains(['\r', '\n']) {
            return Err(TargetError::Header(h.clone()));
        }
        host_given |= name.eq_ignore_ascii_case("host");
        close |= name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close");
        lines.push(format!("{name}: {value}\r\n"));
    }
    let mut req = format!("GET {} HTTP/1.1\r\n", url.path);
    if !host_given {
        req.push_str(&format!("Host: {}\r\n", url.host_header()));
    }
    for l in lines {
        req.push_str(&l);
    }
    req.push_str("\r\n");
    Ok((req.into_bytes(), close))
}

/// Parses `--addrs 127.0.0.1,127.0.0.2:8443`: addresses without a port take `port`.
pub fn parse_addrs(list: &str, port: u16) -> Result<Vec<SocketAddr>, TargetError> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<SocketAddr>()
                .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, port)))
                .map_err(|_| TargetError::Addr(s.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("https://tempesta-tech.com").unwrap();
        assert_eq!((u.tls, u.port, u.path.as_str()), (true, 443, "/"));
        assert_eq!(u.host_header(), "tempesta-tech.com");
        assert_eq!(u.default_sni().as_deref(), Some("tempesta-tech.com"));
        let u = Url::parse("http://127.0.0.1:8000/a/b?x=1").unwrap();
        assert_eq!((u.port, u.path.as_str()), (8000, "/a/b?x=1"));
        assert_eq!(u.host_header(), "127.0.0.1:8000");
        assert_eq!(u.default_sni(), None);
        let u = Url::parse("http://[::1]:81").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 81));
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://x:notaport/").is_err());
    }

    #[test]
    fn requests_and_addrs() {
        let u = Url::parse("http://h:81/p").unwrap();
        let (req, close) = build_request(&u, &["Connection: close".into()]).unwrap();
        assert!(close);
        assert_eq!(
            req,
            b"GET /p HTTP/1.1\r\nHost: h:81\r\nConnection: close\r\n\r\n".to_vec()
        );
        let (req, close) = build_request(&u, &["host: other".into()]).unwrap();
        assert!(!close);
        assert_eq!(req, b"GET /p HTTP/1.1\r\nhost: other\r\n\r\n".to_vec());
        assert!(build_request(&u, &["nocolon".into()]).is_err());
        let a = parse_addrs("127.0.0.1,127.0.0.2:9", 8).unwrap();
        assert_eq!(a[0].port(), 8);
        assert_eq!(a[1].port(), 9);
    }
}
