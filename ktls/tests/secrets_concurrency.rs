//! The keylog capture keeps each connection's client traffic secret with that connection:
//! many concurrent TLS 1.3 handshakes on one context, and the secret each server-side SSL
//! captured must be exactly the one its client logged for itself.

#[allow(dead_code)]
#[path = "../examples/selftest/harness.rs"]
mod harness;

use std::collections::BTreeSet;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::thread;

use ktls::offload::{capture_secrets, prepare_ssl, take_client_secret};
use ktls::{IoStatus, Progress, TlsSession};
use openssl::ssl::{Ssl, SslContext, SslContextBuilder, SslMethod, SslVerifyMode, SslVersion};

const CONNECTIONS: usize = 24;

fn context(server: bool) -> SslContext {
    let method = if server {
        SslMethod::tls_server()
    } else {
        SslMethod::tls_client()
    };
    let mut builder = SslContextBuilder::new(method).unwrap();
    ktls::ossl::configure_context(&mut builder, true);
    capture_secrets(&mut builder).unwrap();
    ktls::settings::set_protocol_versions(&mut builder, SslVersion::TLS1_3, SslVersion::TLS1_3)
        .unwrap();
    if server {
        let identity = harness::make_identity().unwrap();
        builder.set_private_key(&identity.key).unwrap();
        builder.set_certificate(&identity.cert).unwrap();
    } else {
        builder.set_verify(SslVerifyMode::NONE);
    }
    builder.build()
}

/// Handshakes on `stream` and returns the client traffic secret this side captured.
fn handshake(ctx: &SslContext, stream: &TcpStream, server: bool) -> Vec<u8> {
    let mut ssl = Ssl::new(ctx).unwrap();
    prepare_ssl(&mut ssl).unwrap();
    if server {
        ssl.set_accept_state();
    } else {
        ssl.set_connect_state();
    }
    let mut session = TlsSession::new(ssl, stream.as_fd()).unwrap();
    assert_eq!(session.handshake(stream.as_fd()).unwrap(), Progress::Done);
    let secret = take_client_secret(session.ssl_mut()).expect("secret captured");
    // One byte from server to client, so neither closes while the other still writes.
    if server {
        assert!(matches!(
            session.write(stream.as_fd(), b"x"),
            IoStatus::Done(1)
        ));
    } else {
        let mut byte = [0u8; 1];
        assert!(matches!(
            session.read(stream.as_fd(), &mut byte),
            IoStatus::Done(1)
        ));
    }
    assert!(
        take_client_secret(session.ssl_mut()).is_none(),
        "taken once"
    );
    secret.bytes().to_vec()
}

#[test]
fn concurrent_connections_keep_their_own_secrets() {
    let server_ctx = Arc::new(context(true));
    let client_ctx = Arc::new(context(false));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = thread::spawn(move || {
        let workers: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                let (stream, _) = listener.accept().unwrap();
                let ctx = Arc::clone(&server_ctx);
                thread::spawn(move || handshake(&ctx, &stream, true))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .collect::<BTreeSet<_>>()
    });
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let ctx = Arc::clone(&client_ctx);
            thread::spawn(move || {
                let stream = TcpStream::connect(addr).unwrap();
                handshake(&ctx, &stream, false)
            })
        })
        .collect();
    let client_secrets: BTreeSet<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let server_secrets = acceptor.join().unwrap();
    assert_eq!(
        client_secrets.len(),
        CONNECTIONS,
        "every connection has its own secret"
    );
    assert_eq!(server_secrets, client_secrets);
}

#[test]
fn no_slot_means_no_secret_and_no_panic() {
    let ctx = context(true);
    let mut ssl = Ssl::new(&ctx).unwrap();
    assert!(take_client_secret(&mut ssl).is_none());
}
