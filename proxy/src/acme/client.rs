//! A small blocking HTTPS client for the ACME server: one request per connection
//! (`Connection: close`), the server's certificate verified against `ca_root` or the
//! system's CAs. It runs on the ACME thread only, never in a worker.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};

/// Bound of every connect, read and write: a stalled ACME server delays issuance, never
/// blocks the thread for good.
const IO_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest response read (a certificate chain is a few KB).
const MAX_RESPONSE: u64 = 1 << 20;

pub struct Response {
    pub status: u16,
    headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Client {
    connector: SslConnector,
}

impl Client {
    pub fn new(ca_root: Option<&Path>) -> Result<Client, String> {
        let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
        if let Some(path) = ca_root {
            b.set_ca_file(path)
                .map_err(|e| format!("cannot load ca_root {}: {e}", path.display()))?;
        }
        b.set_verify(SslVerifyMode::PEER);
        Ok(Client {
            connector: b.build(),
        })
    }

    /// `method url` with `body` (JOSE JSON when given).
    pub fn request(
        &self,
        method: &str,
        url: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, String> {
        let (host, port, path) = split_url(url)?;
        let addr = (host.trim_start_matches('[').trim_end_matches(']'), port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host} has no address"))?;
        let tcp = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        tcp.set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        tcp.set_write_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let mut tls = self
            .connector
            .connect(name, tcp)
            .map_err(|e| format!("TLS to {host}:{port} failed: {e}"))?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: ktls-proxy-acme\r\nConnection: close\r\n");
        if let Some(body) = body {
            head.push_str(&format!(
                "Content-Type: application/jose+json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body.unwrap_or_default());
        tls.write_all(&out)
            .map_err(|e| format!("write to {host}: {e}"))?;
        let mut raw = Vec::new();
        let read = (&mut tls).take(MAX_RESPONSE).read_to_end(&mut raw);
        // A server that closes without close_notify still sent a complete response.
        if let Err(e) = read {
            if raw.is_empty() {
                return Err(format!("read from {host}: {e}"));
            }
        }
        parse_response(&raw)
    }
}

/// `https://host[:port]/path` into its parts.
fn split_url(url: &str) -> Result<(&str, u16, &str), String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("`{url}` is not an https URL"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => {
            (h, p.parse().map_err(|_| format!("bad port in `{url}`"))?)
        }
        _ => (authority, 443),
    };
    if host.is_empty() {
        return Err(format!("`{url}` has no host"));
    }
    Ok((host, port, path))
}

fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the ACME server's response has no complete head")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "the response head is not text")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("the response has no status line")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).map_err(|_| "bad chunk size")?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "bad chunk size")?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest.get(..size).ok_or("truncated chunk")?;
        body.extend_from_slice(chunk);
        rest = rest.get(size + 2..).ok_or("truncated chunk")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_host_port_and_path() {
        assert_eq!(
            split_url("https://127.0.0.1:14000/dir").unwrap(),
            ("127.0.0.1", 14000, "/dir")
        );
        assert_eq!(
            split_url("https://example.com").unwrap(),
            ("example.com", 443, "/")
        );
        assert!(split_url("http://example.com/").is_err());
    }

    #[test]
    fn chunked_bodies_are_joined() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nReplay-Nonce: x\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!(
            (r.status, r.body.as_slice(), r.header("replay-nonce")),
            (200, &b"abcde"[..], Some("x"))
        );
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
                .is_err()
        );
    }
}
