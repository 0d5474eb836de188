//! The OpenSSL client context: protocol versions, ciphers, groups, ticket mode, key log.
//!
//! Each worker thread builds its own context, as upstream does, so that threads never contend
//! on a context's locks and reference counts.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use ktls::resume::ClientSession;
use openssl::ex_data::Index;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslRef, SslSessionCacheMode,
    SslVerifyMode, SslVersion,
};

use crate::cli::{Args, Tickets, TlsVersion};
use crate::error::StartError;

/// A key log file shared by every thread's context; a line is written under the lock so lines
/// from different threads never interleave.
pub type KeyLog = Arc<Mutex<File>>;

pub fn open_key_log(path: &Path) -> Result<KeyLog, StartError> {
    // Append, as upstream does: keys saved by earlier runs stay usable.
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(|f| Arc::new(Mutex::new(f)))
        .map_err(|source| StartError::KeyLog {
            path: path.to_path_buf(),
            source,
        })
}

/// The cipher list split by protocol: OpenSSL configures TLS 1.3 suites and TLS 1.2 ciphers
/// through different calls.
#[derive(Debug, Default, PartialEq, Eq)]
struct CipherSplit {
    tls13: Vec<String>,
    tls12: Vec<String>,
}

fn split_ciphers(list: &str) -> CipherSplit {
    let mut split = CipherSplit::default();
    for name in list.split(':').map(str::trim).filter(|n| !n.is_empty()) {
        if name.starts_with("TLS_") {
            split.tls13.push(name.to_string());
        } else {
            split.tls12.push(name.to_string());
        }
    }
    split
}

pub fn build_context(args: &Args, key_log: Option<&KeyLog>) -> Result<SslContext, StartError> {
    let mut builder = SslContext::builder(SslMethod::tls_client()).map_err(StartError::Tls)?;
    let (min, max) = match args.tls {
        TlsVersion::V12 => (SslVersion::TLS1_2, SslVersion::TLS1_2),
        TlsVersion::V13 => (SslVersion::TLS1_3, SslVersion::TLS1_3),
        TlsVersion::Any => (SslVersion::TLS1_2, SslVersion::TLS1_3),
    };
    ktls::settings::set_protocol_versions(&mut builder, min, max).map_err(StartError::Tls)?;
    // A benchmark of the server's handshake cost; the certificate is not what is measured.
    builder.set_verify(SslVerifyMode::NONE);
    // Read whole flights at once instead of a header then a body per record: fewer system
    // calls on the client, the same bytes on the wire.
    builder.set_read_ahead(true);
    configure_tickets(&mut builder, args.tickets);
    if let Some(list) = &args.ciphers {
        configure_ciphers(&mut builder, list, args.tls)?;
    }
    if let Some(list) = &args.curves {
        builder
            .set_groups_list(list)
            .map_err(|reason| StartError::Curves {
                list: list.clone(),
                reason,
            })?;
    }
    if let Some(log) = key_log {
        let log = Arc::clone(log);
        builder.set_keylog_callback(move |_, line| {
            if let Ok(mut file) = log.lock() {
                // A failed key log write must not disturb the benchmark.
                let _ = writeln!(file, "{line}");
            }
        });
    }
    Ok(builder.build())
}

fn configure_tickets(builder: &mut SslContextBuilder, tickets: Tickets) {
    if tickets == Tickets::Off {
        builder.set_options(SslOptions::NO_TICKET);
    }
    // Each peer keeps its own session (peer.rs), so OpenSSL's client cache stays off. With
    // the cache on, OpenSSL would also treat TLS 1.3 sessions as single use: it removes a
    // resumed session from the cache, which marks it not resumable, and a server that sends
    // no new ticket after a resumption would get every other handshake in full.
    if !ktls::settings::is_aws_lc() || tickets == Tickets::Off {
        builder.set_session_cache_mode(SslSessionCacheMode::OFF);
        return;
    }
    // AWS-LC never replaces a TLS 1.3 connection's session with the one a NewSessionTicket
    // brings (the handshake's own is not resumable): it hands the new one to the new-session
    // callback only, which runs only with the client cache mode on. No internal store: the
    // callback keeps the session on its connection, where the peer takes it.
    builder.set_session_cache_mode(
        SslSessionCacheMode::CLIENT | SslSessionCacheMode::NO_INTERNAL_STORE,
    );
    let index = ticket_session_index();
    builder.set_new_session_callback(move |ssl, session| {
        let received = ClientSession::received(ssl, session);
        ssl.set_ex_data(index, received);
    });
}

/// Where the new-session callback keeps a ticket's session on its connection (AWS-LC).
fn ticket_session_index() -> Index<Ssl, ClientSession> {
    static INDEX: OnceLock<Index<Ssl, ClientSession>> = OnceLock::new();
    // An index is one integer from the library's table, never freed; failing to get one
    // means the library is out of memory at start-up.
    *INDEX.get_or_init(|| Ssl::new_ex_index().expect("SSL ex_data index"))
}

/// The session a NewSessionTicket brought to connection `ssl` (AWS-LC: see
/// `configure_tickets`); on OpenSSL the connection's own session is replaced instead.
pub fn ticket_session(ssl: &SslRef) -> Option<&ClientSession> {
    if !ktls::settings::is_aws_lc() {
        return None;
    }
    ssl.ex_data(ticket_session_index())
}

fn configure_ciphers(
    builder: &mut SslContextBuilder,
    list: &str,
    version: TlsVersion,
) -> Result<(), StartError> {
    let split = split_ciphers(list);
    let refuse = |reason: &str| StartError::Ciphers {
        list: list.to_string(),
        reason: reason.to_string(),
    };
    if !version.allows_tls12() && split.tls13.is_empty() {
        return Err(refuse("--tls 1.3 needs TLS 1.3 suite names"));
    }
    if !version.allows_tls13() && split.tls12.is_empty() {
        return Err(refuse("--tls 1.2 needs TLS 1.2 cipher names"));
    }
    if !split.tls13.is_empty() {
        ktls::settings::set_tls13_ciphersuites(builder, &split.tls13.join(":"))
            .map_err(|e| refuse(&e.to_string()))?;
    }
    if !split.tls12.is_empty() {
        builder
            .set_cipher_list(&split.tls12.join(":"))
            .map_err(|e| refuse(&e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn cipher_names_split_by_protocol() {
        let split = split_ciphers("TLS_AES_128_GCM_SHA256:ECDHE-ECDSA-AES128-GCM-SHA256:");
        assert_eq!(split.tls13, ["TLS_AES_128_GCM_SHA256"]);
        assert_eq!(split.tls12, ["ECDHE-ECDSA-AES128-GCM-SHA256"]);
    }

    fn context_for(cmdline: &[&str]) -> Result<SslContext, StartError> {
        let args = Args::try_parse_from(std::iter::once("tls-perf").chain(cmdline.iter().copied()))
            .expect("valid command line");
        build_context(&args, None)
    }

    #[test]
    fn valid_options_build_a_context() {
        for cmdline in [
            &[
                "--tls",
                "1.3",
                "-c",
                "TLS_AES_256_GCM_SHA384",
                "--tickets",
                "on",
            ][..],
            &["-c", "ECDHE-ECDSA-AES128-GCM-SHA256", "-C", "P-256"],
            &[
                "--tls",
                "any",
                "-c",
                "TLS_AES_128_GCM_SHA256:ECDHE-RSA-AES128-GCM-SHA256",
            ],
        ] {
            assert!(context_for(cmdline).is_ok(), "{cmdline:?}");
        }
    }

    #[test]
    fn unknown_names_are_refused_with_advice() {
        let err = context_for(&["-c", "NO-SUCH-CIPHER"]).expect_err("bad cipher");
        assert!(err.to_string().contains("openssl ciphers"), "{err}");
        let err = context_for(&["--tls", "1.3", "-c", "ECDHE-ECDSA-AES128-GCM-SHA256"])
            .expect_err("1.2 cipher for 1.3");
        assert!(err.to_string().contains("TLS 1.3"), "{err}");
        let err = context_for(&["-C", "NoSuchCurve"]).expect_err("bad curve");
        assert!(err.to_string().contains("X25519"), "{err}");
    }
}
