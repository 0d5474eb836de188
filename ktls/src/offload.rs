//! Handing a finished handshake's record layer to the kernel.
//!
//! | protocol | who installs TX | who installs RX                        |
//! |----------|-----------------|----------------------------------------|
//! | TLS 1.2  | OpenSSL         | OpenSSL                                |
//! | TLS 1.3  | OpenSSL         | this module, from CLIENT_TRAFFIC_SECRET_0 |
//!
//! When both directions are in the kernel the SSL object is freed and the connection becomes a
//! [`KtlsSocket`]. Where the kernel cannot take them, the proxy's own record layer does the
//! same in user space ([`RecordSocket`], the SSL object is freed too); only what neither can
//! take (or `tls_ktls off`) stays a [`TlsSession`] on OpenSSL's record layer. Every path
//! except the kernel one says why ([`FallbackReason`]).
//! Setup for a context: `ossl::configure_context`, then [`capture_secrets`]; for each SSL
//! before the handshake: [`prepare_ssl`].

mod hkdf;
pub mod memory;
mod secrets;
mod socket;

use std::fmt;
use std::os::fd::BorrowedFd;
use std::str::FromStr;

use openssl::ssl::{SslRef, SslVersion};

#[cfg(not(feature = "aws-lc"))]
use crate::kernel::CryptoInfo;
use crate::kernel::{self, Direction, KernelCipher, TlsVersion};
use crate::ossl;
use crate::record::{server_record_layer, RecordSocket};
use crate::session::TlsSession;

pub use hkdf::{hkdf_expand_label, suite_hash, traffic_keys, HkdfError, TrafficKeys};
#[cfg(not(feature = "aws-lc"))]
pub(crate) use secrets::note_written;
pub use secrets::{
    capture_secrets, prepare_ssl, take_client_secret, take_tls13_handover, Secret, SecretSlot,
    Tls13Handover,
};
pub use socket::KtlsSocket;

/// `tls_ktls auto|on|user|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KtlsMode {
    /// Offload where the kernel and the cipher allow, per connection; the proxy's record
    /// layer otherwise.
    #[default]
    Auto,
    /// As `Auto`, but the proxy refuses to start when `kernel::kernel_support()` is missing.
    On,
    /// Never the kernel: always the proxy's record layer (where the cipher allows).
    User,
    /// OpenSSL's own record layer for the life of the connection (comparison, escape hatch).
    Off,
}

impl KtlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            KtlsMode::Auto => "auto",
            KtlsMode::On => "on",
            KtlsMode::User => "user",
            KtlsMode::Off => "off",
        }
    }
}

/// `tls_ktls` got something other than auto, on or off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadKtlsMode(pub String);

impl fmt::Display for BadKtlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tls_ktls: expected auto, on, user or off, got {:?}",
            self.0
        )
    }
}

impl std::error::Error for BadKtlsMode {}

impl FromStr for KtlsMode {
    type Err = BadKtlsMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(KtlsMode::Auto),
            "on" => Ok(KtlsMode::On),
            "user" => Ok(KtlsMode::User),
            "off" => Ok(KtlsMode::Off),
            other => Err(BadKtlsMode(other.to_string())),
        }
    }
}

/// Why a connection stays (at least partly) in user space. Bounded: usable as a metrics label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    /// `tls_ktls off`.
    Disabled,
    /// `tls_ktls user`: the proxy's record layer was asked for.
    UserChosen,
    /// The kernel has no `tls` module.
    NoKernelSupport,
    /// Neither TLS 1.2 nor TLS 1.3.
    UnsupportedVersion,
    /// The negotiated cipher has no kernel offload here (e.g. AES-CCM).
    CipherNotOffloadable,
    /// OpenSSL kept the send direction in user space although the cipher is offloadable.
    SendNotOffloaded,
    /// TLS 1.2: OpenSSL offloaded send but not receive.
    RecvNotOffloaded,
    /// TLS 1.3: no client traffic secret was captured (`capture_secrets`/`prepare_ssl` missing).
    NoTrafficSecret,
    /// Deriving the receive key failed.
    KeyDerivationFailed,
    /// The kernel refused the receive state (`setsockopt(SOL_TLS, TLS_RX)`); errno.
    RxInstallFailed(i32),
    /// AWS-LC: the kernel took the receive state but refused the send state; errno. The
    /// connection fails at its first read.
    TxInstallFailed(i32),
    /// OpenSSL already holds received bytes the kernel would never see.
    PendingData,
    /// `offload` was given another socket than the session's (a bug in the caller).
    WrongFd,
    /// AWS-LC: the handshake records it holds back (TLS 1.3 tickets) could not all be
    /// written yet; the connection stays on its record layer, which writes them first.
    HeldBackWrite,
}

impl FallbackReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackReason::Disabled => "disabled",
            FallbackReason::UserChosen => "user_chosen",
            FallbackReason::NoKernelSupport => "no_kernel_support",
            FallbackReason::UnsupportedVersion => "unsupported_version",
            FallbackReason::CipherNotOffloadable => "cipher_not_offloadable",
            FallbackReason::SendNotOffloaded => "send_not_offloaded",
            FallbackReason::RecvNotOffloaded => "recv_not_offloaded",
            FallbackReason::NoTrafficSecret => "no_traffic_secret",
            FallbackReason::KeyDerivationFailed => "key_derivation_failed",
            FallbackReason::RxInstallFailed(_) => "rx_install_failed",
            FallbackReason::TxInstallFailed(_) => "tx_install_failed",
            FallbackReason::PendingData => "pending_data",
            FallbackReason::WrongFd => "wrong_fd",
            FallbackReason::HeldBackWrite => "held_back_write",
        }
    }
}

impl fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FallbackReason::Disabled => f.write_str("kTLS disabled by configuration"),
            FallbackReason::UserChosen => f.write_str("tls_ktls user"),
            FallbackReason::NoKernelSupport => f.write_str("no kernel support"),
            FallbackReason::UnsupportedVersion => f.write_str("protocol version not offloadable"),
            FallbackReason::CipherNotOffloadable => f.write_str("cipher not offloadable"),
            FallbackReason::SendNotOffloaded => f.write_str("OpenSSL did not offload send"),
            FallbackReason::RecvNotOffloaded => f.write_str("OpenSSL did not offload receive"),
            FallbackReason::NoTrafficSecret => f.write_str("no client traffic secret captured"),
            FallbackReason::KeyDerivationFailed => f.write_str("receive key derivation failed"),
            FallbackReason::RxInstallFailed(errno) => write!(
                f,
                "TLS_RX install failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            FallbackReason::TxInstallFailed(errno) => write!(
                f,
                "TLS_TX install failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            FallbackReason::PendingData => f.write_str("OpenSSL holds unread data"),
            FallbackReason::WrongFd => f.write_str("offload called on another socket"),
            FallbackReason::HeldBackWrite => {
                f.write_str("held-back handshake records not yet written")
            }
        }
    }
}

/// Where a connection's record layer runs after `offload`.
pub enum Offload {
    /// Both directions in the kernel; the SSL object is freed.
    Kernel(KtlsSocket),
    /// Both directions on the proxy's record layer; the SSL object is freed. `reason`: why
    /// not the kernel.
    Records {
        socket: Box<RecordSocket>,
        reason: FallbackReason,
    },
    /// Records (or at least received records) stay with OpenSSL. `send_offloaded`: OpenSSL
    /// itself writes through the kernel's TX state (transparent to the caller).
    UserSpace {
        session: TlsSession,
        send_offloaded: bool,
        reason: FallbackReason,
    },
}

impl Offload {
    /// The metrics label of the path taken: "ktls", "records", "ktls_tx" or "user".
    pub fn path(&self) -> &'static str {
        match self {
            Offload::Kernel(_) => "ktls",
            Offload::Records { .. } => "records",
            Offload::UserSpace {
                send_offloaded: true,
                ..
            } => "ktls_tx",
            Offload::UserSpace { .. } => "user",
        }
    }
}

impl fmt::Debug for Offload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Offload::Kernel(socket) => f.debug_tuple("Kernel").field(socket).finish(),
            Offload::Records { socket, reason } => f
                .debug_struct("Records")
                .field("socket", socket)
                .field("reason", reason)
                .finish(),
            Offload::UserSpace {
                send_offloaded,
                reason,
                ..
            } => f
                .debug_struct("UserSpace")
                .field("send_offloaded", send_offloaded)
                .field("reason", reason)
                .finish(),
        }
    }
}

/// Moves a session whose handshake is done to the kernel as far as `mode`, the kernel, the
/// cipher and OpenSSL allow, and to the proxy's record layer where the kernel cannot take it.
/// Never fails: anything neither can take stays usable on OpenSSL. Must run before the first
/// `read` of the session. `fd` is the session's socket (the kernel's state is installed on
/// it); on another descriptor nothing moves and the session stays on OpenSSL
/// ([`FallbackReason::WrongFd`]), where its own calls refuse that descriptor too.
pub fn offload(mut session: TlsSession, fd: BorrowedFd<'_>, mode: KtlsMode) -> Offload {
    secrets::end_handshake(session.ssl_mut());
    // The write sequence number is counted; nothing after the hand-over needs the callback.
    #[cfg(not(feature = "aws-lc"))]
    ossl::stop_counting_records(session.ssl_mut());
    let send_offloaded = ossl::ktls_send_active(session.ssl());
    let fallback = |session: TlsSession, reason: FallbackReason| Offload::UserSpace {
        session,
        send_offloaded,
        reason,
    };
    if session.attached().check(fd).is_err() {
        return fallback(session, FallbackReason::WrongFd);
    }
    // AWS-LC writes its TLS 1.3 tickets only with the first application write: the SSL
    // object is about to be freed, so they go out now (with `tls_ktls off` too, so that the
    // client gets its ticket at the same time on every path).
    #[cfg(feature = "aws-lc")]
    if crate::awslc::send_held_back(session.ssl_mut()).is_err() {
        return fallback(session, FallbackReason::HeldBackWrite);
    }
    match mode {
        KtlsMode::Off => return fallback(session, FallbackReason::Disabled),
        KtlsMode::User if !send_offloaded => {
            return to_records(session, fd, FallbackReason::UserChosen)
        }
        KtlsMode::User | KtlsMode::Auto | KtlsMode::On => {}
    }
    if !kernel::kernel_support().is_available() {
        return to_records(session, fd, FallbackReason::NoKernelSupport);
    }
    let Some(version) = tls_version(session.ssl()) else {
        return fallback(session, FallbackReason::UnsupportedVersion);
    };
    let Some(cipher) = negotiated_cipher(session.ssl()) else {
        return fallback(session, FallbackReason::CipherNotOffloadable);
    };
    // AWS-LC offloads nothing itself: the proxy installs both directions.
    #[cfg(feature = "aws-lc")]
    {
        let _ = (version, cipher, fallback);
        to_kernel(session, fd)
    }
    #[cfg(not(feature = "aws-lc"))]
    {
        if !send_offloaded {
            return to_records(session, fd, FallbackReason::SendNotOffloaded);
        }
        // Bytes OpenSSL has read but not handed out would be lost to a kernel-side reader.
        if session.has_pending() {
            return fallback(session, FallbackReason::PendingData);
        }
        if !ossl::ktls_recv_active(session.ssl()) {
            if version == TlsVersion::Tls12 {
                return fallback(session, FallbackReason::RecvNotOffloaded);
            }
            if let Err(reason) = install_tls13_rx(&mut session, fd, cipher) {
                return fallback(session, reason);
            }
        }
        let attached = session.attached();
        // SSL_free sends nothing and leaves the fd open; the kernel holds both directions.
        drop(session.into_ssl());
        memory::after_handover();
        Offload::Kernel(KtlsSocket::new(attached, version, cipher))
    }
}

/// Hands a session OpenSSL has not offloaded any direction of to the proxy's record layer;
/// where that cannot be done (an unsupported cipher, bytes OpenSSL holds), OpenSSL keeps it.
/// `reason` (why not the kernel) is reported either way.
fn to_records(mut session: TlsSession, fd: BorrowedFd<'_>, reason: FallbackReason) -> Offload {
    match server_record_layer(&mut session) {
        Ok(layer) => {
            // SSL_free sends nothing and leaves the fd open: the layer owns the records now.
            drop(session.into_ssl());
            memory::after_handover();
            Offload::Records {
                socket: Box::new(RecordSocket::new(fd, layer)),
                reason,
            }
        }
        Err(_) => Offload::UserSpace {
            session,
            send_offloaded: false,
            reason,
        },
    }
}

/// AWS-LC: takes the record state as for the proxy's record layer and installs both
/// directions in the kernel, receive first. Where the kernel refuses receive, nothing is
/// installed yet (the ULP alone passes bytes through) and the record layer takes the
/// connection. Where it then refuses send (a kernel that decrypts a cipher but cannot
/// encrypt it; not seen), the connection cannot continue: the record layer gets it and
/// fails at its first read, since the kernel hands it plaintext (`tx_install_failed`).
#[cfg(feature = "aws-lc")]
fn to_kernel(mut session: TlsSession, fd: BorrowedFd<'_>) -> Offload {
    let layer = match server_record_layer(&mut session) {
        Ok(layer) => layer,
        Err(reason) => {
            return Offload::UserSpace {
                session,
                send_offloaded: false,
                reason,
            }
        }
    };
    let attached = session.attached();
    // SSL_free sends nothing and leaves the fd open: the keys are in `layer` now.
    drop(session.into_ssl());
    memory::after_handover();
    let records = |layer, reason| Offload::Records {
        socket: Box::new(RecordSocket::new(fd, layer)),
        reason,
    };
    let Ok((rx, tx)) = layer.kernel_state() else {
        return records(layer, FallbackReason::KeyDerivationFailed);
    };
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(0);
    if let Err(e) = kernel::enable_ulp(fd).and_then(|()| kernel::set_crypto(fd, Direction::Rx, &rx))
    {
        return records(layer, FallbackReason::RxInstallFailed(errno(e)));
    }
    if let Err(e) = kernel::set_crypto(fd, Direction::Tx, &tx) {
        return records(layer, FallbackReason::TxInstallFailed(errno(e)));
    }
    Offload::Kernel(KtlsSocket::new(attached, layer.version(), layer.cipher()))
}

/// Installs TLS 1.3 receive from the captured client traffic secret, record sequence 0: with
/// read-ahead off OpenSSL has read nothing past the client's Finished.
#[cfg(not(feature = "aws-lc"))]
fn install_tls13_rx(
    session: &mut TlsSession,
    fd: BorrowedFd<'_>,
    cipher: KernelCipher,
) -> Result<(), FallbackReason> {
    let secret = take_client_secret(session.ssl_mut()).ok_or(FallbackReason::NoTrafficSecret)?;
    let keys =
        traffic_keys(cipher, secret.bytes()).map_err(|_| FallbackReason::KeyDerivationFailed)?;
    let info = CryptoInfo::tls13(cipher, &keys.key, &keys.iv, 0)
        .map_err(|_| FallbackReason::KeyDerivationFailed)?;
    kernel::set_crypto(fd, Direction::Rx, &info)
        .map_err(|e| FallbackReason::RxInstallFailed(e.raw_os_error().unwrap_or(0)))
}

fn tls_version(ssl: &SslRef) -> Option<TlsVersion> {
    match ssl.version2()? {
        SslVersion::TLS1_2 => Some(TlsVersion::Tls12),
        SslVersion::TLS1_3 => Some(TlsVersion::Tls13),
        _ => None,
    }
}

fn negotiated_cipher(ssl: &SslRef) -> Option<KernelCipher> {
    KernelCipher::from_standard_name(crate::settings::cipher_standard_name(
        ssl.current_cipher()?,
    )?)
}
