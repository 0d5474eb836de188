//! Access log entries (`access_log on` and the newer forms): to stdout for `dmesg`/`on`,
//! appended to a file for the `access_log_file` extension, one write per entry, in the
//! layout `access_log_format` names (Tempesta's line, or one JSON object).
//!
//! Files stay open between entries; `reopen()` (SIGUSR1, `proxy -s reopen`) opens every
//! one again by name, so logrotate can move a file away and the next entry lands in a new
//! file at the old name, as with nginx.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use config::{AccessLog, AccessLogDestination, AccessLogFormat};
use serde::Serialize;

/// What is known of a request when its head is parsed; the outcome comes at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub client: IpAddr,
    /// The connection's TLS fingerprint (`None`: plain TCP).
    pub tft: Option<crate::fingerprint::Tft>,
    /// The connection's JA4 (`None`: plain TCP, or the handshake completed while the access
    /// log was off).
    pub ja4: Option<crate::fingerprint::Ja4>,
    /// The request's HTTP fingerprint.
    pub tfh: crate::fingerprint::Tfh,
    pub method: String,
    pub uri: String,
    pub version: &'static str,
    pub referer: Option<String>,
    pub user_agent: Option<String>,
    /// When the head was parsed: the entry's duration runs from here to the end.
    pub started: Instant,
    /// The server the request was last sent to (`None`: answered by the proxy itself).
    pub upstream: Option<SocketAddr>,
    /// What the cache did (`None`: it was not consulted).
    pub cache: Option<CacheStatus>,
}

/// What the cache did for a request, as nginx's `$upstream_cache_status` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// Answered from a stored response (a 304 from the store included).
    Hit,
    /// Forwarded to fill or revalidate an entry, or nothing stored for an only-if-cached
    /// request.
    Miss,
    /// Answered from a stale entry (stale-while-revalidate, `cache_use_stale`).
    Stale,
    /// Forwarded without the cache: bypassed by a rule, not cacheable, or not storable.
    Pass,
}

impl CacheStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Stale => "stale",
            CacheStatus::Pass => "pass",
        }
    }
}

/// One access log entry: the request and how it ended.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub request: &'a RequestRecord,
    pub vhost: &'a str,
    pub status: u16,
    /// Response body bytes sent.
    pub bytes: u64,
    /// When the exchange ended.
    pub time: SystemTime,
    /// From the parsed head to the end of the exchange.
    pub duration: Duration,
    /// From the request's last byte written to the server to the response head read from
    /// it (nginx's `$upstream_header_time`); `None` without a response from a server.
    pub upstream_time: Option<Duration>,
}

/// The JSON layout: field names are the ones log shippers usually expect.
#[derive(Serialize)]
struct JsonEntry<'a> {
    time: String,
    client: String,
    vhost: &'a str,
    method: &'a str,
    uri: &'a str,
    version: &'a str,
    status: u16,
    bytes: u64,
    referer: Option<&'a str>,
    user_agent: Option<&'a str>,
    /// Tempesta's fingerprints in hexadecimal (`tft`: `None` over plain TCP).
    tft: Option<String>,
    tfh: String,
    /// Seconds, millisecond precision (nginx's `$request_time`).
    request_time: f64,
    upstream: Option<String>,
    /// Seconds, millisecond precision.
    upstream_time: Option<f64>,
    cache: Option<&'static str>,
    /// FoxIO's JA4 (`None` over plain TCP).
    ja4: Option<&'a str>,
}

impl Entry<'_> {
    /// The entry as one line (without the newline) in `format`.
    pub fn format(&self, format: AccessLogFormat) -> String {
        match format {
            AccessLogFormat::Tempesta => self.tempesta_line(),
            AccessLogFormat::Json => self.json_line(),
        }
    }

    /// `TIME ip "vhost" "METHOD uri HTTP/x" status bytes "referer" "user-agent" "tft=HEX"
    /// "tfh=HEX" rt=SECONDS upstream=ADDR urt=SECONDS cache=STATUS ja4=JA4`: Tempesta's fields with
    /// the time first (where the kernel log puts its own) and the proxy's after them, so a
    /// parser of Tempesta's fields still finds them between the quotes (`tft=0` over plain
    /// TCP, as Tempesta writes it). A quote inside a field is written `%22` so the fields
    /// stay separable; `-` stands for what is not there.
    fn tempesta_line(&self) -> String {
        let q = |s: &str| s.replace('"', "%22");
        let r = self.request;
        format!(
            "{} {} \"{}\" \"{} {} {}\" {} {} \"{}\" \"{}\" \"tft={}\" \"tfh={}\" rt={:.3} upstream={} urt={} cache={} ja4={}",
            crate::log::utc_timestamp(self.time),
            r.client,
            q(self.vhost),
            q(&r.method),
            q(&r.uri),
            r.version,
            self.status,
            self.bytes,
            q(r.referer.as_deref().unwrap_or("-")),
            q(r.user_agent.as_deref().unwrap_or("-")),
            r.tft.unwrap_or(crate::fingerprint::Tft(0)),
            r.tfh,
            self.duration.as_secs_f64(),
            r.upstream
                .map_or_else(|| "-".to_string(), |a| a.to_string()),
            self.upstream_time
                .map_or_else(|| "-".to_string(), |d| format!("{:.3}", d.as_secs_f64())),
            r.cache.map_or("-", CacheStatus::as_str),
            r.ja4.as_ref().map_or("-", crate::fingerprint::Ja4::as_str),
        )
    }

    fn json_line(&self) -> String {
        let r = self.request;
        let entry = JsonEntry {
            time: crate::log::utc_timestamp(self.time),
            client: r.client.to_string(),
            vhost: self.vhost,
            method: &r.method,
            uri: &r.uri,
            version: r.version,
            status: self.status,
            bytes: self.bytes,
            referer: r.referer.as_deref(),
            user_agent: r.user_agent.as_deref(),
            tft: r.tft.map(|t| t.to_string()),
            tfh: r.tfh.to_string(),
            request_time: (self.duration.as_secs_f64() * 1000.0).round() / 1000.0,
            upstream: r.upstream.map(|a| a.to_string()),
            upstream_time: self
                .upstream_time
                .map(|d| (d.as_secs_f64() * 1000.0).round() / 1000.0),
            cache: r.cache.map(CacheStatus::as_str),
            ja4: r.ja4.as_ref().map(crate::fingerprint::Ja4::as_str),
        };
        // Serializing plain strings and numbers cannot fail; an empty object keeps the
        // one-entry-per-line shape if it ever did.
        serde_json::to_string(&entry).unwrap_or_else(|_| "{}".to_string())
    }
}

/// Writes `entry` to every destination of `config`.
pub fn write(config: &AccessLog, entry: &Entry<'_>) {
    let mut line = entry.format(config.format);
    line.push('\n');
    for dest in &config.destinations {
        match dest {
            AccessLogDestination::Dmesg => {
                let _ = std::io::stdout().lock().write_all(line.as_bytes());
            }
            AccessLogDestination::File(path) => {
                if let Some(file) = open_file(path) {
                    // O_APPEND and one write per entry: entries of several threads and
                    // processes never interleave within a line.
                    let _ = (&*file).write_all(line.as_bytes());
                }
            }
            AccessLogDestination::Mmap => {}
        }
    }
}

/// The access log files in use, by path. Entries only ever get added: a path no longer
/// configured after a reload costs one descriptor until the next restart.
static OPEN_FILES: Mutex<Vec<(PathBuf, Arc<File>)>> = Mutex::new(Vec::new());

fn append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The open file for `path`, opened on first use. `None` when it cannot be opened (the
/// entry is then lost; the reason is logged by `reopen` and at each failed attempt).
fn open_file(path: &Path) -> Option<Arc<File>> {
    let mut files = OPEN_FILES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, f)) = files.iter().find(|(p, _)| p == path) {
        return Some(f.clone());
    }
    match append(path) {
        Ok(f) => {
            let f = Arc::new(f);
            files.push((path.to_path_buf(), f.clone()));
            Some(f)
        }
        Err(e) => {
            crate::error!("cannot open access log {}: {e}", path.display());
            None
        }
    }
}

/// Opens every access log file again by name (after logrotate moved it away). A file that
/// cannot be opened keeps its old descriptor, so entries still go somewhere; the failures
/// are returned for the log.
pub fn reopen() -> Vec<(PathBuf, std::io::Error)> {
    let mut files = OPEN_FILES.lock().unwrap_or_else(PoisonError::into_inner);
    let mut failed = Vec::new();
    for (path, file) in files.iter_mut() {
        match append(path) {
            Ok(f) => *file = Arc::new(f),
            Err(e) => failed.push((path.clone(), e)),
        }
    }
    failed
}

/// Opens the files of `config` now, so a wrong path or permission shows at start and the
/// files exist before the first request (logrotate and tail expect them).
pub fn open_all(config: &AccessLog) {
    for dest in &config.destinations {
        if let AccessLogDestination::File(path) = dest {
            let _ = open_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RequestRecord {
        RequestRecord {
            client: "192.0.2.7".parse().unwrap(),
            tft: Some(crate::fingerprint::Tft(0x66cb_9fd8_d425_0000)),
            ja4: Some(crate::fingerprint::Ja4::of(
                &ktls::hello::ClientHello::from_parts(0x0303, &[0x13, 0x01], [(0u16, &b""[..])]),
            )),
            tfh: crate::fingerprint::Tfh(0xb6_0000_1200),
            method: "GET".into(),
            uri: "/a\"b\\c\u{1}".into(),
            version: "HTTP/1.1",
            referer: None,
            user_agent: Some("curl/8".into()),
            started: Instant::now(),
            upstream: Some("192.0.2.9:8000".parse().unwrap()),
            cache: Some(CacheStatus::Miss),
        }
    }

    fn entry(r: &RequestRecord) -> Entry<'_> {
        Entry {
            request: r,
            vhost: "site",
            status: 200,
            bytes: 42,
            time: std::time::UNIX_EPOCH,
            duration: Duration::from_micros(12_345),
            upstream_time: Some(Duration::from_micros(9_870)),
        }
    }

    #[test]
    fn tempesta_line_escapes_quotes() {
        let r = record();
        assert_eq!(
            entry(&r).format(AccessLogFormat::Tempesta),
            "1970-01-01T00:00:00Z 192.0.2.7 \"site\" \"GET /a%22b\\c\u{1} HTTP/1.1\" 200 42 \"-\" \"curl/8\" \
             \"tft=66cb9fd8d4250000\" \"tfh=b600001200\" rt=0.012 upstream=192.0.2.9:8000 urt=0.010 cache=miss \
             ja4=t12d010100_0f2cb44170f4_000000000000"
        );
    }

    #[test]
    fn json_line_is_one_object_that_round_trips_hostile_text() {
        let r = record();
        let line = entry(&r).format(AccessLogFormat::Json);
        assert!(!line.contains('\n') && !line.contains('\u{1}'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["uri"], "/a\"b\\c\u{1}");
        assert_eq!(v["status"], 200);
        assert_eq!(v["bytes"], 42);
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert_eq!(v["time"], "1970-01-01T00:00:00Z");
        assert_eq!(v["request_time"], 0.012);
        assert_eq!(v["tft"], "66cb9fd8d4250000");
        assert_eq!(v["tfh"], "b600001200");
        assert_eq!(v["upstream"], "192.0.2.9:8000");
        assert_eq!(v["upstream_time"], 0.01);
        assert_eq!(v["cache"], "miss");
        assert_eq!(v["ja4"], "t12d010100_0f2cb44170f4_000000000000");
    }
}
