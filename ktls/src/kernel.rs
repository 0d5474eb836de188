//! The kernel's TLS socket interface (kTLS, `linux/tls.h`): the upper-layer protocol switch,
//! crypto state installation, control records through `recvmsg`/`sendmsg` cmsgs, and the plain
//! syscalls a kTLS socket is driven with afterwards (`read`, `send`, `sendmsg`, `sendfile`).
//!
//! Every `unsafe` block of the crate outside `ossl` is here or in the submodules: `records`
//! (records with their content type, through cmsgs) and `plain_io` (the plain syscalls);
//! `crypto` is the crypto state and its `linux/tls.h` layout, without `unsafe`. Nothing in
//! this module knows OpenSSL: it takes keys and sequence numbers, never SSL objects. Every
//! function takes the socket as a `BorrowedFd`: the descriptor is open for the whole syscall
//! by construction.

use std::collections::BTreeMap;
use std::io;
use std::mem;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::OnceLock;

use libc::{c_int, c_void, socklen_t};

use crypto::{RawAesGcm128, RawAesGcm256, RawChacha20Poly1305, RawCryptoInfo};
use crypto::{TLS_1_2_VERSION, TLS_1_3_VERSION};

mod crypto;
mod plain_io;
mod records;

pub use crypto::{CryptoInfo, KernelCipher, KeyLengthError, TlsVersion};
pub use plain_io::{read, recv, sendfile, write, writev};
pub use records::{record_type, recv_record, send_alert, send_record, Record};

/// `SOL_TLS` (linux/socket.h).
const SOL_TLS: c_int = libc::SOL_TLS;
/// `TCP_ULP` (linux/tcp.h): selects the upper-layer protocol of a TCP socket.
const TCP_ULP: c_int = libc::TCP_ULP;
/// `TLS_TX` / `TLS_RX` (linux/tls.h): setsockopt names of the two directions.
const TLS_TX: c_int = 1;
const TLS_RX: c_int = 2;

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
    // matching linux/tls.h (sizes asserted at compile time in `crypto`); the kernel copies
    // optlen bytes and keeps no pointer.
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
    fn parses_tls_stat() {
        let stats = parse_tls_stat("TlsCurrTxSw                     \t1\nTlsRxSw 22\ngarbage\n");
        assert_eq!(stats.get("TlsCurrTxSw"), Some(&1));
        assert_eq!(stats.get("TlsRxSw"), Some(&22));
        assert_eq!(stats.len(), 2);
    }
}
