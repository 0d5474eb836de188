//! The two ends of the loopback connection: the cases (version, suite, padding), OpenSSL's
//! server and client contexts, the client's socket that copies what passes, and our
//! client-side layer from the client's own key material.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use ktls::kernel::{KernelCipher, TlsVersion};
use ktls::offload;
use ktls::record::{tls12, DirectionKeys, RecordLayer};
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::ssl::{SslContext, SslContextBuilder, SslMethod, SslVerifyMode, SslVersion};
use openssl::x509::{X509Name, X509};

pub type Log = Arc<Mutex<Vec<u8>>>;

/// A socket that keeps a copy of what passes through it.
#[derive(Debug)]
pub struct Tee {
    pub stream: TcpStream,
    pub read: Log,
    pub written: Log,
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.read.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.stream.write(buf)?;
        self.written.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

#[derive(Clone, Copy)]
pub struct Case {
    pub version: SslVersion,
    pub suite: &'static str,
    pub cipher: KernelCipher,
    /// TLS 1.3 block padding on the server's OpenSSL (and the same padding by hand on ours).
    pub padding: Option<usize>,
}

pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (suite12, suite13, cipher) in [
        (
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            "TLS_AES_128_GCM_SHA256",
            KernelCipher::AesGcm128,
        ),
        (
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            "TLS_AES_256_GCM_SHA384",
            KernelCipher::AesGcm256,
        ),
        (
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            "TLS_CHACHA20_POLY1305_SHA256",
            KernelCipher::Chacha20Poly1305,
        ),
    ] {
        out.push(Case {
            version: SslVersion::TLS1_2,
            suite: suite12,
            cipher,
            padding: None,
        });
        // AWS-LC pads no records: there the padded cases have no library side to compare.
        let paddings: &[Option<usize>] = if ktls::settings::is_aws_lc() {
            &[None]
        } else {
            &[None, Some(64)]
        };
        for &padding in paddings {
            out.push(Case {
                version: SslVersion::TLS1_3,
                suite: suite13,
                cipher,
                padding,
            });
        }
    }
    out
}

fn identity() -> (PKey<openssl::pkey::Private>, X509) {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    let key = PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
    let mut name = X509Name::builder().unwrap();
    name.append_entry_by_text("CN", "localhost").unwrap();
    let name = name.build();
    let mut cert = X509::builder().unwrap();
    cert.set_version(2).unwrap();
    cert.set_serial_number(&BigNum::from_u32(7).unwrap().to_asn1_integer().unwrap())
        .unwrap();
    cert.set_subject_name(&name).unwrap();
    cert.set_issuer_name(&name).unwrap();
    cert.set_pubkey(&key).unwrap();
    cert.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    cert.set_not_after(&Asn1Time::days_from_now(1).unwrap())
        .unwrap();
    cert.sign(&key, MessageDigest::sha256()).unwrap();
    (key, cert.build())
}

fn pin(b: &mut SslContextBuilder, case: &Case) {
    ktls::settings::set_protocol_versions(b, case.version, case.version).unwrap();
    if case.version == SslVersion::TLS1_3 {
        ktls::settings::set_tls13_ciphersuites(b, case.suite).unwrap();
    } else {
        b.set_cipher_list(case.suite).unwrap();
    }
}

pub fn server_context(case: &Case) -> SslContext {
    let (key, cert) = identity();
    let mut b = SslContextBuilder::new(SslMethod::tls_server()).unwrap();
    ktls::ossl::configure_context(&mut b, false);
    offload::capture_secrets(&mut b).unwrap();
    b.set_private_key(&key).unwrap();
    b.set_certificate(&cert).unwrap();
    pin(&mut b, case);
    if let Some(block) = case.padding {
        ktls::ossl::set_block_padding(&mut b, block).expect("record padding");
    }
    b.build()
}

/// The client's traffic secrets as its keylog reports them.
pub fn client_context(case: &Case, keylog: Arc<Mutex<Vec<String>>>) -> SslContext {
    let mut b = SslContextBuilder::new(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    pin(&mut b, case);
    b.set_keylog_callback(move |_, line| keylog.lock().unwrap().push(line.to_string()));
    b.build()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn logged_secret(keylog: &[String], label: &str) -> Vec<u8> {
    let line = keylog
        .iter()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label} in the client's keylog"));
    unhex(line.split(' ').nth(2).unwrap())
}

/// The client's record layer, from the client's own key material, and for TLS 1.2 AES-GCM
/// the server's and the client's write key and salt.
pub fn client_layer(
    case: &Case,
    ssl: &openssl::ssl::SslRef,
    keylog: &[String],
) -> (RecordLayer, Option<(Tls12Gcm, Tls12Gcm)>) {
    let c = case.cipher;
    if case.version == SslVersion::TLS1_3 {
        let read = logged_secret(keylog, "SERVER_TRAFFIC_SECRET_0 ");
        let write = logged_secret(keylog, "CLIENT_TRAFFIC_SECRET_0 ");
        let layer = RecordLayer::new(
            TlsVersion::Tls13,
            c,
            DirectionKeys::from_secret(c, &read, 0).unwrap(),
            DirectionKeys::from_secret(c, &write, 0).unwrap(),
        );
        return (layer, None);
    }
    let mut master = [0u8; 48];
    assert_eq!(ssl.session().unwrap().master_key(&mut master), 48);
    let (mut cr, mut sr) = ([0u8; 32], [0u8; 32]);
    ktls::settings::client_random(ssl, &mut cr);
    ktls::settings::server_random(ssl, &mut sr);
    let block = tls12::key_block(c, &master, &cr, &sr).unwrap();
    let layer = RecordLayer::new(
        TlsVersion::Tls12,
        c,
        DirectionKeys::from_key_iv(&block.server_key, &block.server_iv, 1).unwrap(),
        DirectionKeys::from_key_iv(&block.client_key, &block.client_iv, 1).unwrap(),
    );
    let gcm = (c != KernelCipher::Chacha20Poly1305).then(|| {
        (
            Tls12Gcm {
                key: block.server_key.clone(),
                salt: block.server_iv.clone(),
            },
            Tls12Gcm {
                key: block.client_key.clone(),
                salt: block.client_iv.clone(),
            },
        )
    });
    (layer, gcm)
}

/// The key and 4-byte salt a TLS 1.2 AES-GCM writer uses: OpenSSL starts its explicit nonces
/// at a random value (RFC 5288 allows any unique nonce), so reproducing its records needs its
/// nonce, read from the record, and this key.
pub struct Tls12Gcm {
    pub key: Vec<u8>,
    pub salt: Vec<u8>,
}
