//! What the sticky-cookie test files share: a proxy with an h2c listener and metrics, and
//! requests sent with curl (HTTP/1.1 or HTTP/2, a chosen source address, cookie and
//! User-Agent).

use std::net::SocketAddr;

use e2e::proxy::Proxy;
use e2e::{curl, free_port, TempDir};

/// A response as curl got it.
#[derive(Debug)]
pub struct Got {
    /// 0: no response (the connection was dropped).
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The value of the sticky cookie this response sets.
    pub fn sticky_value(&self) -> Option<String> {
        let set = self.header("set-cookie")?;
        let pair = set.split(';').next()?;
        pair.strip_prefix("__tfw=").map(str::to_string)
    }
}

/// How to send one request.
#[derive(Clone, Copy, Default)]
pub struct Req<'a> {
    pub cookie: Option<&'a str>,
    /// HTTP/2 over cleartext (prior knowledge), to the h2c listener.
    pub h2: bool,
    /// The client's source address (each test client its own, for per-client counts).
    pub from: Option<&'a str>,
    pub user_agent: Option<&'a str>,
    /// The Accept value (a browser's, naming text/html, when `None`).
    pub accept: Option<&'a str>,
}

pub struct Site {
    pub proxy: Proxy,
    pub http: SocketAddr,
    pub h2c: SocketAddr,
    pub stats: SocketAddr,
}

impl Site {
    /// A proxy with `top` at top level (`sticky { ... }`), one vhost on `group`.
    pub fn start(tag: &str, group: &str, top: &str) -> Site {
        let dir = TempDir::new(tag);
        let addr = || SocketAddr::from(([127, 0, 0, 1], free_port()));
        let (http, h2c, stats) = (addr(), addr(), addr());
        let conf = format!(
            "listen {http};\nlisten {h2c} proto=h2c;\nstats_listen {stats};\n\
             frang_limits {{ http_strict_host_checking false; }}\n\
             {group}\n{top}\n\
             vhost site {{ proxy_pass default; }}\nhttp_chain {{ -> site; }}\n"
        );
        let proxy = Proxy::start(dir, &conf, http);
        Site {
            proxy,
            http,
            h2c,
            stats,
        }
    }

    pub fn get(&self, path: &str, req: Req<'_>) -> Got {
        let addr = if req.h2 { self.h2c } else { self.http };
        let url = format!("http://{addr}{path}");
        // A browser's Accept: Tempesta challenges only GETs that accept text/html.
        let accept = format!("Accept: {}", req.accept.unwrap_or("text/html,*/*;q=0.8"));
        let mut args: Vec<String> = vec!["-i".into(), "-H".into(), accept];
        if req.h2 {
            args.push("--http2-prior-knowledge".into());
        }
        if let Some(c) = req.cookie {
            args.extend(["-H".into(), format!("Cookie: {c}")]);
        }
        if let Some(from) = req.from {
            args.extend(["--interface".into(), from.into()]);
        }
        if let Some(ua) = req.user_agent {
            args.extend(["-A".into(), ua.into()]);
        }
        args.push(url);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_, out, _) = curl(&refs, 10);
        parse(&out)
    }

    pub fn metric(&self, name: &str) -> u64 {
        let (_, text, _) = curl(&[&format!("http://{}/metrics", self.stats)], 5);
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    pub fn logs(&self) -> String {
        self.proxy.proc.logs()
    }
}

fn parse(out: &str) -> Got {
    let Some((head, body)) = out.split_once("\r\n\r\n") else {
        return Got {
            status: 0,
            headers: Vec::new(),
            body: out.to_string(),
        };
    };
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Got {
        status,
        headers,
        body: body.to_string(),
    }
}
