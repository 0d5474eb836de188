//! The user-space path for real: a TlsSession server (offloaded as far as this kernel allows)
//! against an independent OpenSSL client, every suite of the self-test, data checked
//! byte-exact. On a host without kTLS every case must fall back with "no kernel support";
//! where the module exists the offloadable suites must go to the kernel instead.

#[allow(dead_code)]
#[path = "../examples/selftest/harness.rs"]
mod harness;

use harness::{Expect, Sizes};
use ktls::kernel::{self, Support};
use ktls::offload::{FallbackReason, KtlsMode};

#[test]
fn every_suite_passes_through_the_path_this_kernel_allows() {
    let identity = harness::make_identity().unwrap();
    let available = kernel::kernel_support().is_available();
    let sizes = Sizes {
        echo: vec![10, 26_000, 300_000],
        file: 200_001,
    };
    for case in harness::all_cases() {
        let expect = Expect::for_case(&case, available);
        let outcome = harness::run_case(&identity, case, &sizes, expect);
        assert!(outcome.passed(), "{}: {:?}", case.label(), outcome.failures);
        if !available {
            assert_eq!(outcome.reason, Some(FallbackReason::NoKernelSupport));
            // The proxy's record layer takes every AEAD suite; OpenSSL keeps only CCM.
            let expected = if case.cipher.contains("CCM") {
                "user"
            } else {
                "records"
            };
            assert_eq!(outcome.path, expected, "{}", case.label());
        }
    }
}

#[test]
fn kernel_support_probe_reports_without_panicking() {
    let cached = kernel::kernel_support();
    let fresh = kernel::probe_support();
    assert_eq!(cached.is_available(), fresh.is_available());
    match fresh {
        Support::Available => {}
        Support::Missing { reason } => assert!(reason.contains("tls"), "{reason}"),
    }
    // This project's hosts have no tls ULP: say so when that is the case.
    let ulps = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap_or_default();
    if !ulps.split_whitespace().any(|u| u == "tls") && !cached.is_available() {
        assert!(cached.describe().contains("ENOENT") || cached.describe().contains("tls"));
    }
}

#[test]
fn ktls_mode_parses_config_words() {
    assert_eq!("auto".parse::<KtlsMode>(), Ok(KtlsMode::Auto));
    assert_eq!("on".parse::<KtlsMode>(), Ok(KtlsMode::On));
    assert_eq!("off".parse::<KtlsMode>(), Ok(KtlsMode::Off));
    assert!("yes".parse::<KtlsMode>().is_err());
}

#[test]
fn fallback_labels_are_distinct() {
    let all = [
        FallbackReason::Disabled,
        FallbackReason::NoKernelSupport,
        FallbackReason::UnsupportedVersion,
        FallbackReason::CipherNotOffloadable,
        FallbackReason::SendNotOffloaded,
        FallbackReason::RecvNotOffloaded,
        FallbackReason::NoTrafficSecret,
        FallbackReason::KeyDerivationFailed,
        FallbackReason::RxInstallFailed(libc::EINVAL),
        FallbackReason::PendingData,
        FallbackReason::WrongFd,
    ];
    let labels: std::collections::BTreeSet<_> = all.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels.len(), all.len());
    assert_eq!(
        FallbackReason::NoKernelSupport.to_string(),
        "no kernel support"
    );
}

#[test]
fn kernel_calls_on_a_plain_tcp_socket_fail_cleanly() {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let fd = client.as_fd();
    // No ULP attached: nothing installed, and installing fails with an errno, not a panic.
    assert!(matches!(
        kernel::installed(fd, kernel::Direction::Rx),
        Ok(None) | Err(_)
    ));
    let info =
        kernel::CryptoInfo::tls13(kernel::KernelCipher::AesGcm128, &[0; 16], &[0; 12], 0).unwrap();
    assert!(kernel::set_crypto(fd, kernel::Direction::Rx, &info).is_err());
    // Without a TLS_GET_RECORD_TYPE cmsg, recv_record reports application data.
    server.write_all(b"ab").unwrap();
    let mut buf = [0u8; 8];
    let record = kernel::recv_record(fd, &mut buf).unwrap();
    assert_eq!(
        (record.record_type, record.len),
        (kernel::record_type::APPLICATION_DATA, 2)
    );
    assert_eq!(&buf[..2], b"ab");
}

/// A connection drives only the socket it was attached to: a call that borrows another
/// descriptor is refused and moves no byte on either socket, and so is the hand-over; the
/// session then goes on, on its own socket.
#[test]
fn a_connection_refuses_a_socket_it_was_not_attached_to() {
    use ktls::offload::{self, Offload};
    use ktls::{IoStatus, Progress, TlsError, TlsSession};
    use std::io::{ErrorKind, Read};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    let identity = harness::make_identity().unwrap();
    let case = harness::all_cases()[3];
    let server_ctx = harness::server_context(&identity, &case).unwrap();
    let client_ctx = harness::client_context(&case).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let ssl = openssl::ssl::Ssl::new(&client_ctx).unwrap();
        let mut tls = ssl.connect(stream).unwrap();
        let mut got = [0u8; 5];
        tls.read_exact(&mut got).unwrap();
        got
    });
    let (sock, _) = listener.accept().unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (other, mut other_peer) = UnixStream::pair().unwrap();
    let mut ssl = openssl::ssl::Ssl::new(&server_ctx).unwrap();
    offload::prepare_ssl(&mut ssl).unwrap();
    ssl.set_accept_state();
    let mut session = TlsSession::new(ssl, sock.as_fd()).unwrap();
    assert!(matches!(
        session.handshake(other.as_fd()),
        Err(TlsError::WrongFd { .. })
    ));
    assert_eq!(session.handshake(sock.as_fd()).unwrap(), Progress::Done);
    assert!(matches!(
        session.write(other.as_fd(), b"wrong"),
        IoStatus::Error(TlsError::WrongFd { .. })
    ));
    let Offload::UserSpace {
        mut session,
        reason: FallbackReason::WrongFd,
        ..
    } = offload::offload(session, other.as_fd(), KtlsMode::Auto)
    else {
        panic!("the hand-over took another socket");
    };
    assert!(matches!(
        session.write(sock.as_fd(), b"right"),
        IoStatus::Done(5)
    ));
    assert_eq!(&client.join().unwrap(), b"right");
    other_peer.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let err = other_peer
        .read(&mut byte)
        .expect_err("bytes reached the other socket");
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
}
