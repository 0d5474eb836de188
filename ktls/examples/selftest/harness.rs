//! One self-test connection: a server on loopback built like the proxy's (TlsSession on the
//! socket fd, then `offload`) and an independent user-space OpenSSL client (`SslStream` over a
//! std `TcpStream`, its own record layer). Shared by `examples/selftest` (run in the kTLS
//! guest) and `tests/userspace_fallback.rs` (run on the host, which has no kTLS).

// The two sides, named from here with `path` so that this file's directory is the same
// whether it is the example's module or included by `tests/userspace_fallback.rs`.
#[path = "harness/client.rs"]
mod client;
#[path = "harness/server.rs"]
mod server;

use std::fs::File;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use ktls::offload::{self, FallbackReason};
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{SslContext, SslContextBuilder, SslMethod, SslVerifyMode, SslVersion};
use openssl::x509::{X509Name, X509};

use client::{client, ClientReport};
use server::{serve, ServerReport};

/// Any blocking socket call taking longer than this is a failed case, never a hang.
const IO_TIMEOUT: Duration = Duration::from_secs(20);
/// The client sends this much, then reads the echo back, so neither side can fill the other's
/// buffers while blocked on a write.
const ECHO_CHUNK: usize = 64 * 1024;
/// The KeyUpdate case's data, sent before and after the KeyUpdate (and the non-blocking
/// case's one small record).
const KEY_UPDATE_PROBE: &[u8] = b"0123456789";
/// The server's signal that it has checked the idle read (non-blocking case).
const GO: &[u8] = b"GO";
/// The seed of the file the server sends with sendfile.
const FILE_SEED: u32 = 0x5eed;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseKind {
    /// Echo, sendfile, close_notify in both directions.
    Data,
    /// The client sends a TLS 1.3 KeyUpdate after some data.
    KeyUpdate,
    /// The server reads a non-blocking socket: nothing there yet -> WantRead (what the proxy's
    /// edge-triggered loop relies on), then data, then close_notify.
    Nonblocking,
}

#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub version: SslVersion,
    /// OpenSSL name: a TLS 1.3 suite or a TLS 1.2 cipher list entry.
    pub cipher: &'static str,
    pub kind: CaseKind,
}

impl Case {
    pub fn label(&self) -> String {
        let version = if self.version == SslVersion::TLS1_3 {
            "TLSv1.3"
        } else {
            "TLSv1.2"
        };
        let kind = match self.kind {
            CaseKind::Data => "data",
            CaseKind::KeyUpdate => "keyupdate",
            CaseKind::Nonblocking => "nonblocking",
        };
        format!("{version} {} {kind}", self.cipher)
    }
}

/// The six offloadable suites, a KeyUpdate case, and a TLS 1.3 CCM suite (never offloaded).
pub fn all_cases() -> Vec<Case> {
    let data = |version, cipher| Case {
        version,
        cipher,
        kind: CaseKind::Data,
    };
    let mut cases = vec![
        data(SslVersion::TLS1_2, "ECDHE-ECDSA-AES128-GCM-SHA256"),
        data(SslVersion::TLS1_2, "ECDHE-ECDSA-AES256-GCM-SHA384"),
        data(SslVersion::TLS1_2, "ECDHE-ECDSA-CHACHA20-POLY1305"),
        data(SslVersion::TLS1_3, "TLS_AES_128_GCM_SHA256"),
        data(SslVersion::TLS1_3, "TLS_AES_256_GCM_SHA384"),
        data(SslVersion::TLS1_3, "TLS_CHACHA20_POLY1305_SHA256"),
        Case {
            version: SslVersion::TLS1_3,
            cipher: "TLS_AES_128_GCM_SHA256",
            kind: CaseKind::KeyUpdate,
        },
        Case {
            version: SslVersion::TLS1_3,
            cipher: "TLS_CHACHA20_POLY1305_SHA256",
            kind: CaseKind::Nonblocking,
        },
        Case {
            version: SslVersion::TLS1_2,
            cipher: "ECDHE-ECDSA-AES256-GCM-SHA384",
            kind: CaseKind::Nonblocking,
        },
    ];
    // A suite neither the kernel nor the proxy's record layer takes (OpenSSL keeps it);
    // AWS-LC has no CCM suite at all.
    if !ktls::settings::is_aws_lc() {
        cases.push(data(SslVersion::TLS1_3, "TLS_AES_128_CCM_SHA256"));
    }
    cases
}

/// How much data each case moves.
#[derive(Debug, Clone)]
pub struct Sizes {
    pub echo: Vec<usize>,
    pub file: usize,
}

/// Which path the server must have taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Both directions in the kernel.
    Kernel,
    /// User space for this reason.
    Fallback(FallbackReason),
}

impl Expect {
    /// What this kernel should give for `case`: offloadable suites go to the kernel when the
    /// module is there; everything falls back with "no kernel support" when it is not.
    pub fn for_case(case: &Case, kernel_available: bool) -> Expect {
        if !kernel_available {
            Expect::Fallback(FallbackReason::NoKernelSupport)
        } else if case.cipher.contains("CCM") {
            Expect::Fallback(FallbackReason::CipherNotOffloadable)
        } else {
            Expect::Kernel
        }
    }
}

/// What one case observed; `failures` empty means it passed.
#[derive(Debug, Default)]
pub struct Outcome {
    pub path: &'static str,
    pub reason: Option<FallbackReason>,
    pub kernel_tx: Option<String>,
    pub kernel_rx: Option<String>,
    pub failures: Vec<String>,
    pub notes: Vec<String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    pub fn both_in_kernel(&self) -> bool {
        self.path == "ktls" && self.kernel_tx.is_some() && self.kernel_rx.is_some()
    }
}

// ---------------------------------------------------------------- certificates and contexts

pub struct Identity {
    pub key: PKey<Private>,
    pub cert: X509,
}

/// A fresh self-signed ECDSA P-256 certificate for CN=localhost.
pub fn make_identity() -> Result<Identity, openssl::error::ErrorStack> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
    let key = PKey::from_ec_key(EcKey::generate(&group)?)?;
    let mut name = X509Name::builder()?;
    name.append_entry_by_text("CN", "localhost")?;
    let name = name.build();
    let mut cert = X509::builder()?;
    cert.set_version(2)?;
    let serial = BigNum::from_u32(1)?.to_asn1_integer()?;
    cert.set_serial_number(&serial)?;
    cert.set_subject_name(&name)?;
    cert.set_issuer_name(&name)?;
    cert.set_pubkey(&key)?;
    let not_before = Asn1Time::days_from_now(0)?;
    let not_after = Asn1Time::days_from_now(2)?;
    cert.set_not_before(&not_before)?;
    cert.set_not_after(&not_after)?;
    cert.sign(&key, MessageDigest::sha256())?;
    Ok(Identity {
        key,
        cert: cert.build(),
    })
}

fn pin_protocol(builder: &mut SslContextBuilder, case: &Case) -> Result<(), String> {
    ktls::settings::set_protocol_versions(builder, case.version, case.version)
        .map_err(|e| e.to_string())?;
    if case.version == SslVersion::TLS1_3 {
        ktls::settings::set_tls13_ciphersuites(builder, case.cipher).map_err(|e| e.to_string())
    } else {
        builder
            .set_cipher_list(case.cipher)
            .map_err(|e| e.to_string())
    }
}

/// The server context as the proxy builds it: kTLS options plus secret capture.
pub fn server_context(identity: &Identity, case: &Case) -> Result<SslContext, String> {
    let mut builder = SslContextBuilder::new(SslMethod::tls_server()).map_err(|e| e.to_string())?;
    ktls::ossl::configure_context(&mut builder, true);
    offload::capture_secrets(&mut builder).map_err(|e| e.to_string())?;
    builder
        .set_private_key(&identity.key)
        .map_err(|e| e.to_string())?;
    builder
        .set_certificate(&identity.cert)
        .map_err(|e| e.to_string())?;
    pin_protocol(&mut builder, case)?;
    Ok(builder.build())
}

pub fn client_context(case: &Case) -> Result<SslContext, String> {
    let mut builder = SslContextBuilder::new(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    builder.set_verify(SslVerifyMode::NONE);
    pin_protocol(&mut builder, case)?;
    Ok(builder.build())
}

// ---------------------------------------------------------------- data

/// Deterministic bytes (xorshift32) so both sides can check without sharing buffers.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn mib_per_s(bytes: usize, elapsed: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / elapsed.as_secs_f64().max(1e-9)
}

// ---------------------------------------------------------------- one case

/// The file the server sends with sendfile (a real file, not a pipe: sendfile needs pages).
fn payload_file(len: usize, dir: &std::path::Path) -> Result<File, String> {
    let path = dir.join(format!("ktls-selftest-{}-{len}.bin", std::process::id()));
    let mut file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    // Unlinked at once: the open descriptor keeps the data until the case ends.
    let _ = std::fs::remove_file(&path);
    file.write_all(&pattern(len, FILE_SEED))
        .map_err(|e| e.to_string())?;
    use std::io::Seek;
    file.rewind().map_err(|e| e.to_string())?;
    Ok(file)
}

/// Runs one case end to end and checks it against `expect`.
pub fn run_case(identity: &Identity, case: Case, sizes: &Sizes, expect: Expect) -> Outcome {
    let mut outcome = Outcome::default();
    match run_case_inner(identity, case, sizes) {
        Ok((server, client)) => {
            outcome.path = server.path;
            outcome.reason = server.reason;
            outcome.kernel_tx = server.kernel_tx;
            outcome.kernel_rx = server.kernel_rx;
            check(&mut outcome, case, expect, &server.end, &client);
            if let Some(rate) = client.echo_mib_s {
                outcome.notes.push(format!("echo={rate:.1}MiB/s"));
            }
            if let Some(rate) = server.sendfile_mib_s {
                outcome.notes.push(format!("file={rate:.1}MiB/s"));
            }
        }
        Err(failure) => outcome.failures.push(failure),
    }
    outcome
}

fn check(outcome: &mut Outcome, case: Case, expect: Expect, end: &str, client: &ClientReport) {
    match expect {
        Expect::Kernel if !outcome.both_in_kernel() => outcome.failures.push(format!(
            "expected both directions in the kernel, got path={} reason={:?} tx={:?} rx={:?}",
            outcome.path, outcome.reason, outcome.kernel_tx, outcome.kernel_rx
        )),
        Expect::Fallback(reason) if outcome.reason != Some(reason) => {
            outcome.failures.push(format!(
                "expected fallback {}, got path={} reason={:?}",
                reason.as_str(),
                outcome.path,
                outcome.reason
            ))
        }
        _ => {}
    }
    let kernel = outcome.path == "ktls";
    match case.kind {
        CaseKind::Data if end != "closed" => outcome
            .failures
            .push(format!("client close_notify: server read gave {end}")),
        CaseKind::KeyUpdate
            if kernel && (end != "keyupdate error" || client.echoed_after_key_update) =>
        {
            outcome
                .failures
                .push(format!("KeyUpdate on kTLS: server read gave {end}"))
        }
        CaseKind::KeyUpdate if !kernel && (!client.echoed_after_key_update || end != "closed") => {
            outcome
                .failures
                .push(format!("KeyUpdate in user space: not followed ({end})"))
        }
        _ => {}
    }
}

fn run_case_inner(
    identity: &Identity,
    case: Case,
    sizes: &Sizes,
) -> Result<(ServerReport, ClientReport), String> {
    let ctx = server_context(identity, &case)?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let file = match (case.kind, sizes.file) {
        (CaseKind::Data, len) if len > 0 => Some(payload_file(len, &std::env::temp_dir())?),
        _ => None,
    };
    let server_sizes = sizes.clone();
    let server = thread::Builder::new()
        .name("selftest-server".to_string())
        .spawn(move || serve(listener, ctx, case, server_sizes, file))
        .map_err(|e| format!("spawn: {e}"))?;
    let client_result = client(port, case, sizes);
    if client_result.is_err() {
        // Unblocks a server still waiting in accept (refused, harmlessly, if it is past it).
        let _ = TcpStream::connect(("127.0.0.1", port));
    }
    let server_result = server
        .join()
        .map_err(|_| "server thread panicked".to_string())?;
    // A server failure explains a client failure better than the other way round.
    let server_report = server_result.map_err(|e| format!("server: {e}"))?;
    let client_report = client_result.map_err(|e| format!("client: {e}"))?;
    Ok((server_report, client_report))
}
