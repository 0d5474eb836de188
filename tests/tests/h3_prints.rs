//! The TLS fingerprints over QUIC (issue 33): an HTTP/3 request's access log line carries its
//! connection's `tft` (with the QUIC bit, 0x80, and `h3` as the ALPN the listener knows) and
//! a JA4 starting with `q`; `tf_blocklist` and a `tft { hash ...; }` limit refuse QUIC
//! connections (closed with H3_EXCESSIVE_LOAD, counted as `blocks_total{limit="tft"}`)
//! while a TCP client on the same port goes on being served. aioquic is the QUIC client
//! (tests/py/h3_prints.py), curl the TCP one; the fingerprint is read from the log of a
//! first connection, never written into the test.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{curl, free_port, metric_sum, need_aioquic, wait_for_port, write_file};

const T: Duration = Duration::from_secs(10);
/// H3_EXCESSIVE_LOAD, the close of a refused QUIC connection.
const REFUSED: u64 = 0x107;

struct Site {
    proxy: Proxy,
    /// `proto="h2,h3"`: TLS with HTTP/2 over TCP, HTTP/3 over UDP, one port.
    port: u16,
    stats: SocketAddr,
    log: PathBuf,
    list: PathBuf,
    base: String,
    _origin: Origin,
}

fn start(tag: &str) -> Site {
    need_aioquic();
    let origin = Origin::start(|_| Response::ok("ok"));
    let setup = Setup::new(tag);
    let (log, list) = (setup.dir.join("access.log"), setup.dir.join("blocklist"));
    write_file(&list, "# nothing refused yet\n");
    let addr = || SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (h3, stats) = (addr(), addr());
    let extra = format!(
        "listen {h3} proto=\"h2,h3\";\nstats_listen {stats};\naccess_log_file {};\n\
         tf_blocklist {};\n",
        log.display(),
        list.display()
    );
    let base = setup.config(origin.addr(), "", &extra);
    let proxy = setup.start(&base);
    for a in [h3, stats] {
        assert!(wait_for_port(a, T), "{a} listens");
    }
    Site {
        proxy,
        port: h3.port(),
        stats,
        log,
        list,
        base,
        _origin: origin,
    }
}

impl Site {
    /// `count` QUIC connections in a row from one aioquic process, each one GET: the status
    /// each got (200), or the error code it was closed with.
    fn quic(&self, count: u32) -> Vec<Result<u64, String>> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/h3_prints.py");
        let out = Command::new("timeout")
            .args(["60", "python3", script, &self.port.to_string()])
            .arg(count.to_string())
            .output()
            .expect("python3");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "h3_prints.py: {stdout}\n{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.proxy.proc.logs()
        );
        let results: Vec<_> = stdout
            .lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
                match (v["status"].as_u64(), v["close"].as_u64()) {
                    (Some(status), _) => Ok(status),
                    (None, Some(code)) => Err(format!("closed 0x{code:x}")),
                    _ => Err(v["close"].to_string()),
                }
            })
            .collect();
        assert_eq!(results.len(), count as usize, "{stdout}");
        results
    }

    /// curl over TCP (HTTP/2) to the same port: the body, or curl's error.
    fn tcp(&self) -> Result<String, String> {
        let url = format!("https://site.test:{}/", self.port);
        let resolve = format!("site.test:{}:127.0.0.1", self.port);
        let (status, out, err) = curl(&["-k", "--http2", "--resolve", &resolve, &url], 5);
        if status.success() {
            Ok(out)
        } else {
            Err(err)
        }
    }

    /// The access log's lines, once it has `n`.
    fn log_lines(&self, n: usize) -> Vec<String> {
        e2e::lines_once(&self.log, n, T)
    }

    /// Line `i` of the access log (waiting for it).
    fn line(&self, i: usize) -> String {
        self.log_lines(i + 1).get(i).cloned().unwrap_or_default()
    }

    fn reload(&self) {
        self.proxy.reload(&self.base);
    }

    fn metric(&self, name: &str) -> u64 {
        metric_sum(self.stats, name)
    }

    fn tft_blocks(&self) -> u64 {
        self.metric("ktls_proxy_blocks_total{limit=\"tft\"}")
    }
}

/// A quoted `"KEY=VALUE"` field of an access log line.
fn field(line: &str, key: &str) -> String {
    line.split(&format!("\"{key}="))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("")
        .to_string()
}

fn ja4(line: &str) -> String {
    line.rsplit(" ja4=").next().unwrap_or("").to_string()
}

fn hex(value: &str) -> u64 {
    u64::from_str_radix(value, 16).unwrap_or(0)
}

/// One QUIC connection served, and the `tft` its access log line shows (line `i`).
fn first_quic_print(site: &Site, i: usize) -> String {
    assert_eq!(site.quic(1), vec![Ok(200)]);
    let line = site.line(i);
    assert!(line.contains("HTTP/3.0"), "{line}");
    let tft = field(&line, "tft");
    assert_ne!(hex(&tft), 0, "{line}");
    tft
}

#[test]
fn an_h3_request_is_logged_with_its_connections_quic_fingerprints() {
    let site = start("h3-prints-log");
    first_quic_print(&site, 0);
    assert_eq!(site.tcp().as_deref(), Ok("ok"));
    let (quic, tcp) = (site.line(0), site.line(1));
    eprintln!("QUIC: {quic}\nTCP:  {tcp}");
    assert!(tcp.contains("HTTP/2.0"), "{tcp}");
    let (quic_tft, tcp_tft) = (hex(&field(&quic, "tft")), hex(&field(&tcp, "tft")));
    // QUIC's bit, and `h3` (3) as the one protocol offered that the listener knows:
    // aioquic offers h3 only. A TCP connection never has the bit.
    assert_eq!(quic_tft & 0x8f, 0x83, "{quic}");
    assert_eq!(tcp_tft & 0x80, 0, "{tcp}");
    // JA4 over QUIC: `q`, TLS 1.3, a server name, `h3` as the first ALPN.
    let form = regex::Regex::new("^q13d[0-9]{4}h3_[0-9a-f]{12}_[0-9a-f]{12}$").expect("regex");
    assert!(form.is_match(&ja4(&quic)), "{quic}");
    assert!(ja4(&tcp).starts_with("t13d"), "{tcp}");
    // The request's HTTP fingerprint, with the bit HTTP/2 and HTTP/3 requests set.
    let tfh = hex(&field(&quic, "tfh"));
    assert_ne!(tfh & 1 << 23, 0, "{quic}");
    // The same client again: the same prints.
    first_quic_print(&site, 2);
    let again = site.line(2);
    assert_eq!(field(&again, "tft"), field(&quic, "tft"));
    assert_eq!(ja4(&again), ja4(&quic));
}

#[test]
fn a_blocklisted_quic_fingerprint_is_refused_while_tcp_is_served() {
    let site = start("h3-prints-blocklist");
    let tft = first_quic_print(&site, 0);
    write_file(&site.list, &format!("# aioquic\ntft {tft}\n"));
    site.reload();
    let blocks = site.tft_blocks();
    let closes = site.metric("ktls_proxy_connections_closed_total{reason=\"frang\"}");
    let refused = site.quic(1);
    assert_eq!(refused, vec![Err(format!("closed 0x{REFUSED:x}"))]);
    assert_eq!(site.tft_blocks(), blocks + 1);
    assert_eq!(
        site.metric("ktls_proxy_connections_closed_total{reason=\"frang\"}"),
        closes + 1
    );
    let quic_closes = "ktls_proxy_quic_closes_total{reason=\"proxy\",code=\"0x107\"}";
    assert_eq!(site.metric(quic_closes), 1);
    let logs = site.proxy.proc.logs();
    assert!(logs.contains("frang: tft exceeded"), "logged: {logs}");
    // Curl over TCP on the same port has another fingerprint: served.
    assert_eq!(site.tcp().as_deref(), Ok("ok"));
    // The refused connection reached no request: one line for the first GET, one for curl.
    let lines = site.log_lines(2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    // The list read again without it: served again.
    write_file(&site.list, "\n");
    site.reload();
    assert_eq!(site.quic(1), vec![Ok(200)]);
}

#[test]
fn a_tft_limit_refuses_the_second_quic_connection_within_a_second() {
    let site = start("h3-prints-limit");
    let tft = first_quic_print(&site, 0);
    // One connection a second for aioquic's fingerprint (Tempesta's `hash HEX 1 N`).
    let limited = format!("{}tft {{ hash {tft} 1 1000; }}\n", site.base);
    let site = Site {
        base: limited,
        ..site
    };
    site.reload();
    let blocks = site.tft_blocks();
    let two = site.quic(2);
    assert_eq!(
        two,
        vec![Ok(200), Err(format!("closed 0x{REFUSED:x}"))],
        "{}",
        site.proxy.proc.logs()
    );
    assert_eq!(site.tft_blocks(), blocks + 1);
    // TCP clients have their own fingerprint: not limited.
    for _ in 0..3 {
        assert_eq!(site.tcp().as_deref(), Ok("ok"));
    }
    // A second later the count has moved on.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(site.quic(1), vec![Ok(200)]);
}

/// frang's TLS handshake rate counts QUIC handshakes as TCP ones: with one a second, the
/// second QUIC connection within the second is refused and counted.
#[test]
fn tls_connection_rate_refuses_the_second_quic_handshake_within_a_second() {
    let site = start("h3-prints-tls-rate");
    let limited = format!("{}frang_limits {{ tls_connection_rate 1; }}\n", site.base);
    let site = Site {
        base: limited,
        ..site
    };
    site.reload();
    let blocks = "ktls_proxy_blocks_total{limit=\"tls_connection_rate\"}";
    assert_eq!(site.metric(blocks), 0);
    let two = site.quic(2);
    assert_eq!(
        two,
        vec![Ok(200), Err(format!("closed 0x{REFUSED:x}"))],
        "{}",
        site.proxy.proc.logs()
    );
    assert_eq!(site.metric(blocks), 1, "{}", site.proxy.proc.logs());
}

#[test]
fn a_blocklisted_http_fingerprint_is_refused_on_h3_requests_too() {
    let site = start("h3-prints-tfh");
    first_quic_print(&site, 0);
    let tfh = field(&site.line(0), "tfh");
    write_file(&site.list, &format!("tfh {tfh}\n"));
    let base = format!("{}block_action attack reply;\n", site.base);
    let site = Site { base, ..site };
    site.reload();
    let blocks = site.metric("ktls_proxy_blocks_total{limit=\"tfh\"}");
    // aioquic's request shape: answered 403; curl's (another shape) served.
    assert_eq!(site.quic(1), vec![Ok(403)], "{}", site.proxy.proc.logs());
    assert_eq!(
        site.metric("ktls_proxy_blocks_total{limit=\"tfh\"}"),
        blocks + 1
    );
    assert_eq!(site.tcp().as_deref(), Ok("ok"));
}

/// Chromium's ClientHello is larger than aioquic's (a post-quantum key share, GREASE): it
/// gets QUIC fingerprints too. Run where Chromium is installed, as h3_serve's browser test
/// (`KTLS_PROXY_REQUIRE_CHROMIUM=1` makes its absence a failure).
#[test]
fn chromium_gets_quic_fingerprints() {
    let Some(chromium) = e2e::chromium("QUIC fingerprints") else {
        return;
    };
    let site = start("h3-prints-chromium");
    let cert = site.proxy.dir.join("site.crt");
    let profile = site.proxy.dir.join("profile");
    let out = e2e::chromium_over_quic(chromium, (&cert, &profile), site.port, "/");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains(">ok</pre>"), "{dom}");
    let line = site.line(0);
    eprintln!("Chromium: {line}");
    assert!(
        line.contains("HTTP/3.0") && line.contains("HeadlessChrome"),
        "{line}"
    );
    assert_eq!(hex(&field(&line, "tft")) & 0x8f, 0x83, "{line}");
    assert!(ja4(&line).starts_with("q13d"), "{line}");
    assert_eq!(&ja4(&line)[8..11], "h3_", "{line}");
}
