//! The kernel's TLS socket interface (kTLS, `linux/tls.h`): the upper-layer protocol switch,
//! crypto state installation, control records through `recvmsg`/`sendmsg` cmsgs, and the plain
//! syscalls a kTLS socket is driven with afterwards (`read`, `send`, `sendmsg`, `sendfile`).
//!
//! Every `unsafe` block of the crate outside `ossl` is here. Nothing in this module knows
//! OpenSSL: it takes keys and sequence numbers, never SSL objects. Every function takes the
//! socket as a `BorrowedFd`: the descriptor is open for the whole syscall by construction.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, IoSlice};
use std::mem;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::OnceLock;

use libc::{c_int, c_void, socklen_t};

/// `SOL_TLS` (linux/socket.h).
const SOL_TLS: c_int = libc::SOL_TLS;
/// `TCP_ULP` (linux/tcp.h): selects the upper-layer protocol of a TCP socket.
const TCP_ULP: c_int = libc::TCP_ULP;
/// `TLS_TX` / `TLS_RX` (linux/tls.h): setsockopt names of the two directions.
const TLS_TX: c_int = 1;
const TLS_RX: c_int = 2;
/// `TLS_SET_RECORD_TYPE` / `TLS_GET_RECORD_TYPE` (linux/tls.h): cmsg types on SOL_TLS.
const TLS_SET_RECORD_TYPE: c_int = 1;
const TLS_GET_RECORD_TYPE: c_int = 2;
/// `TLS_1_2_VERSION` / `TLS_1_3_VERSION` (linux/tls.h).
const TLS_1_2_VERSION: u16 = 0x0303;
const TLS_1_3_VERSION: u16 = 0x0304;
/// `TLS_CIPHER_*` (linux/tls.h).
const TLS_CIPHER_AES_GCM_128: u16 = 51;
const TLS_CIPHER_AES_GCM_256: u16 = 52;
const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;
/// The most iovecs one `sendmsg` takes (`UIO_MAXIOV`); more are written by a later call.
const IOV_MAX: usize = 1024;
/// Control buffer for one cmsg carrying one byte, 8-byte aligned as `cmsghdr` requires.
/// `CMSG_SPACE(1)` is 24 on 64-bit Linux; 32 bytes leave room on any layout.
type CmsgBuf = [u64; 4];

/// TLS record content types (RFC 8446 §5.1) as the kernel reports and accepts them.
pub mod record_type {
    pub const CHANGE_CIPHER_SPEC: u8 = 20;
    pub const ALERT: u8 = 21;
    pub const HANDSHAKE: u8 = 22;
    pub const APPLICATION_DATA: u8 = 23;
}

// ---------------------------------------------------------------- UAPI structs (linux/tls.h)

/// `struct tls_crypto_info`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawCryptoInfo {
    version: u16,
    cipher_type: u16,
}

/// `struct tls12_crypto_info_aes_gcm_128` (also used for TLS 1.3).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawAesGcm128 {
    info: RawCryptoInfo,
    iv: [u8; 8],
    key: [u8; 16],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

/// `struct tls12_crypto_info_aes_gcm_256`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawAesGcm256 {
    info: RawCryptoInfo,
    iv: [u8; 8],
    key: [u8; 32],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

/// `struct tls12_crypto_info_chacha20_poly1305` (its `salt[0]` takes no space).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawChacha20Poly1305 {
    info: RawCryptoInfo,
    iv: [u8; 12],
    key: [u8; 32],
    rec_seq: [u8; 8],
}

// The kernel checks optlen against these exact sizes.
const _: () = assert!(mem::size_of::<RawCryptoInfo>() == 4);
const _: () = assert!(mem::size_of::<RawAesGcm128>() == 40);
const _: () = assert!(mem::size_of::<RawAesGcm256>() == 56);
const _: () = assert!(mem::size_of::<RawChacha20Poly1305>() == 56);

// ---------------------------------------------------------------- safe model

/// Whether this kernel can take TLS records at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    Available,
    /// The `tls` upper-layer protocol cannot be attached; `reason` says why, for the log.
    Missing {
        reason: String,
    },
}

impl Support {
    pub fn is_available(&self) -> bool {
        matches!(self, Support::Available)
    }

    /// Human-readable state for the startup log line.
    pub fn describe(&self) -> &str {
        match self {
            Support::Available => "kernel TLS available",
            Support::Missing { reason } => reason,
        }
    }
}

/// Which half of the connection a crypto state is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Tx,
    Rx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// The AEAD ciphers kernel 6.1 and OpenSSL 3.0 both offload (CCM is left out on purpose:
/// OpenSSL 3.0 does not offload it, see docs/KTLS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelCipher {
    AesGcm128,
    AesGcm256,
    Chacha20Poly1305,
}

impl KernelCipher {
    pub fn key_len(self) -> usize {
        match self {
            KernelCipher::AesGcm128 => 16,
            KernelCipher::AesGcm256 | KernelCipher::Chacha20Poly1305 => 32,
        }
    }

    /// The cipher of a TLS 1.3 suite or TLS 1.2 ECDHE suite, by its IANA (RFC) name as
    /// OpenSSL's `SSL_CIPHER_standard_name` reports it.
    pub fn from_standard_name(name: &str) -> Option<KernelCipher> {
        if name.ends_with("_WITH_AES_128_GCM_SHA256") || name == "TLS_AES_128_GCM_SHA256" {
            Some(KernelCipher::AesGcm128)
        } else if name.ends_with("_WITH_AES_256_GCM_SHA384") || name == "TLS_AES_256_GCM_SHA384" {
            Some(KernelCipher::AesGcm256)
        } else if name.ends_with("_WITH_CHACHA20_POLY1305_SHA256")
            || name == "TLS_CHACHA20_POLY1305_SHA256"
        {
            Some(KernelCipher::Chacha20Poly1305)
        } else {
            None
        }
    }

    fn from_uapi(cipher_type: u16) -> Option<KernelCipher> {
        match cipher_type {
            TLS_CIPHER_AES_GCM_128 => Some(KernelCipher::AesGcm128),
            TLS_CIPHER_AES_GCM_256 => Some(KernelCipher::AesGcm256),
            TLS_CIPHER_CHACHA20_POLY1305 => Some(KernelCipher::Chacha20Poly1305),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KernelCipher::AesGcm128 => "aes-128-gcm",
            KernelCipher::AesGcm256 => "aes-256-gcm",
            KernelCipher::Chacha20Poly1305 => "chacha20-poly1305",
        }
    }
}

/// Key material of one direction, in the layout the kernel wants for each cipher. For the GCM
/// ciphers the 12-byte nonce base splits into a 4-byte `salt` and an 8-byte `iv`; for
/// ChaCha20-Poly1305 the whole 12 bytes are the `iv`.
#[derive(Clone, PartialEq, Eq)]
pub enum CryptoInfo {
    AesGcm128 {
        version: TlsVersion,
        key: [u8; 16],
        salt: [u8; 4],
        iv: [u8; 8],
        rec_seq: [u8; 8],
    },
    AesGcm256 {
        version: TlsVersion,
        key: [u8; 32],
        salt: [u8; 4],
        iv: [u8; 8],
        rec_seq: [u8; 8],
    },
    Chacha20Poly1305 {
        version: TlsVersion,
        key: [u8; 32],
        iv: [u8; 12],
        rec_seq: [u8; 8],
    },
}

/// `CryptoInfo::tls13` got a key or IV of the wrong size for the cipher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLengthError {
    pub cipher: KernelCipher,
    pub key_len: usize,
    pub iv_len: usize,
}

impl fmt::Display for KeyLengthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: key of {} bytes and IV of {} bytes (want {} and 12)",
            self.cipher.as_str(),
            self.key_len,
            self.iv_len,
            self.cipher.key_len()
        )
    }
}

impl std::error::Error for KeyLengthError {}

impl CryptoInfo {
    /// A TLS 1.3 direction from its traffic key and 12-byte IV (RFC 8446 §7.3) and the
    /// sequence number of the next record.
    pub fn tls13(
        cipher: KernelCipher,
        key: &[u8],
        iv: &[u8],
        seq: u64,
    ) -> Result<CryptoInfo, KeyLengthError> {
        let bad = KeyLengthError {
            cipher,
            key_len: key.len(),
            iv_len: iv.len(),
        };
        let iv: [u8; 12] = iv.try_into().map_err(|_| bad)?;
        let rec_seq = seq.to_be_bytes();
        let (salt, nonce) = iv.split_at(4);
        let version = TlsVersion::Tls13;
        Ok(match cipher {
            KernelCipher::AesGcm128 => CryptoInfo::AesGcm128 {
                version,
                key: key.try_into().map_err(|_| bad)?,
                salt: salt.try_into().map_err(|_| bad)?,
                iv: nonce.try_into().map_err(|_| bad)?,
                rec_seq,
            },
            KernelCipher::AesGcm256 => CryptoInfo::AesGcm256 {
                version,
                key: key.try_into().map_err(|_| bad)?,
                salt: salt.try_into().map_err(|_| bad)?,
                iv: nonce.try_into().map_err(|_| bad)?,
                rec_seq,
            },
            KernelCipher::Chacha20Poly1305 => CryptoInfo::Chacha20Poly1305 {
                version,
                key: key.try_into().map_err(|_| bad)?,
                iv,
                rec_seq,
            },
        })
    }

    /// One direction of either version from the record layer's keys: `iv` is the 12-byte
    /// nonce base (TLS 1.3, TLS 1.2 ChaCha20-Poly1305) or the TLS 1.2 AES-GCM salt followed
    /// by zeros, whose explicit nonce is then the sequence number (RFC 5288 §3), as the
    /// record layer writes it; the kernel counts it up from `seq` with each record.
    pub fn of_direction(
        version: TlsVersion,
        cipher: KernelCipher,
        key: &[u8],
        iv: &[u8; 12],
        seq: u64,
    ) -> Result<CryptoInfo, KeyLengthError> {
        let mut nonce = *iv;
        if version == TlsVersion::Tls12 && cipher != KernelCipher::Chacha20Poly1305 {
            nonce[4..].copy_from_slice(&seq.to_be_bytes());
        }
        let mut info = CryptoInfo::tls13(cipher, key, &nonce, seq)?;
        match &mut info {
            CryptoInfo::AesGcm128 { version: v, .. }
            | CryptoInfo::AesGcm256 { version: v, .. }
            | CryptoInfo::Chacha20Poly1305 { version: v, .. } => *v = version,
        }
        Ok(info)
    }

    pub fn version(&self) -> TlsVersion {
        match self {
            CryptoInfo::AesGcm128 { version, .. }
            | CryptoInfo::AesGcm256 { version, .. }
            | CryptoInfo::Chacha20Poly1305 { version, .. } => *version,
        }
    }

    pub fn cipher(&self) -> KernelCipher {
        match self {
            CryptoInfo::AesGcm128 { .. } => KernelCipher::AesGcm128,
            CryptoInfo::AesGcm256 { .. } => KernelCipher::AesGcm256,
            CryptoInfo::Chacha20Poly1305 { .. } => KernelCipher::Chacha20Poly1305,
        }
    }

    fn raw_header(&self) -> RawCryptoInfo {
        let version = match self.version() {
            TlsVersion::Tls12 => TLS_1_2_VERSION,
            TlsVersion::Tls13 => TLS_1_3_VERSION,
        };
        let cipher_type = match self.cipher() {
            KernelCipher::AesGcm128 => TLS_CIPHER_AES_GCM_128,
            KernelCipher::AesGcm256 => TLS_CIPHER_AES_GCM_256,
            KernelCipher::Chacha20Poly1305 => TLS_CIPHER_CHACHA20_POLY1305,
        };
        RawCryptoInfo {
            version,
            cipher_type,
        }
    }
}

impl fmt::Debug for CryptoInfo {
    // Never print key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CryptoInfo({:?}, {})",
            self.version(),
            self.cipher().as_str()
        )
    }
}

/// One record read with `recv_record`: its content type and how many of its bytes were copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub record_type: u8,
    pub len: usize,
}

// ---------------------------------------------------------------- probe

/// Whether this kernel can attach the `tls` ULP, probed once per process on a loopback pair.
pub fn kernel_support() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(probe_support).clone()
}

/// Probes without the cache (for tests and for the guest harness, which unloads the module).
pub fn probe_support() -> Support {
    // TCP_ULP needs an established socket; a loopback pair is the cheapest one to get.
    let pair = TcpListener::bind("127.0.0.1:0").and_then(|listener| {
        let client = TcpStream::connect(listener.local_addr()?)?;
        let (server, _) = listener.accept()?;
        Ok((client, server))
    });
    let (client, _server) = match pair {
        Ok(pair) => pair,
        Err(e) => {
            return Support::Missing {
                reason: format!("cannot open a loopback probe: {e}"),
            }
        }
    };
    match enable_ulp(client.as_fd()) {
        Ok(()) => Support::Available,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Support::Missing {
            reason: "kernel has no tls module (TCP_ULP \"tls\": ENOENT)".to_string(),
        },
        Err(e) => Support::Missing {
            reason: format!("TCP_ULP \"tls\" refused: {e}"),
        },
    }
}

// ---------------------------------------------------------------- setup

/// Attaches the `tls` upper-layer protocol to an established TCP socket.
pub fn enable_ulp(fd: BorrowedFd<'_>) -> io::Result<()> {
    let name = b"tls";
    // SAFETY: `name` is valid for `name.len()` bytes for the duration of the call; the kernel
    // copies at most optlen bytes and keeps no pointer. An invalid fd yields EBADF.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            TCP_ULP,
            name.as_ptr().cast::<c_void>(),
            name.len() as socklen_t,
        )
    };
    check(ret).map(drop)
}

/// Installs the crypto state of one direction (the ULP must be attached; OpenSSL attaches it
/// when it offloads send, `enable_ulp` otherwise).
pub fn set_crypto(fd: BorrowedFd<'_>, direction: Direction, info: &CryptoInfo) -> io::Result<()> {
    let header = info.raw_header();
    match *info {
        CryptoInfo::AesGcm128 {
            key,
            salt,
            iv,
            rec_seq,
            ..
        } => setsockopt_tls(
            fd,
            direction,
            &RawAesGcm128 {
                info: header,
                iv,
                key,
                salt,
                rec_seq,
            },
        ),
        CryptoInfo::AesGcm256 {
            key,
            salt,
            iv,
            rec_seq,
            ..
        } => setsockopt_tls(
            fd,
            direction,
            &RawAesGcm256 {
                info: header,
                iv,
                key,
                salt,
                rec_seq,
            },
        ),
        CryptoInfo::Chacha20Poly1305 {
            key, iv, rec_seq, ..
        } => setsockopt_tls(
            fd,
            direction,
            &RawChacha20Poly1305 {
                info: header,
                iv,
                key,
                rec_seq,
            },
        ),
    }
}

/// The crypto structs above are plain `repr(C)` byte arrays; this is the only way they reach
/// the kernel.
fn setsockopt_tls<T: Copy>(fd: BorrowedFd<'_>, direction: Direction, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live, initialised repr(C) struct of exactly size_of::<T>() bytes
    // matching linux/tls.h (sizes asserted at compile time above); the kernel copies optlen
    // bytes and keeps no pointer.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_TLS,
            direction_opt(direction),
            (value as *const T).cast::<c_void>(),
            mem::size_of::<T>() as socklen_t,
        )
    };
    check(ret).map(drop)
}

fn direction_opt(direction: Direction) -> c_int {
    match direction {
        Direction::Tx => TLS_TX,
        Direction::Rx => TLS_RX,
    }
}

/// What the kernel holds for one direction: `Ok(None)` when nothing is installed, else the
/// version and cipher (never the keys). Used to verify an offload really happened.
pub fn installed(
    fd: BorrowedFd<'_>,
    direction: Direction,
) -> io::Result<Option<(TlsVersion, KernelCipher)>> {
    let mut raw = RawCryptoInfo::default();
    // The kernel accepts exactly sizeof(struct tls_crypto_info) to return only the header.
    let mut len = mem::size_of::<RawCryptoInfo>() as socklen_t;
    // SAFETY: `raw` is a writable repr(C) struct of `len` bytes and `len` a valid in/out
    // length; the kernel writes at most `len` bytes.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            SOL_TLS,
            direction_opt(direction),
            (&mut raw as *mut RawCryptoInfo).cast::<c_void>(),
            &mut len,
        )
    };
    match check(ret) {
        Ok(_) => {}
        // No ULP attached (ENOPROTOOPT) or nothing installed yet (EBUSY on 6.1).
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOPROTOOPT) | Some(libc::EBUSY)
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e),
    }
    let version = match raw.version {
        TLS_1_2_VERSION => TlsVersion::Tls12,
        TLS_1_3_VERSION => TlsVersion::Tls13,
        _ => return Ok(None),
    };
    Ok(KernelCipher::from_uapi(raw.cipher_type).map(|cipher| (version, cipher)))
}

// ---------------------------------------------------------------- records

/// Reads one record with its content type. After `read` fails with EIO a control record
/// (alert, handshake) is at the head of the queue; this is how to see it.
pub fn recv_record(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Record> {
    let mut control: CmsgBuf = [0; 4];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast::<c_void>(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast::<c_void>();
    msg.msg_controllen = mem::size_of::<CmsgBuf>() as _;
    // SAFETY: `msg` points at `iov` (valid for buf.len() writable bytes) and at `control`
    // (valid for msg_controllen bytes, 8-aligned); all live across the call.
    let ret = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, 0) };
    let len = check_len(ret)?;
    // The kernel attaches TLS_GET_RECORD_TYPE to every record when a control buffer is given;
    // without one it would refuse control records, so a missing cmsg means application data.
    let mut record_type = record_type::APPLICATION_DATA;
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR/NXTHDR stay within msg_controllen and
    // CMSG_DATA of a SOL_TLS/TLS_GET_RECORD_TYPE header points at its (>= 1) data byte.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let header = &*cmsg;
            if header.cmsg_level == SOL_TLS
                && header.cmsg_type == TLS_GET_RECORD_TYPE
                && header.cmsg_len as usize >= libc::CMSG_LEN(1) as usize
            {
                record_type = *libc::CMSG_DATA(cmsg);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Record { record_type, len })
}

/// Sends one record of `record_type` (not application data) through the kernel's TX state.
pub fn send_record(fd: BorrowedFd<'_>, record_type: u8, data: &[u8]) -> io::Result<usize> {
    let mut control: CmsgBuf = [0; 4];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut c_void,
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast::<c_void>();
    // SAFETY: CMSG_SPACE is pure arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(1) } as _;
    // SAFETY: `control` is 8-aligned and CMSG_SPACE(1) <= its size, so the first header and
    // its one data byte lie inside it; `data` is only read by the kernel (iov_base is *mut
    // in the C type only); everything is live across sendmsg.
    let ret = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = SOL_TLS;
        (*cmsg).cmsg_type = TLS_SET_RECORD_TYPE;
        (*cmsg).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(cmsg) = record_type;
        libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    check_len(ret)
}

/// Sends an alert record (level 1 warning / 2 fatal, RFC 8446 §6 description).
pub fn send_alert(fd: BorrowedFd<'_>, level: u8, description: u8) -> io::Result<()> {
    let sent = send_record(fd, record_type::ALERT, &[level, description])?;
    if sent == 2 {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "alert record cut short",
        ))
    }
}

// ---------------------------------------------------------------- plain I/O

/// `read(2)`, retried on EINTR. On a kTLS RX socket it returns decrypted application data
/// and fails with EIO when a control record is next.
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for buf.len() writable bytes for the duration of the call.
        let ret =
            unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast::<c_void>(), buf.len()) };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// `recv(2)` without flags, retried on EINTR: what [`read`] does on a socket, without the
/// part of `read(2)` that is for files (the position lock look-up, `rw_verify_area`, the
/// fsnotify hook). On a kTLS RX socket it is the same as `read`: both end in the socket's
/// `recvmsg` with the same flags (MSG_DONTWAIT from O_NONBLOCK), so it returns decrypted
/// application data and fails with EIO when a control record is next. Sockets only.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for buf.len() writable bytes for the duration of the call.
        let ret = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast::<c_void>(),
                buf.len(),
                0,
            )
        };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// `send(2)` with MSG_NOSIGNAL (a closed peer gives EPIPE, never SIGPIPE), retried on EINTR.
pub fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for buf.len() readable bytes for the duration of the call.
        let ret = unsafe {
            libc::send(
                fd.as_raw_fd(),
                buf.as_ptr().cast::<c_void>(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Gathered write (`sendmsg(2)`, MSG_NOSIGNAL) of at most IOV_MAX slices, retried on EINTR.
pub fn writev(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let bufs = &bufs[..bufs.len().min(IOV_MAX)];
    loop {
        // SAFETY: an all-zero msghdr is a valid empty header.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        // IoSlice is documented to be ABI-compatible with `struct iovec` on Unix; the kernel
        // only reads through msg_iov for a send.
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len() as _;
        // SAFETY: `msg` points at `bufs.len()` live iovecs, each valid for its length.
        let ret = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// `sendfile(2)` of up to `count` bytes of `in_fd` from `*offset`, which advances by what
/// was sent. On a kTLS TX socket the kernel encrypts the file pages itself.
pub fn sendfile(
    out_fd: BorrowedFd<'_>,
    in_fd: BorrowedFd<'_>,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off: libc::off_t = libc::off_t::try_from(*offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "sendfile offset too large"))?;
    loop {
        // SAFETY: `off` is a valid in/out offset; the kernel reads `in_fd` and writes `out_fd`
        // without touching our memory otherwise.
        let ret = unsafe { libc::sendfile(out_fd.as_raw_fd(), in_fd.as_raw_fd(), &mut off, count) };
        match check_len(ret) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(sent) => {
                *offset = off as u64;
                return Ok(sent);
            }
            Err(e) => return Err(e),
        }
    }
}

// ---------------------------------------------------------------- statistics

/// The kernel's kTLS counters (`/proc/net/tls_stat`: TlsCurrTxSw, TlsRxSw, TlsDecryptError,
/// ...). Empty when the module is not loaded.
pub fn tls_stat() -> BTreeMap<String, u64> {
    std::fs::read_to_string("/proc/net/tls_stat")
        .map(|text| parse_tls_stat(&text))
        .unwrap_or_default()
}

/// Parses `Name<whitespace>value` lines; anything else is skipped.
pub fn parse_tls_stat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?;
            let value = fields.next()?.parse().ok()?;
            Some((name.to_string(), value))
        })
        .collect()
}

// ---------------------------------------------------------------- helpers

fn check(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_len(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AWS-LC hand-over's kernel state: TLS 1.3 as `tls13`, TLS 1.2 AES-GCM with the
    /// salt and the sequence number as explicit nonce, TLS 1.2 ChaCha20 with the whole IV.
    #[test]
    fn record_layer_keys_become_the_kernel_state_of_either_version() {
        let iv: [u8; 12] = [1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        let key = [7u8; 16];
        assert_eq!(
            CryptoInfo::of_direction(TlsVersion::Tls13, KernelCipher::AesGcm128, &key, &iv, 3),
            CryptoInfo::tls13(KernelCipher::AesGcm128, &key, &iv, 3)
        );
        let gcm12 =
            CryptoInfo::of_direction(TlsVersion::Tls12, KernelCipher::AesGcm128, &key, &iv, 9)
                .unwrap();
        let CryptoInfo::AesGcm128 {
            version,
            salt,
            iv: explicit,
            rec_seq,
            ..
        } = gcm12
        else {
            panic!("{gcm12:?}");
        };
        assert_eq!(version, TlsVersion::Tls12);
        assert_eq!(salt, [1, 2, 3, 4]);
        assert_eq!(explicit, 9u64.to_be_bytes());
        assert_eq!(rec_seq, 9u64.to_be_bytes());
        let full: [u8; 12] = core::array::from_fn(|i| i as u8 + 1);
        let chacha = CryptoInfo::of_direction(
            TlsVersion::Tls12,
            KernelCipher::Chacha20Poly1305,
            &[5u8; 32],
            &full,
            1,
        )
        .unwrap();
        assert!(matches!(
            chacha,
            CryptoInfo::Chacha20Poly1305 { version: TlsVersion::Tls12, iv, rec_seq, .. }
                if iv == full && rec_seq == 1u64.to_be_bytes()
        ));
    }

    #[test]
    fn tls13_gcm_splits_iv_into_salt_and_nonce() {
        let iv: Vec<u8> = (1..=12).collect();
        let info = CryptoInfo::tls13(KernelCipher::AesGcm128, &[7; 16], &iv, 5).unwrap();
        match info {
            CryptoInfo::AesGcm128 {
                salt, iv, rec_seq, ..
            } => {
                assert_eq!(salt, [1, 2, 3, 4]);
                assert_eq!(iv, [5, 6, 7, 8, 9, 10, 11, 12]);
                assert_eq!(rec_seq, [0, 0, 0, 0, 0, 0, 0, 5]);
            }
            other => panic!("wrong variant {other:?}"),
        }
    }

    #[test]
    fn tls13_rejects_wrong_key_length() {
        let err = CryptoInfo::tls13(KernelCipher::AesGcm256, &[0; 16], &[0; 12], 0).unwrap_err();
        assert_eq!(err.key_len, 16);
        assert!(CryptoInfo::tls13(KernelCipher::Chacha20Poly1305, &[0; 32], &[0; 8], 0).is_err());
    }

    #[test]
    fn cipher_names() {
        assert_eq!(
            KernelCipher::from_standard_name("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"),
            Some(KernelCipher::AesGcm256)
        );
        assert_eq!(
            KernelCipher::from_standard_name("TLS_CHACHA20_POLY1305_SHA256"),
            Some(KernelCipher::Chacha20Poly1305)
        );
        assert_eq!(
            KernelCipher::from_standard_name("TLS_AES_128_CCM_SHA256"),
            None
        );
    }

    #[test]
    fn parses_tls_stat() {
        let stats = parse_tls_stat("TlsCurrTxSw                     \t1\nTlsRxSw 22\ngarbage\n");
        assert_eq!(stats.get("TlsCurrTxSw"), Some(&1));
        assert_eq!(stats.get("TlsRxSw"), Some(&22));
        assert_eq!(stats.len(), 2);
    }
}
