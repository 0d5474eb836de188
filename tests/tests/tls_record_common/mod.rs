//! Shared by the record-layer suites (tls_record.rs, tls_record_attacks.rs): a proxy with the
//! cache and metrics in front of a pattern origin, the suites to try, OpenSSL client contexts,
//! a meddling relay between a client and the proxy, and readers of raw HTTP/1.1 responses.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{curl, free_port};
use openssl::ssl::{SslContext, SslMethod, SslVerifyMode, SslVersion};

/// TLS 1.2 (OpenSSL name) and TLS 1.3 (IANA name) suites of the three AEADs.
pub const TLS12: [&str; 3] = [
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
];

pub const TLS13: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// `/bytes/N` answers N bytes of the origin's pattern (cacheable); `/echo` answers the body.
pub fn origin() -> Origin {
    Origin::start(|r| {
        if r.path() == "/echo" {
            return Response::ok(r.body.clone());
        }
        let len: u64 = r.path().trim_start_matches("/bytes/").parse().unwrap_or(10);
        Response::pattern(len).header("Cache-Control", "max-age=300")
    })
}

pub struct Running {
    pub proxy: Proxy,
    pub https: SocketAddr,
    pub stats: SocketAddr,
}

pub fn start(origin: &Origin, extra: &str) -> Running {
    let setup = Setup::new("tlsrec");
    let https = setup.https;
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("cache 1;\ncache_fulfill * *;\nstats_listen {stats};\n{extra}"),
    );
    Running {
        proxy: setup.start(&conf),
        https,
        stats,
    }
}

impl Running {
    pub fn metrics(&self) -> String {
        let (st, out, err) = curl(&[&format!("http://{}/metrics", self.stats)], 5);
        assert!(st.success(), "metrics: {err}");
        out
    }

    /// The value of the sample `name{labels}` (0 when absent).
    pub fn sample(&self, name_and_labels: &str) -> u64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name_and_labels} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn path_count(&self, path: &str) -> u64 {
        self.sample(&format!(
            "ktls_proxy_tls_connections_total{{path=\"{path}\"}}"
        ))
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://site.test:{}{path}", self.https.port())
    }

    pub fn resolve(&self) -> String {
        format!("site.test:{}:127.0.0.1", self.https.port())
    }
}

pub fn curl_version_args(version: SslVersion, suite: &str) -> Vec<String> {
    if version == SslVersion::TLS1_3 {
        ["--tlsv1.3", "--tls-max", "1.3", "--tls13-ciphers", suite]
    } else {
        ["--tlsv1.2", "--tls-max", "1.2", "--ciphers", suite]
    }
    .iter()
    .map(|s| s.to_string())
    .collect()
}

pub fn all_suites() -> Vec<(SslVersion, &'static str)> {
    TLS12
        .iter()
        .map(|s| (SslVersion::TLS1_2, *s))
        .chain(TLS13.iter().map(|s| (SslVersion::TLS1_3, *s)))
        .collect()
}

/// How many whole `Content-Length` responses `raw` holds.
pub fn complete_responses(raw: &[u8]) -> usize {
    let mut rest = raw;
    let mut n = 0;
    while let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let len = content_length(&rest[..end]);
        if rest.len() < end + 4 + len {
            break;
        }
        n += 1;
        rest = &rest[end + 4 + len..];
    }
    n
}

pub fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| l.strip_prefix("content-length:").map(str::to_string))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The bodies of the `Content-Length` responses in `raw`, in order.
pub fn bodies(mut raw: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
        let len = content_length(&raw[..end]);
        let body = &raw[end + 4..];
        let take = len.min(body.len());
        out.push(body[..take].to_vec());
        raw = &body[take..];
    }
    out
}

pub fn get(path: &str, close: bool) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: site.test\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes()
}

/// A socket that flips one bit of the next write once armed, and that can hold writes until
/// the next read (so that a TLS client's Finished and first request leave in one segment).
#[derive(Debug)]
pub struct Meddler {
    stream: TcpStream,
    tamper: Arc<AtomicBool>,
    cork: bool,
    /// What a corked meddler holds back until `release`.
    pub held: Vec<u8>,
}

impl Read for Meddler {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.release()?;
        self.stream.read(buf)
    }
}

impl Write for Meddler {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut bytes = buf.to_vec();
        if self.tamper.swap(false, Ordering::SeqCst) {
            // The last byte is in the record's authentication tag.
            let last = bytes.len() - 1;
            bytes[last] ^= 0x01;
        }
        if self.cork {
            self.held.extend_from_slice(&bytes);
        } else {
            self.stream.write_all(&bytes)?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Meddler {
    pub fn release(&mut self) -> io::Result<()> {
        if !self.held.is_empty() {
            self.stream.write_all(&self.held)?;
            self.held.clear();
        }
        Ok(())
    }
}

pub fn client_ctx(version: SslVersion) -> SslContext {
    let mut b = SslContext::builder(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    b.set_min_proto_version(Some(version)).unwrap();
    b.set_max_proto_version(Some(version)).unwrap();
    b.build()
}

pub fn meddler(addr: SocketAddr, cork: bool) -> (Meddler, Arc<AtomicBool>) {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    let tamper = Arc::new(AtomicBool::new(false));
    (
        Meddler {
            stream,
            tamper: tamper.clone(),
            cork,
            held: Vec::new(),
        },
        tamper,
    )
}

pub fn key_updates(run: &Running) -> (u64, u64) {
    (
        run.sample("ktls_proxy_tls_key_updates_total{direction=\"received\"}"),
        run.sample("ktls_proxy_tls_key_updates_total{direction=\"sent\"}"),
    )
}
