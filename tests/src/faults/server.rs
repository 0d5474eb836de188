//! The server under test in a fault scenario: the proxy, or nginx as a reverse proxy in
//! front of the same origin (for the figures beside the proxy's), started by pid, sampled
//! from /proc and stopped by pid.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{bin_path, free_port, gen_cert, wait_for_port, write_file, KeyKind, Proc, TempDir};

/// Which server a scenario runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Proxy,
    Nginx,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Proxy => "proxy",
            Kind::Nginx => "nginx",
        }
    }
}

/// How to start a server.
#[derive(Clone, Debug)]
pub struct Spec {
    pub kind: Kind,
    pub origin: SocketAddr,
    /// The address its listeners bind (loopback, or the namespace's side of a veth pair).
    pub listen_ip: Ipv4Addr,
    /// A command the server's command line is appended to (`ip netns exec NS`, a cgroup
    /// wrapper); the pid stays the server's since each of them execs it.
    pub prefix: Vec<String>,
    /// The soak's mix: the cache on (the origin says what is cacheable) and WebSockets
    /// passed through (nginx: `/ws/` with the Upgrade fields set).
    pub mix: bool,
}

impl Spec {
    pub fn new(kind: Kind, origin: SocketAddr) -> Spec {
        Spec {
            kind,
            origin,
            listen_ip: Ipv4Addr::LOCALHOST,
            prefix: Vec::new(),
            mix: false,
        }
    }
}

/// Resident memory and open descriptors of a server's process tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub rss_kib: u64,
    pub fds: u64,
    pub processes: u64,
}

/// A running server.
pub struct Server {
    pub kind: Kind,
    pub proc: Proc,
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub config: PathBuf,
    pub dir: TempDir,
}

/// The Host (and :authority) the loads send; the proxy refuses an IP address as Host.
pub const HOST: &str = "site.test";

impl Server {
    pub fn start(spec: &Spec) -> Server {
        let dir = TempDir::new(&format!("faults-{}", spec.kind.name()));
        let (cert, key) = gen_cert(dir.path(), "site", KeyKind::EcdsaP256, &[HOST]);
        let http = SocketAddr::from((spec.listen_ip, free_port()));
        let https = SocketAddr::from((spec.listen_ip, free_port()));
        let (config, args) = match spec.kind {
            Kind::Proxy => {
                let config = dir.join("proxy.conf");
                write_file(
                    &config,
                    &proxy_config(spec, http, https, &cert, &key, dir.path()),
                );
                let args = vec![
                    bin_path("proxy").display().to_string(),
                    "-c".into(),
                    config.display().to_string(),
                ];
                (config, args)
            }
            Kind::Nginx => {
                let config = dir.join("nginx.conf");
                write_file(
                    &config,
                    &nginx_config(spec, http, https, &cert, &key, dir.path()),
                );
                let args = vec![
                    "/usr/sbin/nginx".into(),
                    "-c".into(),
                    config.display().to_string(),
                ];
                (config, args)
            }
        };
        let proc = spawn(spec, &args, dir.path());
        let server = Server {
            kind: spec.kind,
            proc,
            http,
            https,
            config,
            dir,
        };
        server.wait_ready(Duration::from_secs(15));
        server
    }

    fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let ready = wait_for_port(self.http, timeout)
            && wait_for_port(
                self.https,
                deadline.saturating_duration_since(Instant::now()),
            );
        assert!(ready, "{} did not start\n{}", self.kind.name(), self.logs());
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Whether the process (the proxy, or nginx's master) still runs.
    pub fn alive(&mut self) -> bool {
        self.proc.wait_exit(Duration::ZERO).is_none()
    }

    /// The server's logs (nginx's error log included).
    pub fn logs(&self) -> String {
        let error_log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
        format!("{}{error_log}", self.proc.logs())
    }

    /// What in the logs says a process of the server died of a fault (a panic, a signal).
    pub fn crash_signs(&self) -> Vec<String> {
        self.logs()
            .lines()
            .filter(|l| {
                l.contains("panicked")
                    || l.contains("exited on signal")
                    || l.contains("Segmentation")
                    || l.contains("core dumped")
            })
            .map(str::to_string)
            .collect()
    }

    /// Reload: SIGHUP (the proxy's `-s reload`, nginx's master re-reads its file too).
    pub fn reload(&self) {
        self.proc.signal(libc::SIGHUP);
    }

    pub fn sample(&self) -> Sample {
        sample_tree(self.pid())
    }
}

impl Drop for Server {
    /// nginx's workers outlive a master killed outright: a graceful stop first, by pid.
    fn drop(&mut self) {
        if self.kind == Kind::Nginx && self.alive() {
            self.proc.signal(libc::SIGTERM);
            let _ = self.proc.wait_exit(Duration::from_secs(5));
        }
    }
}

/// Starts `prefix + args` with the logs in `dir`.
pub fn spawn(spec: &Spec, args: &[String], dir: &Path) -> Proc {
    let all: Vec<&String> = spec.prefix.iter().chain(args.iter()).collect();
    let mut cmd = Command::new(all[0]);
    cmd.args(&all[1..]);
    Proc::spawn(spec.kind.name(), cmd, dir)
}

fn proxy_config(
    spec: &Spec,
    http: SocketAddr,
    https: SocketAddr,
    cert: &Path,
    key: &Path,
    dir: &Path,
) -> String {
    let cache = if spec.mix {
        "cache 1;\ncache_fulfill * *;\n"
    } else {
        ""
    };
    format!(
        "listen {http};\nlisten {https} proto=\"h2,https\";\nworker_threads 2;\n\
         pid {pid};\n\
         srv_group default {{ server {origin}; }}\n\
         tls_match_any_server_name;\n{cache}\
         vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
         http_chain {{ -> site; }}\n",
        pid = dir.join("proxy.pid").display(),
        origin = spec.origin,
        cert = cert.display(),
        key = key.display(),
    )
}

fn nginx_config(
    spec: &Spec,
    http: SocketAddr,
    https: SocketAddr,
    cert: &Path,
    key: &Path,
    dir: &Path,
) -> String {
    let d = dir.display();
    // The soak's mix: a cache (nginx stores what the origin marks cacheable, as the proxy
    // does) and a location for WebSockets, which nginx passes only with these fields.
    let (cache_path, cache, ws) = if spec.mix {
        (
            format!("  proxy_cache_path {d}/cache keys_zone=soak:8m;\n"),
            " proxy_cache soak;",
            "    location /ws/ { proxy_pass http://origin; proxy_http_version 1.1;\n\
               proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection upgrade; }\n"
                .to_string(),
        )
    } else {
        (String::new(), "", String::new())
    };
    format!(
        "user root;\nworker_processes 1;\ndaemon off;\nmaster_process on;\n\
         pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n\
           client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
           upstream origin {{ server {origin}; keepalive 32; }}\n{cache_path}\
           server {{\n    listen {http};\n    listen {https} ssl http2;\n\
             ssl_certificate {cert}; ssl_certificate_key {key};\n\
             location / {{ proxy_pass http://origin; proxy_http_version 1.1;{cache}\n\
               proxy_set_header Connection \"\"; }}\n{ws}  }}\n}}\n",
        origin = spec.origin,
        cert = cert.display(),
        key = key.display(),
    )
}

/// RSS and open descriptors summed over `pid` and its descendants, from /proc; but for
/// nginx's cache loader, a process of the soak's nginx that starts a minute in, reads the
/// (empty) cache directory and exits, and would show as a step in its samples.
pub fn sample_tree(pid: u32) -> Sample {
    let mut sample = Sample::default();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains("cache loader") {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
        let Some(rss) = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        else {
            continue;
        };
        sample.processes += 1;
        sample.rss_kib += rss;
        sample.fds += std::fs::read_dir(format!("/proc/{p}/fd"))
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        todo.extend(children(p));
    }
    sample
}

/// `pid` and its descendants.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let more = children(all[i]);
        all.extend(more);
        i += 1;
    }
    all
}

fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}
