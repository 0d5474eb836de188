//! What the ACME client keeps under `state_dir`: the directory (0700), the account key
//! (`account.key`, 0600) and, per vhost, `NAME/key.pem` (0600) and `NAME/fullchain.pem`.
//! Before a vhost's first certificate arrives it serves a temporary self-signed one, so that
//! the TLS listener starts and the other vhosts serve meanwhile.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::x509::extension::SubjectAlternativeName;
use openssl::x509::{X509Builder, X509Extension, X509NameBuilder, X509};

/// The issuer and subject of a temporary certificate: the client renews it at once.
const TEMPORARY_CN: &str = "ktls-proxy temporary ACME placeholder";

/// Makes `dir` exist with mode 0700, or says why it cannot.
pub fn private_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir)
        .map_err(|e| format!("acme state_dir {}: cannot create it: {e}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|e| {
        format!(
            "acme state_dir {}: cannot make it private (0700): {e}",
            dir.display()
        )
    })?;
    let mode = fs::metadata(dir)
        .map_err(|e| e.to_string())?
        .permissions()
        .mode()
        & 0o777;
    if mode != 0o700 {
        return Err(format!(
            "acme state_dir {}: mode is {mode:o}, not 0700",
            dir.display()
        ));
    }
    Ok(())
}

/// Writes `bytes` to `path` with `mode` through a temporary file renamed over it, so that a
/// reader (a reload, another process) never sees half a file. The temporary file's name
/// starts with a dot, which no name looked up in these directories does.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())?;
    fs::rename(&tmp, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
}

/// The account key from `state_dir/account.key`, made on first use.
pub fn account_key(state_dir: &Path) -> Result<PKey<Private>, String> {
    let path = state_dir.join("account.key");
    match fs::read(&path) {
        Ok(pem) => {
            let mode = fs::metadata(&path)
                .map_err(|e| e.to_string())?
                .permissions()
                .mode()
                & 0o777;
            if mode & 0o077 != 0 {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).map_err(|e| {
                    format!(
                        "{}: mode {mode:o}, cannot make it 0600: {e}",
                        path.display()
                    )
                })?;
            }
            PKey::private_key_from_pem(&pem)
                .map_err(|e| format!("{}: not a private key: {e}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = super::jws::new_p256_key()?;
            let pem = key.private_key_to_pem_pkcs8().map_err(|e| e.to_string())?;
            write_file(&path, &pem, 0o600)?;
            Ok(key)
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Makes sure the vhost's certificate and key files exist (a temporary self-signed pair when
/// none was issued yet) and that the key is private.
pub fn ensure_vhost_files(acme: &config::Acme, name: &str) -> Result<(), String> {
    let pair = acme.certificate_paths(name);
    if let Some(dir) = pair.certificate.parent() {
        private_dir(dir)?;
    }
    if pair.certificate.exists() && pair.key.exists() {
        return fs::set_permissions(&pair.key, fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: cannot make it 0600: {e}", pair.key.display()));
    }
    let key = super::jws::new_p256_key()?;
    let cert = temporary_certificate(name, &key)
        .map_err(|e| format!("temporary certificate for {name}: {e}"))?;
    write_file(
        &pair.key,
        &key.private_key_to_pem_pkcs8().map_err(|e| e.to_string())?,
        0o600,
    )?;
    write_file(
        &pair.certificate,
        &cert.to_pem().map_err(|e| e.to_string())?,
        0o644,
    )
}

fn temporary_certificate(
    name: &str,
    key: &PKey<Private>,
) -> Result<X509, openssl::error::ErrorStack> {
    self_signed(TEMPORARY_CN, name, key, Vec::new())
}

/// A self-signed certificate named `cn`, for `name` (its one SAN), valid 7 days, with
/// `extensions` added.
pub(super) fn self_signed(
    cn: &str,
    name: &str,
    key: &PKey<Private>,
    extensions: Vec<X509Extension>,
) -> Result<X509, openssl::error::ErrorStack> {
    let mut subject = X509NameBuilder::new()?;
    subject.append_entry_by_text("CN", cn)?;
    let subject = subject.build();
    let mut b = X509Builder::new()?;
    b.set_version(2)?;
    let mut serial = BigNum::new()?;
    serial.rand(64, MsbOption::MAYBE_ZERO, false)?;
    let serial = serial.to_asn1_integer()?;
    b.set_serial_number(&serial)?;
    b.set_subject_name(&subject)?;
    b.set_issuer_name(&subject)?;
    b.set_pubkey(key)?;
    let (from, until) = (Asn1Time::days_from_now(0)?, Asn1Time::days_from_now(7)?);
    b.set_not_before(&from)?;
    b.set_not_after(&until)?;
    let san = SubjectAlternativeName::new()
        .dns(name)
        .build(&b.x509v3_context(None, None))?;
    b.append_extension(san)?;
    for extension in extensions {
        b.append_extension(extension)?;
    }
    b.sign(key, MessageDigest::sha256())?;
    Ok(b.build())
}

/// How long until the vhost's certificate is due for renewal: at once for a temporary or
/// unreadable one, else when 2/3 of its lifetime have passed (a 90-day certificate renews
/// 30 days before it expires).
pub fn renewal_due_in(acme: &config::Acme, name: &str) -> Duration {
    let pair = acme.certificate_paths(name);
    let Some(cert) = fs::read(&pair.certificate)
        .ok()
        .and_then(|pem| X509::from_pem(&pem).ok())
    else {
        return Duration::ZERO;
    };
    let temporary = cert
        .issuer_name()
        .entries()
        .any(|e| e.data().as_slice() == TEMPORARY_CN.as_bytes());
    if temporary {
        return Duration::ZERO;
    }
    let (Some(lifetime), Some(left)) = (
        seconds_between(cert.not_before(), cert.not_after()),
        Asn1Time::days_from_now(0)
            .ok()
            .and_then(|now| seconds_between(&now, cert.not_after())),
    ) else {
        return Duration::ZERO;
    };
    let renew_when_left = lifetime / 3;
    Duration::from_secs(u64::try_from(left - renew_when_left).unwrap_or(0))
}

fn seconds_between(
    from: &openssl::asn1::Asn1TimeRef,
    to: &openssl::asn1::Asn1TimeRef,
) -> Option<i64> {
    let d = from.diff(to).ok()?;
    Some(i64::from(d.days) * 86_400 + i64::from(d.secs))
}
