//! Attacks on the proxy's own TLS record layer through the real binary: a KeyUpdate flood, a
//! run of records without data ahead of a request, a flipped bit (bad_record_mac, counted),
//! and a request sent in the same flight as the client's Finished.

mod tls_record_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

use e2e::origin::pattern;
use openssl::ssl::{Ssl, SslContext, SslMethod, SslVerifyMode, SslVersion};
use tls_record_common::*;

/// Issue 30: a client that never reads and only asks for KeyUpdates made the record layer
/// queue one 27-byte answer per request, without limit. One answer covers every request
/// until the proxy sends data again (RFC 8446 §4.6.3), and a run of KeyUpdates with no data
/// between them ends the connection with unexpected_message.
#[test]
fn a_key_update_flood_gets_one_answer_then_a_close() {
    let origin = origin();
    let run = start(&origin, "tls_ktls user;\n");
    let flood_errors = "ktls_proxy_tls_record_errors_total{reason=\"unexpected_message\"}";
    let (received, sent) = key_updates(&run);
    let errors = run.sample(flood_errors);

    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&run.https.into()).unwrap();
    let tcp: TcpStream = sock.into();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = Ssl::new(&client_ctx(SslVersion::TLS1_3))
        .unwrap()
        .connect(tcp)
        .unwrap();
    let mut written = 0;
    for _ in 0..200 {
        // Each KeyUpdate goes out at once; sending fails once the proxy closed.
        if ktls::ossl::send_key_update(tls.ssl()).is_err() {
            break;
        }
        written += 1;
    }
    assert!(written > 32, "only {written} KeyUpdates went out");

    let mut sink = vec![0u8; 4096];
    let end = loop {
        match tls.read(&mut sink) {
            Ok(0) => break "end of stream".to_string(),
            Ok(_) => continue,
            Err(e) => break format!("{e:?}"),
        }
    };
    let (received_after, sent_after) = key_updates(&run);
    assert_eq!(
        sent_after - sent,
        1,
        "one answer for {} requests ({written} sent)",
        received_after - received
    );
    assert_eq!(
        received_after - received,
        33,
        "the 33rd update without data is the last one read"
    );
    assert_eq!(run.sample(flood_errors) - errors, 1, "{}", run.metrics());
    assert!(
        !end.contains("WouldBlock") && !end.contains("TimedOut"),
        "the flooding connection was left open: {end}"
    );
}

/// The record layer opens at most 32 records without data per read call, then returns to
/// let the worker serve others (issue 30). The request behind 32 KeyUpdates arrives in the
/// same segment, so no readiness event follows the yield: the worker must come back by
/// itself. (Before the worker did, the request waited for the client's next bytes: none.)
#[test]
fn a_request_behind_a_run_of_records_without_data_is_answered() {
    let origin = origin();
    let run = start(&origin, "tls_ktls user;\n");
    let (sock, _) = meddler(run.https, true);
    let mut tls = Ssl::new(&client_ctx(SslVersion::TLS1_3))
        .unwrap()
        .connect(sock)
        .unwrap();
    let (received, _) = key_updates(&run);
    for _ in 0..ktls::record::MAX_RECORDS_WITHOUT_DATA_PER_READ {
        ktls::ossl::send_key_update(tls.ssl()).unwrap();
    }
    // The Finished, 32 KeyUpdates and the request leave in one write, at the first read.
    tls.write_all(&get("/bytes/100", true)).unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response);
    assert_eq!(bodies(&response), vec![pattern(100)], "{}", run.metrics());
    let (received_after, _) = key_updates(&run);
    assert_eq!(received_after - received, 32);
}

#[test]
fn a_flipped_bit_is_answered_with_bad_record_mac_and_counted() {
    let origin = origin();
    let run = start(&origin, "");
    let counter = "ktls_proxy_tls_record_errors_total{reason=\"bad_record_mac\"}";
    let before = run.sample(counter);
    for version in [SslVersion::TLS1_2, SslVersion::TLS1_3] {
        let (sock, tamper) = meddler(run.https, false);
        let mut tls = Ssl::new(&client_ctx(version))
            .unwrap()
            .connect(sock)
            .unwrap();
        // One good exchange first: the connection is on the proxy's record layer.
        tls.write_all(&get("/bytes/10", false)).unwrap();
        let mut buf = vec![0u8; 4096];
        let mut first = Vec::new();
        while complete_responses(&first) < 1 {
            let n = tls.read(&mut buf).unwrap();
            assert!(n > 0, "{version:?}: closed before the first response");
            first.extend_from_slice(&buf[..n]);
        }
        assert_eq!(bodies(&first), vec![pattern(10)]);
        tamper.store(true, Ordering::SeqCst);
        tls.write_all(&get("/bytes/10", false)).unwrap();
        let err = match tls.read(&mut buf) {
            Ok(n) => panic!("{version:?}: a tampered request got {n} bytes back"),
            Err(e) => format!("{e:?}"),
        };
        // OpenSSL says "bad record mac", AWS-LC "SSLV3_ALERT_BAD_RECORD_MAC".
        assert!(
            err.to_ascii_lowercase()
                .replace('_', " ")
                .contains("bad record mac"),
            "{version:?}: expected the bad_record_mac alert, got {err}"
        );
    }
    assert_eq!(run.sample(counter) - before, 2, "{}", run.metrics());
    assert_eq!(
        origin.hits("/bytes/10"),
        1,
        "tampered requests never reach the origin"
    );
}

#[test]
fn a_request_sent_with_the_clients_finished_is_answered() {
    let origin = origin();
    let run = start(&origin, "");
    for suite in TLS13 {
        let (sock, _) = meddler(run.https, true);
        let mut b = SslContext::builder(SslMethod::tls_client()).unwrap();
        b.set_verify(SslVerifyMode::NONE);
        b.set_min_proto_version(Some(SslVersion::TLS1_3)).unwrap();
        ktls::settings::set_tls13_ciphersuites(&mut b, suite).unwrap();
        let mut tls = Ssl::new(&b.build()).unwrap().connect(sock).unwrap();
        // The Finished is still held: it leaves with the request, in one write.
        assert!(
            !tls.get_ref().held.is_empty(),
            "the Finished was not held back"
        );
        tls.write_all(&get("/bytes/26000", true)).unwrap();
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response);
        assert_eq!(bodies(&response), vec![pattern(26_000)], "{suite}");
    }
    assert_eq!(run.path_count("records"), 3);
}
