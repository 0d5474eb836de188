//! Starting the real `proxy` binary for a test: write a configuration into a temporary
//! directory, start the process, wait until it serves.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{
    bin_path, free_port, gen_cert, wait_for_port, workspace_root, write_file, KeyKind, Proc,
    TempDir,
};

/// A running proxy and the directory holding its configuration and logs.
pub struct Proxy {
    pub proc: Proc,
    pub dir: TempDir,
    pub config: PathBuf,
}

impl Proxy {
    /// Starts `proxy -c CONFIG` where CONFIG is `text`; waits until `wait_addr` accepts.
    pub fn start(dir: TempDir, text: &str, wait_addr: SocketAddr) -> Proxy {
        Proxy::start_with_env(dir, text, wait_addr, &[])
    }

    /// Writes `text` as the configuration and reloads it (SIGHUP); returns once the proxy
    /// logged one more "reloaded" than before (15 s at most, else the test fails).
    pub fn reload(&self, text: &str) {
        let before = self.proc.logs().matches("reloaded").count();
        write_file(&self.config, text);
        self.proc.signal(libc::SIGHUP);
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.proc.logs().matches("reloaded").count() == before {
            assert!(Instant::now() < deadline, "no reload\n{}", self.proc.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `start` with extra environment variables for the proxy.
    pub fn start_with_env(
        dir: TempDir,
        text: &str,
        wait_addr: SocketAddr,
        env: &[(&str, &std::path::Path)],
    ) -> Proxy {
        let config = dir.join("proxy.conf");
        write_file(&config, text);
        let mut cmd = Command::new(bin_path("proxy"));
        cmd.arg("-c").arg(&config);
        cmd.envs(env.iter().copied());
        let mut proc = Proc::spawn("proxy", cmd, dir.path());
        if !wait_for_port(wait_addr, Duration::from_secs(10))
            || !proc.wait_for_output("serving with", Duration::from_secs(5))
        {
            panic!("proxy did not start on {wait_addr}\n{}", proc.logs());
        }
        Proxy { proc, dir, config }
    }
}

/// Where a proxy without a `pid` directive writes its pid file (a file per configuration).
const DEFAULT_PID_DIR: &str = "/run";

impl Drop for Proxy {
    /// A proxy killed at the end of a test leaves its pid file behind (a file per
    /// configuration, and each test has its own): removed here, when it names this process.
    fn drop(&mut self) {
        let pid = self.proc.pid().to_string();
        let Ok(entries) = std::fs::read_dir(DEFAULT_PID_DIR) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let ours = name.to_string_lossy().starts_with("ktls-proxy-")
                && std::fs::read_to_string(entry.path()).is_ok_and(|t| t.trim() == pid);
            if ours {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Ports and certificate for a typical test: plain HTTP and HTTPS listeners on loopback.
pub struct Setup {
    pub dir: TempDir,
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Setup {
    pub fn new(tag: &str) -> Setup {
        let dir = TempDir::new(tag);
        let (cert, key) = gen_cert(
            dir.path(),
            "site",
            KeyKind::EcdsaP256,
            &["site.test", "localhost"],
        );
        let http = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
        Setup {
            dir,
            http,
            https,
            cert,
            key,
        }
    }

    /// A configuration with one vhost `site` proxying to `origin`, plus `extra` directives at
    /// top level (before the vhost, so that frang limits there apply to it) and `group_extra`
    /// inside the server group.
    pub fn config(&self, origin: SocketAddr, group_extra: &str, extra: &str) -> String {
        format!(
            "listen {http};\nlisten {https} proto=https;\n\
             srv_group default {{ server {origin}; {group_extra} }}\n\
             tls_match_any_server_name;\n\
             {extra}\n\
             vhost site {{ tls_certificate {cert}; tls_certificate_key {key}; proxy_pass default; }}\n\
             http_chain {{ -> site; }}\n",
            http = self.http,
            https = self.https,
            cert = self.cert.display(),
            key = self.key.display(),
        )
    }

    pub fn start(self, text: &str) -> Proxy {
        let wait = self.http;
        Proxy::start(self.dir, text, wait)
    }
}

/// etc/tempesta.conf with its listeners, backend and certificate moved to this test's.
pub fn shipped_config(
    dir: &TempDir,
    http: SocketAddr,
    https: SocketAddr,
    origin: SocketAddr,
) -> String {
    let text = std::fs::read_to_string(workspace_root().join("etc/tempesta.conf"))
        .expect("read etc/tempesta.conf");
    let (crt, key) = gen_cert(
        dir.path(),
        "tempesta",
        KeyKind::EcdsaP256,
        &["tempesta-tech.com"],
    );
    for needle in [
        "127.0.0.1:8443",
        "127.0.0.1:8080",
        "127.0.0.1:8000",
        "certs/tempesta.crt",
        "certs/tempesta.key",
    ] {
        assert!(text.contains(needle), "etc/tempesta.conf has no {needle}");
    }
    text.replace("127.0.0.1:8443", &https.to_string())
        .replace("127.0.0.1:8080", &http.to_string())
        .replace("127.0.0.1:8000", &origin.to_string())
        .replace("certs/tempesta.crt", &crt.display().to_string())
        .replace("certs/tempesta.key", &key.display().to_string())
}
