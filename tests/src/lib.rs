//! Harness for the end-to-end tests: find the real binaries, pick ephemeral loopback ports,
//! start processes that are stopped (by pid) when the test ends, make certificates with the
//! real `openssl` tool.
//!
//! The binaries are the release builds that `tests/run.sh` makes before `cargo test`; set
//! `KTLS_PROXY_BIN_DIR` to test another build.
#![forbid(unsafe_code)]

pub mod evil_origin;
pub mod faults;
pub mod h2frames;
pub mod origin;
pub mod pipeline_client;
pub mod proxy;
pub mod rawclient;
pub mod tagged_origin;
pub mod websocket;

use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The workspace root (this crate lives in `tests/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// A file of the team's shared folder (`../shared` beside the repository, or
/// `$KTLS_PROXY_SHARED_DIR`): its text, or None when `KTLS_PROXY_SKIP_SHARED=1` says to go
/// without it. Missing otherwise fails the test, never a silent skip: CI has the folder.
pub fn shared_file(rel: &str) -> Option<String> {
    let dir = std::env::var_os("KTLS_PROXY_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared"));
    let path = dir.join(rel);
    match std::fs::read_to_string(&path) {
        Ok(t) => Some(t),
        Err(_) if std::env::var_os("KTLS_PROXY_SKIP_SHARED").is_some() => {
            eprintln!(
                "SKIP (KTLS_PROXY_SKIP_SHARED): {} is missing",
                path.display()
            );
            None
        }
        Err(e) => panic!(
            "{}: {e}. This test reads the team's shared folder beside the repository; set \
             KTLS_PROXY_SHARED_DIR to where it is, or KTLS_PROXY_SKIP_SHARED=1 to skip it",
            path.display()
        ),
    }
}

/// Runs `proxy -c CONFIG ARGS...` (the binary under test) to its end.
pub fn proxy_cmd(config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bin_path("proxy"))
        .arg("-c")
        .arg(config)
        .args(args)
        .output()
        .expect("run proxy")
}

/// A finished command's standard output and error, as one text.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Path of one of the project's binaries (`proxy`, `tls-perf`, `http-perf`, `origin`).
pub fn bin_path(name: &str) -> PathBuf {
    let dirs: Vec<PathBuf> = match std::env::var_os("KTLS_PROXY_BIN_DIR") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_root().join("target"));
            vec![target.join("release"), target.join("debug")]
        }
    };
    for dir in &dirs {
        let path = dir.join(name);
        if path.is_file() {
            return path;
        }
    }
    panic!("binary `{name}` not found in {dirs:?}: run `cargo build --release` first (tests/run.sh does)");
}

/// A loopback port that was free a moment ago (for TCP and UDP), and never handed out before in
/// this process. Tests bind it right away.
///
/// Ports come from below the kernel's ephemeral range (`ip_local_port_range`), so that no
/// connection's source port and no `bind(0)` (a client, an origin a test starts on port 0)
/// can take one between this call and the bind: CI once failed with "Address already in
/// use" on a port handed out here. Each process starts at its own offset in that range, so
/// test binaries running side by side (two worktrees on one machine) rarely meet, and a
/// port found bound is skipped. The set makes a repeat within one test binary impossible
/// (the kernel once gave a just-released port to the next `bind(0)`, and a proxy refused
/// its own config with "duplicate listener").
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<(Vec<u16>, u32)> = std::sync::Mutex::new((Vec::new(), 0));
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let (low, high) = ports_below_ephemeral();
    let span = u32::from(high - low) + 1;
    let start = std::process::id().wrapping_mul(2_654_435_761) % span;
    for _ in 0..span {
        let port = low + ((start + given.1) % span) as u16;
        given.1 += 1;
        if !given.0.contains(&port) && port_is_free(port) {
            given.0.push(port);
            return port;
        }
    }
    panic!("no free loopback port in {low}..={high}");
}

/// The ports `free_port` hands out: from 10000 to the one below the ephemeral range (32767 on
/// Linux's default 32768-60999).
fn ports_below_ephemeral() -> (u16, u16) {
    let first_ephemeral = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    assert!(
        first_ephemeral > 12000,
        "ip_local_port_range starts at {first_ephemeral}: the tests need ports 10000-11999 outside it"
    );
    (10000, first_ephemeral - 1)
}

/// Whether nothing holds `port` on 127.0.0.1, for TCP or for UDP (the HTTP/3 listeners).
fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
        && std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
}

/// Waits until something accepts TCP connections on `addr`.
pub fn wait_for_port(addr: SocketAddr, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("ktls-proxy-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A child process that is killed (by pid) when dropped. Its stdout and stderr go to files,
/// so a chatty process never blocks on a full pipe, and a failing test can show them.
pub struct Proc {
    child: Child,
    name: String,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Proc {
    /// Starts `cmd` with output captured in `logs`.
    pub fn spawn(name: &str, mut cmd: Command, logs: &Path) -> Proc {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let stdout = logs.join(format!("{name}-{n}.out"));
        let stderr = logs.join(format!("{name}-{n}.err"));
        cmd.stdin(Stdio::null())
            .stdout(fs::File::create(&stdout).expect("create stdout log"))
            .stderr(fs::File::create(&stderr).expect("create stderr log"));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            child,
            name: name.to_string(),
            stdout,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Both logs, for assertion messages.
    pub fn logs(&self) -> String {
        format!(
            "--- {} stdout ---\n{}--- {} stderr ---\n{}",
            self.name,
            self.stdout(),
            self.name,
            self.stderr()
        )
    }

    /// Sends a signal (e.g. `libc::SIGHUP`).
    pub fn signal(&self, sig: i32) {
        send_signal(self.pid(), sig);
    }

    /// Waits for the process to exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the process prints `needle` on stdout or stderr.
    pub fn wait_for_output(&mut self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.stdout().contains(needle) || self.stderr().contains(needle) {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return self.stdout().contains(needle) || self.stderr().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            send_signal(self.pid(), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Runs a frame-level Python script (it needs the `h2` package) against `port` with `cases`
/// as its arguments, within `timeout_s`. Panics, with `context()` (e.g. the proxy's logs),
/// unless it exits 0 and prints `ok CASE` for every case. Returns its stdout.
pub fn python_h2_cases(
    script: &str,
    port: u16,
    cases: &[&str],
    timeout_s: u32,
    context: impl Fn() -> String,
) -> String {
    let probe = Command::new("python3")
        .args(["-c", "import h2.connection"])
        .status();
    assert!(
        probe.is_ok_and(|s| s.success()),
        "the Python h2 package is missing: python3 -m pip install h2 (tests/run.sh does)"
    );
    let out = Command::new("timeout")
        .args([&timeout_s.to_string(), "python3", script, &port.to_string()])
        .args(cases)
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        context()
    );
    for case in cases {
        assert!(stdout.contains(&format!("ok {case}\n")), "{case}: {stdout}");
    }
    stdout
}

/// Sends `sig` to `pid`. Used to stop what a test started, by pid.
pub fn send_signal(pid: u32, sig: i32) {
    // `kill` is a libc call on a pid this test started; no memory is shared.
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// Certificate kinds the proxy must serve.
#[derive(Clone, Copy, Debug)]
pub enum KeyKind {
    EcdsaP256,
    Rsa2048,
}

/// Fails loudly, with the install hint, where aioquic (the HTTP/3 client of the tests) is
/// missing.
pub fn need_aioquic() {
    let probe = Command::new("python3")
        .args(["-c", "import aioquic"])
        .status();
    assert!(
        probe.is_ok_and(|s| s.success()),
        "aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)"
    );
}

/// Makes a self-signed certificate for `names` (the first is the CN) with the real `openssl`
/// tool; returns (certificate, key) paths inside `dir`.
pub fn gen_cert(dir: &Path, stem: &str, kind: KeyKind, names: &[&str]) -> (PathBuf, PathBuf) {
    let crt = dir.join(format!("{stem}.crt"));
    let key = dir.join(format!("{stem}.key"));
    let cn = names.first().copied().unwrap_or("localhost");
    let san: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    let mut cmd = Command::new("openssl");
    cmd.args(["req", "-x509", "-nodes", "-days", "30", "-subj"])
        .arg(format!("/CN={cn}"))
        .arg("-addext")
        .arg(format!("subjectAltName={}", san.join(",")))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt);
    match kind {
        KeyKind::EcdsaP256 => cmd.args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]),
        KeyKind::Rsa2048 => cmd.args(["-newkey", "rsa:2048"]),
    };
    let out = cmd.output().expect("run openssl req");
    assert!(
        out.status.success(),
        "openssl req failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (crt, key)
}

/// Writes `text` to `path`.
pub fn write_file(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Sends raw bytes over plain TCP and reads until the peer closes or `timeout` passes.
pub fn raw_exchange(addr: SocketAddr, request: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(request)?;
    let mut response = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                break
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        }
    }
    Ok(response)
}

/// Runs `curl` with `args`, bounded to `max_secs`; returns (exit status, stdout, stderr).
pub fn curl(args: &[&str], max_secs: u32) -> (ExitStatus, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", &max_secs.to_string()])
        .args(args)
        .output()
        .expect("run curl (apt-get install curl)");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The sum of the samples of metric `name` (its labels, if any, included in `name` or not)
/// on the stats listener `stats`.
pub fn metric_sum(stats: std::net::SocketAddr, name: &str) -> u64 {
    let (st, out, err) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(st.success(), "metrics: {err}");
    out.lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter_map(|rest| rest.rsplit(' ').next()?.trim().parse::<u64>().ok())
        .sum()
}

/// A process's resident memory now and at its peak (`VmRSS`, `VmHWM`), in KiB; zeros once
/// it is gone.
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The Chromium binary installed (Debian's `chromium-headless-shell` or `chromium`), for
/// the browser tests; `None` where there is none, which is a failure instead when
/// `KTLS_PROXY_REQUIRE_CHROMIUM` is set. `what` names what goes unchecked without it.
pub fn chromium(what: &str) -> Option<&'static str> {
    let found = ["chromium-headless-shell", "chromium", "chromium-browser"]
        .into_iter()
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("KTLS_PROXY_REQUIRE_CHROMIUM").is_none(),
            "KTLS_PROXY_REQUIRE_CHROMIUM is set but chromium is not installed"
        );
        eprintln!("{what} not checked in a browser: chromium is not installed");
    }
    found
}

/// Headless `chromium` fetching `https://site.test:PORT{path}` over QUIC only
/// (`--origin-to-force-quic-on`, site.test mapped to 127.0.0.1), trusting the key of the
/// certificate at `cert` (its SPKI pinned), with its profile in `profile`; at most 60 s.
/// The page's DOM is on the output's stdout.
pub fn chromium_over_quic(
    chromium: &str,
    (cert, profile): (&std::path::Path, &std::path::Path),
    port: u16,
    path: &str,
) -> std::process::Output {
    let spki = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -in {} -pubkey -noout | openssl pkey -pubin -outform der \
             | openssl dgst -sha256 -binary | base64",
            cert.display()
        ))
        .output()
        .expect("openssl");
    let spki = String::from_utf8_lossy(&spki.stdout).trim().to_string();
    std::process::Command::new("timeout")
        .args([
            "60",
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--origin-to-force-quic-on=site.test:{port}"))
        .arg("--host-resolver-rules=MAP site.test 127.0.0.1")
        .arg(format!("--ignore-certificate-errors-spki-list={spki}"))
        .args(["--dump-dom", &format!("https://site.test:{port}{path}")])
        .output()
        .expect("chromium")
}

/// The lines of the file at `path` once it has `n` of them, or what it has after `timeout`
/// (an access log: lines are written as exchanges end).
pub fn lines_once(path: &std::path::Path, n: usize, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An RFC 9110 IMF-fixdate, written here independently of the cache crate.
pub fn http_date(at: std::time::SystemTime) -> String {
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let mn = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(month - 1) as usize];
    format!("{wd}, {d:02} {mn} {year} {h:02}:{m:02}:{s:02} GMT")
}
