//! The self-test's server side: a connection built like the proxy's (TlsSession on the socket
//! fd, then `offload`), driven through whichever record layer the offload chose.

use std::fs::File;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::thread;
use std::time::{Duration, Instant};

use ktls::kernel::{self, Direction};
use ktls::offload::{self, FallbackReason, KtlsMode, KtlsSocket, Offload};
use ktls::{IoStatus, Progress, TlsError, TlsSession};
use openssl::ssl::{Ssl, SslContext};

use super::{mib_per_s, Case, CaseKind, Sizes, ECHO_CHUNK, GO, IO_TIMEOUT, KEY_UPDATE_PROBE};

/// The server's record layer after `offload`: kernel records, the proxy's record layer, or
/// OpenSSL's.
enum Tls {
    Kernel(KtlsSocket),
    User(TlsSession),
    Records(Box<ktls::record::RecordSocket>),
}

/// The server's connection: the socket it owns and the record layer every call lends it to.
struct Conn {
    stream: TcpStream,
    tls: Tls,
}

impl Conn {
    fn read(&mut self, buf: &mut [u8]) -> IoStatus {
        let fd = self.stream.as_fd();
        match &mut self.tls {
            Tls::Kernel(socket) => socket.read(fd, buf),
            Tls::User(session) => session.read(fd, buf),
            Tls::Records(socket) => socket.read(fd, buf),
        }
    }

    fn write_all(&mut self, mut buf: &[u8]) -> Result<(), String> {
        while !buf.is_empty() {
            let fd = self.stream.as_fd();
            let status = match &mut self.tls {
                Tls::Kernel(socket) => socket.write(fd, buf),
                Tls::User(session) => session.write(fd, buf),
                Tls::Records(socket) => socket.write(fd, buf),
            };
            buf = &buf[done(status, "write")?..];
        }
        Ok(())
    }

    /// The kernel path sends the file with sendfile; user space must copy it through OpenSSL.
    fn send_file(&mut self, file: &mut File, len: usize) -> Result<(), String> {
        match &mut self.tls {
            Tls::Kernel(socket) => {
                let mut offset = 0u64;
                while (offset as usize) < len {
                    let left = len - offset as usize;
                    let status =
                        socket.sendfile(self.stream.as_fd(), file.as_fd(), &mut offset, left);
                    if done(status, "sendfile")? == 0 {
                        return Err("sendfile sent nothing (file too short?)".to_string());
                    }
                }
                Ok(())
            }
            Tls::User(_) | Tls::Records(_) => {
                let mut data = vec![0u8; len];
                file.read_exact(&mut data)
                    .map_err(|e| format!("reading the file: {e}"))?;
                self.write_all(&data)
            }
        }
    }

    /// Reads on a non-blocking socket, waiting between attempts (the test has no poller).
    fn read_nonblocking(&mut self, buf: &mut [u8]) -> IoStatus {
        let deadline = Instant::now() + IO_TIMEOUT;
        loop {
            match self.read(buf) {
                IoStatus::WantRead if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(5))
                }
                other => return other,
            }
        }
    }

    fn shutdown(&mut self) -> Result<(), String> {
        let fd = self.stream.as_fd();
        match &mut self.tls {
            Tls::Kernel(socket) => done(socket.shutdown(fd), "close_notify").map(drop),
            Tls::User(session) => {
                session.shutdown(fd);
                Ok(())
            }
            Tls::Records(socket) => {
                socket.shutdown(fd);
                Ok(())
            }
        }
    }
}

/// Bytes done, or why not. The sockets block with a timeout, so "want" means timed out.
fn done(status: IoStatus, what: &str) -> Result<usize, String> {
    match status {
        IoStatus::Done(n) => Ok(n),
        IoStatus::WantRead | IoStatus::WantWrite => Err(format!("{what}: timed out")),
        IoStatus::Closed => Err(format!("{what}: peer closed")),
        IoStatus::Error(e) => Err(format!("{what}: {e}")),
    }
}

/// Reads exactly `len` bytes, writing each piece straight back.
fn echo(conn: &mut Conn, len: usize) -> Result<(), String> {
    let mut buf = vec![0u8; ECHO_CHUNK];
    let mut left = len;
    while left > 0 {
        let want = left.min(buf.len());
        let n = done(conn.read(&mut buf[..want]), "echo read")?;
        conn.write_all(&buf[..n])?;
        left -= n;
    }
    Ok(())
}

/// What the server saw: where the records went, and how the case ended.
pub(super) struct ServerReport {
    pub(super) path: &'static str,
    pub(super) reason: Option<FallbackReason>,
    pub(super) kernel_tx: Option<String>,
    pub(super) kernel_rx: Option<String>,
    /// What the final read returned ("closed", "keyupdate error", ...).
    pub(super) end: String,
    pub(super) sendfile_mib_s: Option<f64>,
}

fn installed(fd: BorrowedFd<'_>, direction: Direction) -> Option<String> {
    match kernel::installed(fd, direction) {
        Ok(Some((_, cipher))) => Some(cipher.as_str().to_string()),
        _ => None,
    }
}

/// Accepts the client, does the handshake on a blocking socket, offloads as the proxy does,
/// and serves the case.
pub(super) fn serve(
    listener: TcpListener,
    ctx: SslContext,
    case: Case,
    sizes: Sizes,
    file: Option<File>,
) -> Result<ServerReport, String> {
    let (stream, offloaded) = accept(listener, ctx)?;
    let path = offloaded.path();
    let (tls, reason) = match offloaded {
        Offload::Kernel(socket) => (Tls::Kernel(socket), None),
        Offload::UserSpace {
            session, reason, ..
        } => (Tls::User(session), Some(reason)),
        Offload::Records { socket, reason } => (Tls::Records(socket), Some(reason)),
    };
    let mut report = ServerReport {
        path,
        reason,
        kernel_tx: installed(stream.as_fd(), Direction::Tx),
        kernel_rx: installed(stream.as_fd(), Direction::Rx),
        end: String::new(),
        sendfile_mib_s: None,
    };
    let mut conn = Conn { stream, tls };
    match case.kind {
        CaseKind::Data => serve_data(&mut conn, &sizes, file, &mut report)?,
        CaseKind::KeyUpdate => report.end = serve_key_update(&mut conn)?,
        CaseKind::Nonblocking => report.end = serve_nonblocking(&mut conn)?,
    }
    Ok(report)
}

/// The accepted socket, after the handshake and the offload.
fn accept(listener: TcpListener, ctx: SslContext) -> Result<(TcpStream, Offload), String> {
    let (stream, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    // The echo is request/response: Nagle plus delayed ACKs would stall every chunk 40 ms.
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut ssl = Ssl::new(&ctx).map_err(|e| e.to_string())?;
    offload::prepare_ssl(&mut ssl).map_err(|e| e.to_string())?;
    ssl.set_accept_state();
    let mut session = TlsSession::new(ssl, stream.as_fd()).map_err(|e| e.to_string())?;
    match session.handshake(stream.as_fd()) {
        Ok(Progress::Done) => {}
        Ok(other) => {
            return Err(format!(
                "handshake: {other:?} on a blocking socket (timeout)"
            ))
        }
        Err(e) => return Err(format!("handshake: {e}")),
    }
    let offloaded = offload::offload(session, stream.as_fd(), KtlsMode::Auto);
    Ok((stream, offloaded))
}

/// Echoes every size, sends the file, then reads the client's close_notify and closes.
fn serve_data(
    conn: &mut Conn,
    sizes: &Sizes,
    file: Option<File>,
    report: &mut ServerReport,
) -> Result<(), String> {
    for &len in &sizes.echo {
        echo(conn, len)?;
    }
    if let Some(mut file) = file {
        let started = Instant::now();
        conn.send_file(&mut file, sizes.file)?;
        report.sendfile_mib_s = Some(mib_per_s(sizes.file, started.elapsed()));
    }
    report.end = final_read(conn);
    conn.shutdown()
}

/// Echoes the probe, then the client's KeyUpdate: the kernel path must refuse it; user space
/// follows it and echoes. Answers what the final read returned.
fn serve_key_update(conn: &mut Conn) -> Result<String, String> {
    echo(conn, KEY_UPDATE_PROBE.len())?;
    Ok(match conn.tls {
        Tls::Kernel(_) => final_read(conn),
        Tls::User(_) | Tls::Records(_) => {
            echo(conn, KEY_UPDATE_PROBE.len())?;
            let end = final_read(conn);
            conn.shutdown()?;
            end
        }
    })
}

/// On a non-blocking socket: an idle read says "wait", then GO, one echo, and the end.
fn serve_nonblocking(conn: &mut Conn) -> Result<String, String> {
    conn.stream
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    // The client sends nothing before GO: the read must say "wait", not block or fail.
    let mut buf = [0u8; 64];
    match conn.read(&mut buf) {
        IoStatus::WantRead => {}
        other => return Err(format!("idle non-blocking read gave {other:?}")),
    }
    conn.write_all(GO)?;
    let n = done(conn.read_nonblocking(&mut buf), "non-blocking read")?;
    conn.write_all(&buf[..n])?;
    let end = match conn.read_nonblocking(&mut buf) {
        IoStatus::Closed => "closed".to_string(),
        other => format!("{other:?}"),
    };
    conn.stream
        .set_nonblocking(false)
        .map_err(|e| e.to_string())?;
    conn.shutdown()?;
    Ok(end)
}

/// One more read after the client is done: what it returns is the point of the case.
fn final_read(conn: &mut Conn) -> String {
    let mut buf = [0u8; 64];
    match conn.read(&mut buf) {
        IoStatus::Closed => "closed".to_string(),
        IoStatus::Error(TlsError::KeyUpdate) => "keyupdate error".to_string(),
        IoStatus::Done(n) => format!("unexpected {n} data bytes"),
        IoStatus::WantRead | IoStatus::WantWrite => "timed out".to_string(),
        IoStatus::Error(e) => format!("error: {e}"),
    }
}
