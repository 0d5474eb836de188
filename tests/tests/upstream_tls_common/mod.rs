//! The peers and helpers of `upstream_tls.rs`: certificates made with the `openssl` tool,
//! nginx as a TLS origin, a proxy in front of it, exchanges and metrics read back.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, metric_sum, raw_exchange, wait_for_port, write_file, Proc};

pub const T: Duration = Duration::from_secs(5);

/// A CA, the origin's certificate it signed (for `origin.test` and 127.0.0.1), a client
/// certificate it signed, and a certificate for the same names from another CA.
pub struct Pki {
    pub ca: PathBuf,
    pub server: (PathBuf, PathBuf),
    pub client: (PathBuf, PathBuf),
    pub rogue: (PathBuf, PathBuf),
}

pub fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA `stem` (`stem.crt`, `stem.key`) in `dir`.
pub fn make_ca(dir: &Path, stem: &str) {
    let (crt, key) = (format!("{stem}.crt"), format!("{stem}.key"));
    openssl(
        &[
            "req",
            "-x509",
            "-nodes",
            "-days",
            "30",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-subj",
            &format!("/CN={stem}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
            "-keyout",
            &key,
            "-out",
            &crt,
        ],
        dir,
    );
}

/// A P-256 key `key` and a request `csr` for the name `stem`, in `dir`.
fn new_key_and_csr(dir: &Path, stem: &str, (key, csr): (&str, &str)) {
    openssl(
        &[
            "req",
            "-new",
            "-nodes",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-subj",
            &format!("/CN={stem}"),
            "-keyout",
            key,
            "-out",
            csr,
        ],
        dir,
    );
}

/// A certificate `stem` signed by CA `ca`, with `san` (e.g. `DNS:a,IP:127.0.0.1`).
pub fn make_leaf(
    dir: &Path,
    (stem, ca): (&str, &str),
    san: &str,
    usage: &str,
) -> (PathBuf, PathBuf) {
    let (crt, key, csr) = (
        format!("{stem}.crt"),
        format!("{stem}.key"),
        format!("{stem}.csr"),
    );
    new_key_and_csr(dir, stem, (&key, &csr));
    let ext = format!("{stem}.ext");
    write_file(
        &dir.join(&ext),
        &format!("subjectAltName={san}\nextendedKeyUsage={usage}\n"),
    );
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "30",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ],
        dir,
    );
    (dir.join(crt), dir.join(key))
}

/// A certificate `stem` signed by CA `ca` for `san` whose validity ended in 2020: `openssl
/// x509` cannot date a certificate in the past (before OpenSSL 3.4), `openssl ca` can.
pub fn make_expired_leaf(dir: &Path, (stem, ca): (&str, &str), san: &str) -> (PathBuf, PathBuf) {
    let (crt, key, csr) = (
        format!("{stem}.crt"),
        format!("{stem}.key"),
        format!("{stem}.csr"),
    );
    new_key_and_csr(dir, stem, (&key, &csr));
    let db = format!("{stem}-ca");
    std::fs::create_dir_all(dir.join(&db)).expect("ca database dir");
    write_file(&dir.join(&db).join("index.txt"), "");
    write_file(&dir.join(&db).join("serial"), "01\n");
    let cnf = format!("{stem}-ca.cnf");
    write_file(
        &dir.join(&cnf),
        &format!(
            "[ca]\ndefault_ca=d\n[d]\ndatabase={db}/index.txt\nnew_certs_dir={db}\n\
             serial={db}/serial\ndefault_md=sha256\npolicy=p\n[p]\ncommonName=supplied\n\
             [leaf]\nsubjectAltName={san}\nextendedKeyUsage=serverAuth\n"
        ),
    );
    openssl(
        &[
            "ca",
            "-batch",
            "-notext",
            "-config",
            &cnf,
            "-cert",
            &format!("{ca}.crt"),
            "-keyfile",
            &format!("{ca}.key"),
            "-in",
            &csr,
            "-out",
            &crt,
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200201000000Z",
            "-extensions",
            "leaf",
        ],
        dir,
    );
    (dir.join(crt), dir.join(key))
}

impl Pki {
    pub fn new(dir: &Path) -> Pki {
        make_ca(dir, "ca");
        make_ca(dir, "other-ca");
        let san = "DNS:origin.test,IP:127.0.0.1";
        Pki {
            ca: dir.join("ca.crt"),
            server: make_leaf(dir, ("server", "ca"), san, "serverAuth"),
            client: make_leaf(dir, ("client", "ca"), "DNS:proxy.test", "clientAuth"),
            rogue: make_leaf(dir, ("rogue", "other-ca"), san, "serverAuth"),
        }
    }
}

/// nginx serving TLS on a loopback port with `cert`, `server_extra` in its server block,
/// passing every request to `echo`; each response says which of nginx's connections carried
/// it, whether its session was resumed, the SNI and the client certificate's check.
pub struct Nginx {
    pub proc: Proc,
    pub addr: SocketAddr,
}

impl Nginx {
    pub fn start(
        dir: &Path,
        cert: &(PathBuf, PathBuf),
        server_extra: &str,
        echo: SocketAddr,
    ) -> Nginx {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let d = dir.join(format!("nginx-{}", addr.port()));
        std::fs::create_dir_all(&d).expect("nginx dir");
        let conf = d.join("nginx.conf");
        write_file(
            &conf,
            &format!(
                "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
                 error_log {d}/error.log info;\nevents {{ worker_connections 256; }}\n\
                 http {{\n access_log off;\n client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
                 fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
                 server {{\n  listen {addr} ssl;\n  ssl_certificate {crt};\n  ssl_certificate_key {key};\n\
                 {server_extra}\n\
                 location / {{\n   proxy_pass http://{echo};\n   proxy_http_version 1.1;\n\
                 add_header X-Conn $connection always;\n   add_header X-Reused $ssl_session_reused always;\n\
                 add_header X-Sni \"$ssl_server_name\" always;\n\
                 add_header X-Client \"$ssl_client_verify\" always;\n   add_header X-Alpn \"$ssl_alpn_protocol\" always;\n  }}\n }}\n}}\n",
                d = d.display(),
                crt = cert.0.display(),
                key = cert.1.display(),
            ),
        );
        let mut cmd = Command::new("/usr/sbin/nginx");
        cmd.arg("-c").arg(&conf).arg("-p").arg(&d);
        let proc = Proc::spawn("nginx", cmd, &d);
        assert!(
            wait_for_port(addr, T),
            "nginx did not start\n{}",
            proc.logs()
        );
        Nginx { proc, addr }
    }
}

/// An origin answering with the method and the body it got.
pub fn echo() -> Origin {
    Origin::start(|r| Response::ok(format!("{} {}", r.method, String::from_utf8_lossy(&r.body))))
}

/// A proxy (one worker, a stats listener) whose default group is `nginx` with `group_extra`.
pub fn start_proxy(
    setup: Setup,
    nginx: &Nginx,
    group_extra: &str,
) -> (Proxy, SocketAddr, SocketAddr) {
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let conf = setup.config(
        nginx.addr,
        group_extra,
        &format!("worker_threads 1;\nstats_listen {stats};"),
    );
    let http = setup.http;
    (setup.start(&conf), http, stats)
}

/// A response's status, head (lower-cased) and body.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = format!("{}:", name.to_ascii_lowercase());
        let line = self.head.lines().find(|l| l.starts_with(&name))?;
        Some(line[name.len()..].trim())
    }
}

pub fn exchange(http: SocketAddr, method: &str, body: &str) -> Answer {
    let req = format!(
        "{method} /x HTTP/1.1\r\nHost: site.test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let raw = raw_exchange(http, req.as_bytes(), T).expect("exchange with the proxy");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Answer {
        status: head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0),
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

pub fn handshakes(stats: SocketAddr, result: &str) -> u64 {
    metric_sum(
        stats,
        &format!("ktls_proxy_upstream_tls_handshakes_total{{result=\"{result}\"}}"),
    )
}

/// Waits (bounded) until the proxy's log says `needle` (case-insensitive).
pub fn logged(proxy: &Proxy, needle: &str) -> bool {
    let deadline = Instant::now() + T;
    let needle = needle.to_ascii_lowercase();
    while Instant::now() < deadline {
        if proxy.proc.logs().to_ascii_lowercase().contains(&needle) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Waits (bounded by `T` twice over) until `metric` reads `want`.
pub fn wait_metric(stats: SocketAddr, metric: &str, want: u64) -> bool {
    let deadline = Instant::now() + 2 * T;
    while Instant::now() < deadline {
        if metric_sum(stats, metric) == want {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
