//! Servers named by DNS names (extension; docs/PROXY.md "Servers by name"), against a real
//! DNS server on loopback: dnsmasq, whose answer the test changes while the proxy serves.
//! Two origins on the same port of 127.0.0.1 and 127.0.0.2 answer with their letter, so a
//! response says which address the name stood for when it was sent.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use e2e::proxy::{Proxy, Setup};
use e2e::{curl, free_port, metric_sum, proxy_cmd, write_file, Proc, TempDir};

/// A DNS server on 127.0.0.1 answering for the names in its hosts file only (TTL 1 s).
struct Dns {
    proc: Proc,
    hosts: PathBuf,
    addr: SocketAddr,
}

impl Dns {
    fn start(dir: &Path, hosts_text: &str) -> Dns {
        Dns::start_with(dir, hosts_text, &[])
    }

    /// `start`, with more dnsmasq arguments (SRV records: `--srv-host=...`).
    fn start_with(dir: &Path, hosts_text: &str, more: &[String]) -> Dns {
        let bin = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("dnsmasq is needed: apt-get install dnsmasq-base (tests/run.sh installs it)");
        let hosts = dir.join("dns-hosts");
        write_file(&hosts, hosts_text);
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut cmd = Command::new(bin);
        cmd.args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--local-ttl=1",
            "--user=root",
            "--pid-file=",
            "--log-queries",
            "--log-facility=-",
        ])
        .arg(format!("--port={}", addr.port()))
        .arg(format!("--addn-hosts={}", hosts.display()))
        .args(more);
        let mut proc = Proc::spawn("dnsmasq", cmd, dir);
        assert!(
            proc.wait_for_output("read ", Duration::from_secs(5)),
            "dnsmasq did not start\n{}",
            proc.logs()
        );
        Dns { proc, hosts, addr }
    }

    /// Replaces the hosts file and makes dnsmasq read it again.
    fn answer(&self, hosts_text: &str) {
        write_file(&self.hosts, hosts_text);
        self.proc.signal(libc::SIGHUP);
    }
}

/// An origin answering every request with its letter; `/slow` after 1.5 s (even once
/// stopped, so that a request in flight finishes).
struct Origin {
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Origin {
    fn start(ip: [u8; 4], port: u16, letter: char) -> Option<Origin> {
        let listener = TcpListener::bind(SocketAddr::from((ip, port))).ok()?;
        listener.set_nonblocking(true).ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let accept = thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let stop = flag.clone();
                        thread::spawn(move || serve(conn, letter, &stop));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Some(Origin {
            stop,
            accept: Some(accept),
        })
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// One connection's requests, until the origin stops: then the next request is not answered
/// (the connection closes), as when a server goes away.
fn serve(conn: TcpStream, letter: char, stop: &AtomicBool) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = conn;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
        }
        if request_line.contains(" /slow") {
            thread::sleep(Duration::from_millis(1500));
        } else if stop.load(Ordering::Relaxed) {
            return;
        }
        let response = format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{letter}");
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// Origins `A` on 127.0.0.1 and `B` on 127.0.0.2, on one port free on both.
fn two_origins() -> (Origin, Origin, u16) {
    for _ in 0..50 {
        let port = free_port();
        if let Some(a) = Origin::start([127, 0, 0, 1], port, 'A') {
            if let Some(b) = Origin::start([127, 0, 0, 2], port, 'B') {
                return (a, b, port);
            }
        }
    }
    panic!("no port free on both 127.0.0.1 and 127.0.0.2");
}

/// Which origin answered `GET path` through the proxy's plain listener.
fn letter(http: SocketAddr, path: &str) -> String {
    let url = format!("http://{http}{path}");
    let (status, body, err) = curl(&["-s", "-H", "Host: site.test", &url], 10);
    assert!(status.success(), "curl {path}: {err}");
    body
}

/// Asks until the answer is `want`, for at most `patience`.
fn wait_letter(http: SocketAddr, want: &str, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if letter(http, "/") == want {
            return true;
        }
        thread::sleep(Duration::from_millis(100));
    }
    false
}

fn start_proxy(setup: Setup, dns: &Dns, port: u16, stats: SocketAddr) -> Proxy {
    start_proxy_for(setup, dns, &format!("origin.test:{port} resolve"), stats)
}

/// The proxy with one server line, `server LINE;`, asking `dns`.
fn start_proxy_for(setup: Setup, dns: &Dns, line: &str, stats: SocketAddr) -> Proxy {
    let text = format!(
        "{}resolver {} valid=1 timeout=1;\nstats_listen {stats};\ngrace_shutdown_time 5;\n",
        setup
            .config(SocketAddr::from(([127, 0, 0, 9], 1)), "", "")
            .replace("server 127.0.0.9:1;", &format!("server {line};")),
        dns.addr
    );
    setup.start(&text)
}

#[test]
fn a_resolve_name_follows_the_dns_answer_and_exchanges_in_flight_finish() {
    let (_a, _b, port) = two_origins();
    let dir = TempDir::new("dns-follow");
    let dns = Dns::start(dir.path(), "127.0.0.1 origin.test\n");
    let setup = Setup::new("dns-follow-proxy");
    let http = setup.http;
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let proxy = start_proxy(setup, &dns, port, stats);
    assert_eq!(letter(http, "/"), "A", "{}", proxy.proc.logs());
    // A request in flight at A when the name moves to B.
    let slow = thread::spawn(move || letter(http, "/slow"));
    thread::sleep(Duration::from_millis(300));
    dns.answer("127.0.0.2 origin.test\n");
    assert!(
        wait_letter(http, "B", Duration::from_secs(10)),
        "the proxy did not follow the new answer\n{}\n{}",
        proxy.proc.logs(),
        dns.proc.logs()
    );
    assert_eq!(
        slow.join().unwrap(),
        "A",
        "the exchange in flight at A finishes there"
    );
    assert!(
        proxy
            .proc
            .stderr()
            .contains("server name `origin.test` now stands for 127.0.0.2 (was 127.0.0.1)")
            || proxy
                .proc
                .stdout()
                .contains("now stands for 127.0.0.2 (was 127.0.0.1)"),
        "{}",
        proxy.proc.logs()
    );
    assert!(metric_sum(stats, "ktls_proxy_dns_changes_total") >= 1);
    assert!(metric_sum(stats, "ktls_proxy_dns_queries_total{result=\"answered\"}") >= 2);
    // Both addresses: requests go to both.
    dns.answer("127.0.0.1 origin.test\n127.0.0.2 origin.test\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = String::new();
    while Instant::now() < deadline && !(seen.contains('A') && seen.contains('B')) {
        seen.push_str(&letter(http, "/"));
    }
    assert!(
        seen.contains('A') && seen.contains('B'),
        "only {seen:?}\n{}",
        proxy.proc.logs()
    );
}

#[test]
fn a_failing_resolver_keeps_the_last_good_addresses() {
    let (_a, _b, port) = two_origins();
    let dir = TempDir::new("dns-fail");
    let mut dns = Dns::start(dir.path(), "127.0.0.2 origin.test\n");
    let setup = Setup::new("dns-fail-proxy");
    let http = setup.http;
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let proxy = start_proxy(setup, &dns, port, stats);
    assert_eq!(letter(http, "/"), "B");
    // The name vanishes (NXDOMAIN), then the DNS server itself goes.
    dns.answer("127.0.0.1 other.test\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric_sum(stats, "ktls_proxy_dns_queries_total{result=\"failed\"}") == 0 {
        assert!(
            Instant::now() < deadline,
            "no failed question\n{}",
            proxy.proc.logs()
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(letter(http, "/"), "B", "the last good address serves");
    dns.proc.signal(libc::SIGKILL);
    let _ = dns.proc.wait_exit(Duration::from_secs(5));
    thread::sleep(Duration::from_secs(3));
    for _ in 0..5 {
        assert_eq!(letter(http, "/"), "B", "the last good address serves");
    }
    let logs = proxy.proc.logs();
    assert!(
        logs.contains("server name `origin.test` did not resolve"),
        "{logs}"
    );
    assert_eq!(
        logs.matches("server name `origin.test` did not resolve")
            .count(),
        1,
        "a failure streak is logged once\n{logs}"
    );
}

#[test]
fn a_resolve_name_without_an_answer_at_start_serves_once_it_has_one() {
    let (_a, _b, port) = two_origins();
    let dir = TempDir::new("dns-late");
    let dns = Dns::start(dir.path(), "127.0.0.1 other.test\n");
    let setup = Setup::new("dns-late-proxy");
    let http = setup.http;
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let proxy = start_proxy(setup, &dns, port, stats);
    let url = format!("http://{http}/");
    let started = Instant::now();
    let (status, code, err) = curl(
        &[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "Host: site.test",
            &url,
        ],
        10,
    );
    assert!(status.success(), "{err}");
    assert_eq!(code, "502", "no address yet: 502\n{}", proxy.proc.logs());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "502 at once, not after a timeout"
    );
    dns.answer("127.0.0.1 origin.test\n");
    assert!(
        wait_letter(http, "A", Duration::from_secs(15)),
        "{}",
        proxy.proc.logs()
    );
}

#[test]
fn names_without_resolve_are_looked_up_by_the_system_at_load() {
    let (_a, _b, port) = two_origins();
    let setup = Setup::new("dns-system");
    let http = setup.http;
    let text = setup
        .config(SocketAddr::from(([127, 0, 0, 9], 1)), "", "")
        .replace("server 127.0.0.9:1;", &format!("server localhost:{port};"));
    let proxy = setup.start(&text);
    assert_eq!(letter(http, "/"), "A", "{}", proxy.proc.logs());
    drop(proxy);
    // A name the system does not know refuses the configuration, at its line (`-t` too).
    let dir = TempDir::new("dns-system-bad");
    let config = dir.join("bad.conf");
    write_file(
        &config,
        "listen 127.0.0.1:1;\nsrv_group g {\n  server ktls-proxy-no-such-host.invalid:80;\n}\nvhost v { proxy_pass g; }\n",
    );
    let out = proxy_cmd(&config, &["-t"]);
    let text = e2e::output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(
            "bad.conf:3:3: error: server name `ktls-proxy-no-such-host.invalid` does not resolve"
        ),
        "{text}"
    );
}

#[test]
fn a_service_takes_its_servers_ports_and_backups_from_srv_records() {
    let port_a = free_port();
    let port_b = free_port();
    let origin_a = Origin::start([127, 0, 0, 1], port_a, 'A').expect("origin A");
    let _b = Origin::start([127, 0, 0, 2], port_b, 'B').expect("origin B");
    let dir = TempDir::new("dns-srv");
    // a.test at priority 0 is the primary; b.test at priority 1 a backup.
    let dns = Dns::start_with(
        dir.path(),
        "127.0.0.1 a.test\n127.0.0.2 b.test\n",
        &[
            format!("--srv-host=_http._tcp.origin.test,a.test,{port_a},0,10"),
            format!("--srv-host=_http._tcp.origin.test,b.test,{port_b},1,10"),
        ],
    );
    let setup = Setup::new("dns-srv-proxy");
    let http = setup.http;
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let proxy = start_proxy_for(setup, &dns, "origin.test service=http resolve", stats);
    for _ in 0..6 {
        assert_eq!(
            letter(http, "/"),
            "A",
            "the primary, on its record's port\n{}",
            proxy.proc.logs()
        );
    }
    // The primary goes: the backup, on its own port, serves.
    drop(origin_a);
    assert!(
        wait_letter(http, "B", Duration::from_secs(10)),
        "{}",
        proxy.proc.logs()
    );
}
