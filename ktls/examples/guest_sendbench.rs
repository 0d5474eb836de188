//! sendfile vs writev on a kTLS socket (tests/ktls-vm/guest.sh): how should the proxy send a
//! stored response body (a cache hit) on a connection whose records the kernel encrypts?
//!
//!     guest_sendbench [--mb-per-round N] [--rounds N] [--cipher TLS13_SUITE]
//!
//! A server built like the proxy's (TlsSession on the fd, `offload`, both directions in the
//! kernel) sends the same bytes, held in memory, by `KtlsSocket::writev` of the buffer and by
//! `KtlsSocket::sendfile` from a file holding the same bytes (the ktls crate has no memfd API
//! and examples use no `unsafe`, so the file is an unlinked temp file in $TMPDIR, tmpfs in the
//! guest: page-cache pages, as a memfd would be). A user-space OpenSSL client in another
//! thread reads and checks every byte. For body sizes 26 KB and 5 MB, in rounds that alternate
//! which method goes first, it prints per method wall-clock throughput and bytes per CPU-second
//! of the sending thread (from /proc/thread-self/schedstat, which includes the kernel's
//! encryption done in the send call), the medians, then one `sendbench: PASS|FAIL` line.

use std::fs::File;
use std::io::{IoSlice, Read, Seek, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use ktls::offload::{self, KtlsMode, KtlsSocket, Offload};
use ktls::{IoStatus, Progress, TlsSession};
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::ssl::{Ssl, SslContext, SslContextBuilder, SslMethod, SslVerifyMode, SslVersion};
use openssl::x509::{X509Name, X509};

const IO_TIMEOUT: Duration = Duration::from_secs(30);
const SIZES: [usize; 2] = [26_000, 5_000_000];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Method {
    Writev,
    Sendfile,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Writev => "writev",
            Method::Sendfile => "sendfile",
        }
    }
}

/// The command line.
struct Options {
    mb_per_round: usize,
    rounds: usize,
    cipher: String,
}

fn main() -> ExitCode {
    let Some(opts) = parse_args() else {
        eprintln!("usage: guest_sendbench [--mb-per-round N] [--rounds N] [--cipher TLS13_SUITE]");
        return ExitCode::from(2);
    };
    let mut failures = Vec::new();
    let summary: Vec<String> = SIZES
        .iter()
        .map(|&size| bench_size(&opts, size, &mut failures))
        .collect();
    println!(
        "sendbench_summary (medians of {} rounds) {}",
        opts.rounds,
        summary.join(" ")
    );
    if failures.is_empty() {
        println!("sendbench: PASS");
        ExitCode::SUCCESS
    } else {
        println!("sendbench: FAIL {}", failures.join("; "));
        ExitCode::FAILURE
    }
}

/// The options, or None for a bad command line.
fn parse_args() -> Option<Options> {
    let mut opts = Options {
        mb_per_round: 16,
        rounds: 3,
        cipher: "TLS_AES_128_GCM_SHA256".to_string(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (
            arg.as_str(),
            args.next().map(|v| (v.parse::<usize>().ok(), v)),
        ) {
            ("--mb-per-round", Some((Some(n), _))) if n > 0 => opts.mb_per_round = n,
            ("--rounds", Some((Some(n), _))) if n > 0 => opts.rounds = n,
            ("--cipher", Some((_, v))) => opts.cipher = v,
            _ => return None,
        }
    }
    Some(opts)
}

/// All rounds of one body size, each line printed; failures are added to `failures`. Answers
/// the size's summary: the medians of each method.
fn bench_size(opts: &Options, size: usize, failures: &mut Vec<String>) -> String {
    let reps = (opts.mb_per_round * 1_000_000 / size).max(1);
    let mut results: Vec<(Method, Measure)> = Vec::new();
    // Rounds alternate which method goes first, so drift in the guest hits both alike.
    for round in 0..opts.rounds {
        let order = if round % 2 == 0 {
            [Method::Writev, Method::Sendfile]
        } else {
            [Method::Sendfile, Method::Writev]
        };
        for method in order {
            match run(&opts.cipher, size, reps, method) {
                Ok(m) => {
                    println!(
                        "sendbench {} size={size} reps={reps} round={round}: {:.1} MiB/s wall, sender cpu {:.3}s ({:.1} MiB per cpu-s)",
                        method.as_str(),
                        m.mib_s(),
                        m.cpu_secs,
                        m.mib_per_cpu_s(),
                    );
                    results.push((method, m));
                }
                Err(e) => {
                    println!("sendbench {} size={size}: FAIL {e}", method.as_str());
                    failures.push(format!("{} {size}: {e}", method.as_str()));
                }
            }
        }
    }
    let (w_wall, w_cpu) = medians(&results, Method::Writev);
    let (s_wall, s_cpu) = medians(&results, Method::Sendfile);
    format!(
        "size={size} writev={w_wall:.1}MiB/s,{w_cpu:.1}MiB/cpu-s sendfile={s_wall:.1}MiB/s,{s_cpu:.1}MiB/cpu-s"
    )
}

/// The median wall-clock throughput and the median bytes per CPU-second of `method`.
fn medians(results: &[(Method, Measure)], method: Method) -> (f64, f64) {
    let mut wall: Vec<f64> = results
        .iter()
        .filter(|(m, _)| *m == method)
        .map(|(_, r)| r.mib_s())
        .collect();
    let mut cpu: Vec<f64> = results
        .iter()
        .filter(|(m, _)| *m == method)
        .map(|(_, r)| r.mib_per_cpu_s())
        .collect();
    (median(&mut wall), median(&mut cpu))
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

struct Measure {
    bytes: usize,
    wall_secs: f64,
    cpu_secs: f64,
}

impl Measure {
    fn mib_s(&self) -> f64 {
        self.bytes as f64 / 1048576.0 / self.wall_secs.max(1e-9)
    }
    fn mib_per_cpu_s(&self) -> f64 {
        self.bytes as f64 / 1048576.0 / self.cpu_secs.max(1e-9)
    }
}

/// This thread's CPU time so far, user + system (ns resolution from schedstat; falls back to
/// the clock-tick fields of /proc/thread-self/stat).
fn thread_cpu_secs() -> f64 {
    if let Ok(text) = std::fs::read_to_string("/proc/thread-self/schedstat") {
        if let Some(ns) = text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        {
            return ns as f64 / 1e9;
        }
    }
    let text = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// Deterministic body bytes.
fn body(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 16) as u8)
        .collect()
}

fn contexts(cipher: &str) -> Result<(SslContext, SslContext), String> {
    let e = |e: openssl::error::ErrorStack| e.to_string();
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).map_err(e)?;
    let key = PKey::from_ec_key(EcKey::generate(&group).map_err(e)?).map_err(e)?;
    let mut name = X509Name::builder().map_err(e)?;
    name.append_entry_by_text("CN", "localhost").map_err(e)?;
    let name = name.build();
    let mut cert = X509::builder().map_err(e)?;
    cert.set_version(2).map_err(e)?;
    let serial = BigNum::from_u32(1)
        .and_then(|b| b.to_asn1_integer())
        .map_err(e)?;
    cert.set_serial_number(&serial).map_err(e)?;
    cert.set_subject_name(&name).map_err(e)?;
    cert.set_issuer_name(&name).map_err(e)?;
    cert.set_pubkey(&key).map_err(e)?;
    let not_before = Asn1Time::days_from_now(0).map_err(e)?;
    let not_after = Asn1Time::days_from_now(2).map_err(e)?;
    cert.set_not_before(&not_before).map_err(e)?;
    cert.set_not_after(&not_after).map_err(e)?;
    cert.sign(&key, MessageDigest::sha256()).map_err(e)?;
    let cert = cert.build();

    let mut server = SslContextBuilder::new(SslMethod::tls_server()).map_err(e)?;
    ktls::ossl::configure_context(&mut server, true);
    offload::capture_secrets(&mut server).map_err(e)?;
    server.set_private_key(&key).map_err(e)?;
    server.set_certificate(&cert).map_err(e)?;
    let mut client = SslContextBuilder::new(SslMethod::tls_client()).map_err(e)?;
    client.set_verify(SslVerifyMode::NONE);
    for b in [&mut server, &mut client] {
        ktls::settings::set_protocol_versions(b, SslVersion::TLS1_3, SslVersion::TLS1_3)
            .map_err(e)?;
        ktls::settings::set_tls13_ciphersuites(b, cipher).map_err(e)?;
    }
    Ok((server.build(), client.build()))
}

fn status(s: IoStatus, what: &str) -> Result<usize, String> {
    match s {
        IoStatus::Done(n) => Ok(n),
        other => Err(format!("{what}: {other:?}")),
    }
}

/// One connection: `reps` bodies of `size` bytes by `method`, checked by the client.
fn run(cipher: &str, size: usize, reps: usize, method: Method) -> Result<Measure, String> {
    let (server_ctx, client_ctx) = contexts(cipher)?;
    let data = body(size);
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let expect = data.clone();
    let client = thread::Builder::new()
        .name("sendbench-client".to_string())
        .spawn(move || -> Result<(), String> {
            let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
            tcp.set_read_timeout(Some(IO_TIMEOUT))
                .map_err(|e| e.to_string())?;
            let ssl = Ssl::new(&client_ctx).map_err(|e| e.to_string())?;
            let mut stream = ssl.connect(tcp).map_err(|e| format!("handshake: {e}"))?;
            let mut got = vec![0u8; size];
            for rep in 0..reps {
                stream
                    .read_exact(&mut got)
                    .map_err(|e| format!("client read, body {rep}: {e}"))?;
                if got != expect {
                    return Err(format!("body {rep} differs"));
                }
            }
            // Tell the server everything arrived.
            stream.write_all(b"k").map_err(|e| e.to_string())?;
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    let served = serve(&listener, &server_ctx, &data, reps, method);
    if served.is_err() {
        // Unblocks a client still waiting.
        drop(listener);
    }
    let client = client
        .join()
        .map_err(|_| "client thread panicked".to_string())?;
    let m = served?;
    client.map_err(|e| format!("client: {e}"))?;
    Ok(m)
}

fn serve(
    listener: &TcpListener,
    ctx: &SslContext,
    data: &[u8],
    reps: usize,
    method: Method,
) -> Result<Measure, String> {
    let (stream, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let fd = stream.as_fd();
    let mut ssl = Ssl::new(ctx).map_err(|e| e.to_string())?;
    offload::prepare_ssl(&mut ssl).map_err(|e| e.to_string())?;
    ssl.set_accept_state();
    let mut session = TlsSession::new(ssl, fd).map_err(|e| e.to_string())?;
    match session.handshake(fd) {
        Ok(Progress::Done) => {}
        other => return Err(format!("handshake: {other:?}")),
    }
    let mut sock = match offload::offload(session, fd, KtlsMode::Auto) {
        Offload::Kernel(sock) => sock,
        Offload::UserSpace { reason, .. } | Offload::Records { reason, .. } => {
            return Err(format!("not offloaded to the kernel ({})", reason.as_str()))
        }
    };
    // The file holds the same bytes, written before the clock starts (a cache would have
    // stored them before the hit, too).
    let mut file = temp_file(data)?;
    let cpu0 = thread_cpu_secs();
    let t0 = Instant::now();
    for _ in 0..reps {
        match method {
            Method::Writev => send_writev(&mut sock, fd, data)?,
            Method::Sendfile => send_file(&mut sock, fd, &mut file, data.len())?,
        }
    }
    let mut ack = [0u8; 1];
    status(sock.read(fd, &mut ack), "waiting for the client's ack")?;
    let wall_secs = t0.elapsed().as_secs_f64();
    let cpu_secs = thread_cpu_secs() - cpu0;
    let _ = sock.shutdown(fd);
    Ok(Measure {
        bytes: data.len() * reps,
        wall_secs,
        cpu_secs,
    })
}

fn send_writev(sock: &mut KtlsSocket, fd: BorrowedFd<'_>, data: &[u8]) -> Result<(), String> {
    let mut off = 0;
    while off < data.len() {
        off += status(sock.writev(fd, &[IoSlice::new(&data[off..])]), "writev")?;
    }
    Ok(())
}

fn send_file(
    sock: &mut KtlsSocket,
    fd: BorrowedFd<'_>,
    file: &mut File,
    len: usize,
) -> Result<(), String> {
    let mut offset = 0u64;
    while (offset as usize) < len {
        let left = len - offset as usize;
        let n = status(
            sock.sendfile(fd, file.as_fd(), &mut offset, left),
            "sendfile",
        )?;
        if n == 0 {
            return Err("sendfile sent nothing".to_string());
        }
    }
    Ok(())
}

fn temp_file(data: &[u8]) -> Result<File, String> {
    let path = std::env::temp_dir().join(format!(
        "ktls-sendbench-{}-{}.bin",
        std::process::id(),
        data.len()
    ));
    let mut file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    file.write_all(data).map_err(|e| e.to_string())?;
    file.rewind().map_err(|e| e.to_string())?;
    Ok(file)
}
