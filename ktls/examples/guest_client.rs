//! The kTLS guest's HTTPS client (tests/ktls-vm/guest.sh, stage 2): user-space OpenSSL
//! (`SslStream` over a std `TcpStream`, its own record layer, nothing shared with the proxy's
//! code) talking to the real proxy in front of `guest_origin`, every body byte checked.
//!
//!     guest_client suite ADDR 1.2|1.3 CIPHER [--big N] [--keepalive N]
//!                  [--keyupdate close|follow|skip]
//!     guest_client hold ADDR --conns N --release FILE [--timeout SECS]
//!     guest_client slot-reuse ADDR
//!
//! `suite` prints one `case ...` line per check (PASS/FAIL) and ends with
//! `client: cases=N failed=M`; exit status 1 if any failed. The checks, on connections with
//! the given version and cipher forced on the client side:
//! - `fetch`: GET /bytes/10, /bytes/26000, /bytes/BIG on one connection, byte-exact;
//! - `keepalive`: N more requests (10 B and 26 KB alternating) on that same connection;
//! - `close_notify`: the client sends close_notify, the proxy must close the connection (its
//!   close_notify or TCP FIN) within the timeout, without sending anything else;
//! - `keyupdate` (TLS 1.3): after one response the client sends a KeyUpdate and a request;
//!   `close`: the proxy (kTLS: the kernel cannot rekey) must close without answering;
//!   `follow`: the proxy (user space) must answer under the new key.
//!
//! `slot-reuse` (plain TCP, no TLS needed): connection A is accepted and closed during its
//! handshake; 9 s later connection B (which takes A's place in the proxy's connection table)
//! connects and sends nothing. B must be closed by the proxy's 10 s handshake timeout, not
//! by A's stale timer one second later.
//!
//! `hold` opens N TLS 1.3 connections, answers one request on each (so every connection is
//! in the keep-alive idle state), prints `held N`, and keeps them open until FILE exists.

#[path = "guest_common/pattern.rs"]
mod pattern;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use openssl::ssl::{
    ShutdownState, Ssl, SslContext, SslContextBuilder, SslMethod, SslStream, SslVerifyMode,
    SslVersion,
};

/// Any blocking socket call taking longer than this fails the check (never a hang).
const IO_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the proxy may take to close after close_notify or a KeyUpdate.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
const SNI: &str = "localhost";
/// Threads opening the held connections.
const HOLD_THREADS: usize = 8;

type Conn = BufReader<SslStream<TcpStream>>;
/// A held connection, with how long its handshake and its first request took.
type Held = (Conn, Duration, Duration);
/// One thread's connections, and the failures it retried.
type HeldByThread = (Vec<Held>, Vec<String>);

struct Suite {
    addr: String,
    version: SslVersion,
    cipher: String,
    big: u64,
    keepalive: usize,
    keyupdate: String,
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: guest_client suite ADDR 1.2|1.3 CIPHER [--big N] [--keepalive N] [--keyupdate close|follow|skip]\n       guest_client hold ADDR --conns N --release FILE [--timeout SECS]\n       guest_client slot-reuse ADDR"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("suite") if args.len() >= 4 => {
            let version = match args[2].as_str() {
                "1.2" => SslVersion::TLS1_2,
                "1.3" => SslVersion::TLS1_3,
                _ => return usage(),
            };
            let mut suite = Suite {
                addr: args[1].clone(),
                version,
                cipher: args[3].clone(),
                big: 5_000_000,
                keepalive: 100,
                keyupdate: "skip".to_string(),
            };
            let mut it = args[4..].iter();
            while let Some(flag) = it.next() {
                let value = it.next();
                match (flag.as_str(), value) {
                    ("--big", Some(v)) => match v.parse() {
                        Ok(n) => suite.big = n,
                        Err(_) => return usage(),
                    },
                    ("--keepalive", Some(v)) => match v.parse() {
                        Ok(n) => suite.keepalive = n,
                        Err(_) => return usage(),
                    },
                    ("--keyupdate", Some(v)) => suite.keyupdate = v.clone(),
                    _ => return usage(),
                }
            }
            run_suite(&suite)
        }
        Some("hold") if args.len() >= 2 => {
            let (mut conns, mut release, mut timeout) = (0usize, None, 300u64);
            let mut it = args[2..].iter();
            while let Some(flag) = it.next() {
                let value = it.next();
                match (flag.as_str(), value) {
                    ("--conns", Some(v)) => match v.parse() {
                        Ok(n) => conns = n,
                        Err(_) => return usage(),
                    },
                    ("--release", Some(v)) => release = Some(PathBuf::from(v)),
                    ("--timeout", Some(v)) => match v.parse() {
                        Ok(n) => timeout = n,
                        Err(_) => return usage(),
                    },
                    _ => return usage(),
                }
            }
            let Some(release) = release else {
                return usage();
            };
            match hold(&args[1], conns, &release, Duration::from_secs(timeout)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    println!("client: FAIL hold: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some("slot-reuse") if args.len() == 2 => slot_reuse(&args[1]),
        _ => usage(),
    }
}

// ---------------------------------------------------------------- connections

fn context(version: SslVersion, cipher: &str) -> Result<SslContext, String> {
    let mut b = SslContextBuilder::new(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    b.set_verify(SslVerifyMode::NONE);
    ktls::settings::set_protocol_versions(&mut b, version, version).map_err(|e| e.to_string())?;
    if version == SslVersion::TLS1_3 {
        ktls::settings::set_tls13_ciphersuites(&mut b, cipher).map_err(|e| e.to_string())?;
    } else {
        b.set_cipher_list(cipher).map_err(|e| e.to_string())?;
    }
    b.set_alpn_protos(b"\x08http/1.1")
        .map_err(|e| e.to_string())?;
    Ok(b.build())
}

fn connect(ctx: &SslContext, addr: &str) -> Result<Conn, String> {
    let tcp = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    tcp.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut ssl = Ssl::new(ctx).map_err(|e| e.to_string())?;
    ssl.set_hostname(SNI).map_err(|e| e.to_string())?;
    let stream = ssl.connect(tcp).map_err(|e| format!("handshake: {e}"))?;
    Ok(BufReader::with_capacity(64 * 1024, stream))
}

fn send_request(conn: &mut Conn, len: u64) -> Result<(), String> {
    let req = format!("GET /bytes/{len} HTTP/1.1\r\nHost: {SNI}\r\n\r\n");
    let stream = conn.get_mut();
    stream
        .write_all(req.as_bytes())
        .and_then(|()| stream.flush())
        .map_err(|e| format!("write request: {e}"))
}

/// Reads one response and checks it: 200, a body of exactly `len` bytes of the pattern.
fn read_response(conn: &mut Conn, len: u64) -> Result<(), String> {
    let (content_length, chunked) = read_head(conn)?;
    let mut body = BodyCheck {
        len,
        got: 0,
        buf: vec![0u8; 64 * 1024],
    };
    match (content_length, chunked) {
        (Some(n), false) => {
            if n != len {
                return Err(format!("Content-Length {n}, expected {len}"));
            }
            body.read(conn, n)?;
        }
        (None, true) => read_chunked(conn, &mut body)?,
        _ => return Err("response without usable framing".to_string()),
    }
    if body.got != len {
        return Err(format!("body {} bytes, expected {len}", body.got));
    }
    Ok(())
}

/// Reads the status line (which must be 200) and the fields: (Content-Length, chunked).
fn read_head(conn: &mut Conn) -> Result<(Option<u64>, bool), String> {
    let mut line = String::new();
    let n = conn
        .read_line(&mut line)
        .map_err(|e| format!("status line: {e}"))?;
    if n == 0 {
        return Err("connection closed before the response".to_string());
    }
    if !line.starts_with("HTTP/1.1 200") {
        return Err(format!("status line {:?}", line.trim_end()));
    }
    let (mut content_length, mut chunked) = (None, false);
    loop {
        line.clear();
        conn.read_line(&mut line)
            .map_err(|e| format!("header: {e}"))?;
        let field = line.trim_end();
        if field.is_empty() {
            break;
        }
        if let Some((name, value)) = field.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                content_length = Some(
                    value
                        .parse::<u64>()
                        .map_err(|_| format!("bad Content-Length {value:?}"))?,
                );
            } else if name.eq_ignore_ascii_case("transfer-encoding")
                && value.eq_ignore_ascii_case("chunked")
            {
                chunked = true;
            }
        }
    }
    Ok((content_length, chunked))
}

/// Reads a chunked body through `body`, refusing one longer than expected.
fn read_chunked(conn: &mut Conn, body: &mut BodyCheck) -> Result<(), String> {
    let len = body.len;
    let mut line = String::new();
    loop {
        line.clear();
        conn.read_line(&mut line)
            .map_err(|e| format!("chunk size: {e}"))?;
        let size = line.trim_end().split(';').next().unwrap_or("");
        let size = u64::from_str_radix(size, 16).map_err(|_| format!("bad chunk size {line:?}"))?;
        if body.got + size > len {
            return Err(format!("chunked body longer than {len}"));
        }
        body.read(conn, size)?;
        line.clear();
        conn.read_line(&mut line)
            .map_err(|e| format!("chunk end: {e}"))?;
        if size == 0 {
            return Ok(());
        }
    }
}

/// A body being read and checked against the pattern, `got` bytes so far of `len`.
struct BodyCheck {
    len: u64,
    got: u64,
    buf: Vec<u8>,
}

impl BodyCheck {
    /// Reads `n` more body bytes, each checked against the pattern at its offset.
    fn read(&mut self, conn: &mut Conn, mut n: u64) -> Result<(), String> {
        while n > 0 {
            let want = n.min(self.buf.len() as u64) as usize;
            conn.read_exact(&mut self.buf[..want])
                .map_err(|e| format!("body at {}: {e}", self.got))?;
            if let Some(at) = pattern::first_mismatch(&self.buf[..want], self.got) {
                return Err(format!("body byte {at} differs (len {})", self.len));
            }
            self.got += want as u64;
            n -= want as u64;
        }
        Ok(())
    }
}

fn get(conn: &mut Conn, len: u64) -> Result<(), String> {
    send_request(conn, len)?;
    read_response(conn, len)
}

/// Waits for the proxy to end the connection: `Ok(how)` if it did within CLOSE_TIMEOUT.
fn expect_close(conn: &mut Conn) -> Result<&'static str, String> {
    conn.get_ref()
        .get_ref()
        .set_read_timeout(Some(CLOSE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut buf = [0u8; 256];
    let result = conn.read(&mut buf);
    let how = if conn
        .get_mut()
        .get_shutdown()
        .contains(ShutdownState::RECEIVED)
    {
        "close_notify"
    } else {
        "tcp close"
    };
    match result {
        Ok(0) => Ok(how),
        Ok(n) => Err(format!("{n} unexpected bytes instead of a close")),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Err(format!(
            "still open after {:.1}s",
            started.elapsed().as_secs_f64()
        )),
        // A reset or OpenSSL's "unexpected eof" is a close too.
        Err(_) => Ok("reset/eof"),
    }
}

// ---------------------------------------------------------------- suite

struct Report {
    label: String,
    cases: usize,
    failed: usize,
}

impl Report {
    fn case(&mut self, name: &str, result: Result<String, String>) {
        self.cases += 1;
        match result {
            Ok(note) => println!("case {} {name} PASS {note}", self.label),
            Err(why) => {
                self.failed += 1;
                println!("case {} {name} FAIL :: {why}", self.label);
            }
        }
    }
}

fn run_suite(s: &Suite) -> ExitCode {
    let version = if s.version == SslVersion::TLS1_3 {
        "TLSv1.3"
    } else {
        "TLSv1.2"
    };
    let mut report = Report {
        label: format!("proxy {version} {}", s.cipher),
        cases: 0,
        failed: 0,
    };
    let ctx = match context(s.version, &s.cipher) {
        Ok(ctx) => ctx,
        Err(e) => {
            report.case("context", Err(e));
            return finish(&report);
        }
    };
    fetch_keepalive_close(&mut report, &ctx, s);
    if s.version == SslVersion::TLS1_3 && s.keyupdate != "skip" {
        let result =
            connect(&ctx, &s.addr).and_then(|mut conn| key_update(&mut conn, &s.keyupdate));
        report.case(&format!("keyupdate_{}", s.keyupdate), result);
    }
    finish(&report)
}

/// fetch, then keepalive, then close_notify, on one connection; each only if the one before
/// passed.
fn fetch_keepalive_close(report: &mut Report, ctx: &SslContext, s: &Suite) {
    let mut conn = match connect(ctx, &s.addr) {
        Ok(conn) => conn,
        Err(e) => return report.case("fetch", Err(e)),
    };
    let negotiated = conn
        .get_ref()
        .ssl()
        .current_cipher()
        .and_then(ktls::settings::cipher_standard_name)
        .unwrap_or("?")
        .to_string();
    let started = Instant::now();
    let fetched = [10, 26_000, s.big]
        .iter()
        .try_for_each(|&len| get(&mut conn, len));
    let secs = started.elapsed().as_secs_f64();
    let ok = fetched.is_ok();
    report.case(
        "fetch",
        fetched.map(|()| {
            format!(
                "10+26000+{} bytes exact, {negotiated}, {:.1} MiB/s",
                s.big,
                (s.big + 26_010) as f64 / 1048576.0 / secs.max(1e-9)
            )
        }),
    );
    if ok {
        let started = Instant::now();
        let kept = (0..s.keepalive).try_for_each(|i| {
            get(&mut conn, if i % 2 == 0 { 10 } else { 26_000 })
                .map_err(|e| format!("request {}: {e}", i + 1))
        });
        let ok = kept.is_ok();
        report.case(
            "keepalive",
            kept.map(|()| {
                format!(
                    "{} requests on one connection, {:.0} req/s",
                    s.keepalive,
                    s.keepalive as f64 / started.elapsed().as_secs_f64().max(1e-9)
                )
            }),
        );
        if ok {
            let closed = conn
                .get_mut()
                .shutdown()
                .map_err(|e| format!("sending close_notify: {e}"))
                .and_then(|_| expect_close(&mut conn));
            report.case(
                "close_notify",
                closed.map(|how| format!("proxy closed ({how})")),
            );
        }
    }
}

fn key_update(conn: &mut Conn, expect: &str) -> Result<String, String> {
    get(conn, 10)?;
    ktls::ossl::key_update(conn.get_ref().ssl()).map_err(|e| format!("key_update: {e}"))?;
    // The KeyUpdate goes out just before this request's record.
    send_request(conn, 26_000)?;
    if expect == "follow" {
        read_response(conn, 26_000)?;
        return Ok("answered under the new key".to_string());
    }
    expect_close(conn).map(|how| format!("proxy closed without answering ({how})"))
}

fn finish(report: &Report) -> ExitCode {
    println!("client: cases={} failed={}", report.cases, report.failed);
    if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

// ---------------------------------------------------------------- hold

fn hold(addr: &str, n: usize, release: &std::path::Path, timeout: Duration) -> Result<(), String> {
    let ctx = context(SslVersion::TLS1_3, "TLS_AES_128_GCM_SHA256")?;
    let started = Instant::now();
    // Several threads open connections side by side: on a one-vCPU guest this costs no more
    // CPU, but the proxy handles several handshakes per wake-up and the waits overlap.
    let threads = HOLD_THREADS.min(n.max(1));
    let opened: Vec<Result<HeldByThread, String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let ctx = &ctx;
                scope.spawn(move || {
                    let mine = n / threads + usize::from(t < n % threads);
                    let mut out = Vec::with_capacity(mine);
                    let mut retried = Vec::new();
                    for i in 0..mine {
                        let which = i * threads + t + 1;
                        // One retry: on a loaded host a handshake can miss a deadline. The
                        // reason is printed; a second failure ends the hold (before, the
                        // first one dropped every connection held, which the measurement
                        // then saw as a proxy that lost them).
                        let open = || -> Result<Held, String> {
                            let t0 = Instant::now();
                            let mut conn = connect(ctx, addr)?;
                            let t1 = Instant::now();
                            get(&mut conn, 10)?;
                            Ok((conn, t1 - t0, t1.elapsed()))
                        };
                        let held = open().or_else(|first| {
                            retried.push(format!("connection {which}: {first}"));
                            open().map_err(|e| format!("connection {which}: {first}; again: {e}"))
                        })?;
                        out.push(held);
                    }
                    Ok((out, retried))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("thread panicked".to_string()))
            })
            .collect()
    });
    let mut conns = Vec::with_capacity(n);
    let (mut handshakes, mut requests) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for result in opened {
        let (held, retried) = result?;
        for reason in retried {
            println!("retried {reason}");
        }
        for (conn, handshake, request) in held {
            conns.push(conn);
            handshakes.push(handshake);
            requests.push(request);
        }
    }
    println!(
        "held {n} connections ({:.1}s to open; handshake {}; first request {})",
        started.elapsed().as_secs_f64(),
        percentiles(&mut handshakes),
        percentiles(&mut requests)
    );
    let deadline = Instant::now() + timeout;
    while !release.exists() {
        if Instant::now() > deadline {
            return Err(format!("{} never appeared", release.display()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Every connection must still be usable after the idle period.
    for (i, conn) in conns.iter_mut().enumerate().take(10) {
        get(conn, 10).map_err(|e| format!("connection {} after idling: {e}", i + 1))?;
    }
    println!("released {n} connections");
    Ok(())
}

/// "p50/p99/max in ms" of `times`.
fn percentiles(times: &mut [Duration]) -> String {
    if times.is_empty() {
        return "-".to_string();
    }
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

// ---------------------------------------------------------------- slot reuse

fn slot_reuse(addr: &str) -> ExitCode {
    let result = (|| -> Result<f64, String> {
        let a = TcpStream::connect(addr).map_err(|e| format!("connect A: {e}"))?;
        std::thread::sleep(Duration::from_millis(200));
        drop(a);
        // A's handshake deadline (10 s after its accept) is still queued in the proxy.
        std::thread::sleep(Duration::from_secs(9));
        let mut b = TcpStream::connect(addr).map_err(|e| format!("connect B: {e}"))?;
        b.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        let mut byte = [0u8; 1];
        match b.read(&mut byte) {
            Ok(0) => {}
            Ok(_) => return Err("B got bytes without sending a ClientHello".to_string()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err("B still open after 30 s (no handshake timeout)".to_string())
            }
            Err(_) => {}
        }
        Ok(started.elapsed().as_secs_f64())
    })();
    let (verdict, note) = match result {
        Ok(secs) if secs >= 5.0 => (
            "PASS",
            format!("B closed after {secs:.1}s (its own handshake timeout)"),
        ),
        Ok(secs) => (
            "FAIL",
            format!(
                ":: B closed after {secs:.1}s, not by its own 10 s handshake timeout: A's stale timer fired on B (timer generation restarts at 0 for a reused connection slot)"
            ),
        ),
        Err(e) => ("FAIL", format!(":: {e}")),
    };
    println!("case proxy slot-reuse handshake timer {verdict} {note}");
    if verdict == "PASS" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
