//! kTLS self-test: every offloadable TLS 1.2/1.3 suite through a server built like the
//! proxy's (TlsSession + offload) against an independent user-space OpenSSL client.
//!
//!     selftest [--expect auto|ktls|fallback] [--big-mb N]
//!
//! `auto` (default) expects both directions in the kernel when the `tls` module is there and
//! the "no kernel support" fallback when it is not. Prints one line per case and ends with
//! `selftest: PASS cases=N ktls_both=K` (exit 0) or `selftest: FAIL ...` (exit 1).

mod harness;

use std::process::ExitCode;

use harness::{Expect, Sizes};
use ktls::kernel;
use ktls::offload::FallbackReason;

struct Args {
    expect: Option<bool>,
    big_bytes: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        expect: None,
        big_bytes: 5_000_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--expect" => {
                args.expect = match it.next().as_deref() {
                    Some("auto") => None,
                    Some("ktls") => Some(true),
                    Some("fallback") => Some(false),
                    other => return Err(format!("--expect auto|ktls|fallback, got {other:?}")),
                }
            }
            "--big-mb" => {
                let mb: usize = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--big-mb needs a number")?;
                args.big_bytes = mb * 1_000_000;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("selftest: {e}");
            return ExitCode::from(2);
        }
    };
    let support = kernel::probe_support();
    let kernel_available = args.expect.unwrap_or(support.is_available());
    println!(
        "selftest: {}; {}; expecting {}",
        openssl::version::version(),
        support.describe(),
        if kernel_available {
            "kTLS"
        } else {
            "user-space fallback"
        }
    );
    let identity = match harness::make_identity() {
        Ok(identity) => identity,
        Err(e) => {
            println!("selftest: FAIL certificate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sizes = Sizes {
        echo: vec![10, 26_000, args.big_bytes],
        file: args.big_bytes,
    };
    let (mut passed, mut failed, mut ktls_both) = (0, 0, 0);
    for case in harness::all_cases() {
        let expect = Expect::for_case(&case, kernel_available);
        let outcome = harness::run_case(&identity, case, &sizes, expect);
        let verdict = if outcome.passed() { "PASS" } else { "FAIL" };
        let reason = outcome.reason.map(FallbackReason::as_str).unwrap_or("-");
        println!(
            "case {:<52} {verdict} path={} reason={reason} kernel_tx={} kernel_rx={} {}{}",
            case.label(),
            outcome.path,
            outcome.kernel_tx.as_deref().unwrap_or("-"),
            outcome.kernel_rx.as_deref().unwrap_or("-"),
            outcome.notes.join(" "),
            if outcome.passed() {
                String::new()
            } else {
                format!(" :: {}", outcome.failures.join("; "))
            }
        );
        if outcome.passed() {
            passed += 1;
        } else {
            failed += 1;
        }
        if outcome.both_in_kernel() {
            ktls_both += 1;
        }
    }
    let stats = kernel::tls_stat();
    if !stats.is_empty() {
        let line: Vec<String> = stats.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("tls_stat: {}", line.join(" "));
    }
    if failed == 0 {
        println!("selftest: PASS cases={passed} ktls_both={ktls_both}");
        ExitCode::SUCCESS
    } else {
        println!(
            "selftest: FAIL cases={} failed={failed} ktls_both={ktls_both}",
            passed + failed
        );
        ExitCode::FAILURE
    }
}
