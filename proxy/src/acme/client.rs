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
        let mut out = request_head(method, path, &format!("{host}:{port}"), body)?;
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

/// The request head, through the proxy's own HTTP/1 writer (the one place that writes
/// HTTP/1 text): `Connection: close`, and the JOSE body's type and length when there is one.
fn request_head(
    method: &str,
    path: &str,
    authority: &str,
    body: Option<&[u8]>,
) -> Result<Vec<u8>, String> {
    let bad = |e: http1::ParseError| format!("cannot write a request to {authority}{path}: {e}");
    let mut head =
        http1::RequestBuilder::new(method.as_bytes(), path.as_bytes(), 256).map_err(bad)?;
    head.field(b"host", authority.as_bytes()).map_err(bad)?;
    head.field(b"user-agent", b"ktls-proxy-acme").map_err(bad)?;
    if let Some(body) = body {
        head.field(b"content-type", b"application/jose+json")
            .map_err(bad)?;
        head.field(b"content-length", body.len().to_string().as_bytes())
            .map_err(bad)?;
    }
    let limits = http1::Limits::default();
    let (head, buf) = head.finish(false, &limits).map_err(bad)?;
    let mut out = Vec::with_capacity(256);
    let forwarding = http1::Forwarding {
        forwarded_for: None,
        forwarded_proto: None,
        via: None,
        edits: &http1::HeaderEdits::new(),
        framing: head.framing(),
        connection: http1::ConnectionOption::Close,
        limits: &limits,
    };
    http1::write_request_head(&mut out, &head, &buf, &forwarding)
        .map_err(|e| format!("cannot write a request to {authority}{path}: {e}"))?;
    Ok(out)
}

/// The whole response (the server closed the connection), through the proxy's own HTTP/1
/// parser and chunked decoder.
fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let limits = http1::Limits::default();
    let bad = |e: http1::ParseError| format!("the ACME server's response is malformed: {e}");
    let (head, head_len) = http1::parse_response(raw, &limits, false)
        .map_err(bad)?
        .ok_or("the ACME server's response has no complete head")?;
    let headers = head
        .headers()
        .iter()
        .map(|f| {
            let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
            (text(f.name.get(raw)), text(f.value.get(raw)))
        })
        .collect();
    let rest = raw.get(head_len..).unwrap_or_default();
    let body = match head.framing() {
        http1::BodyFraming::Length(n) => {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            rest.get(..n)
                .ok_or("the ACME server's response is truncated")?
                .to_vec()
        }
        http1::BodyFraming::Chunked => {
            let mut body = Vec::new();
            let (_, done) = http1::ChunkedDecoder::new(&limits)
                .decode_all(rest, |data| body.extend_from_slice(data))
                .map_err(bad)?;
            if !done {
                return Err("the ACME server's chunked response is truncated".into());
            }
            body
        }
        http1::BodyFraming::None => Vec::new(),
        http1::BodyFraming::CloseDelimited => rest.to_vec(),
    };
    Ok(Response {
        status: head.status(),
        headers,
        body,
    })
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
    fn requests_are_written_by_the_http1_writer() {
        let head = request_head("POST", "/new-order", "acme.test:14000", Some(b"{}")).unwrap();
        let text = String::from_utf8(head).unwrap();
        assert!(text.starts_with("POST /new-order HTTP/1.1\r\n"), "{text}");
        for line in [
            "Host: acme.test:14000\r\n",
            "Content-Length: 2\r\n",
            "Connection: close\r\n",
        ] {
            assert!(
                text.to_ascii_lowercase()
                    .contains(&line.to_ascii_lowercase()),
                "{text}"
            );
        }
        assert!(text.ends_with("\r\n\r\n"), "{text}");
        // A path the writer cannot carry is an error, not a split head.
        assert!(request_head("GET", "/a\r\nX: y", "acme.test", None).is_err());
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
