//! Records with their content type: control records (alerts, handshake messages) travel in
//! `recvmsg`/`sendmsg` control messages (`TLS_GET_RECORD_TYPE`, `TLS_SET_RECORD_TYPE`).

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

use libc::{c_int, c_void};

use super::{check_len, SOL_TLS};

/// `TLS_SET_RECORD_TYPE` / `TLS_GET_RECORD_TYPE` (linux/tls.h): cmsg types on SOL_TLS.
const TLS_SET_RECORD_TYPE: c_int = 1;
const TLS_GET_RECORD_TYPE: c_int = 2;
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

/// One record read with `recv_record`: its content type and how many of its bytes were copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub record_type: u8,
    pub len: usize,
}

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
