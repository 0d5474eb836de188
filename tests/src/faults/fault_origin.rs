//! The origin of the fault scenarios: a plain HTTP/1.1 server whose behaviour the scenario
//! switches while the load runs (normal, slow, resetting, garbage, ten times its latency),
//! and which can be "killed" (its listener closed and every connection shut at once, a
//! response half-written included) and brought back on the same address.
//!
//! It counts the responses it wrote completely: the scenarios compare that count with the
//! 200s the clients received, which is how "no request the origin answered is lost" is
//! checked.
//!
//! For the soak's mix, the path chooses the caching: `/cache/...` is answered with
//! `Cache-Control: max-age=86400`, `/miss/...` with `no-store` (any other path with neither,
//! as before); and a WebSocket handshake is accepted and every frame echoed until Close.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::websocket;

/// The body of every normal answer (the clients check it byte for byte).
pub const BODY: &[u8] = b"fault-origin-body-0123456789";
/// The body of a slow answer, one byte a second.
pub const SLOW_BODY: &[u8] = b"slow";
/// The normal time to the first byte and between the two halves of the body.
pub const BASE_LATENCY: Duration = Duration::from_millis(5);

/// How the origin answers the next request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Normal = 0,
    /// The head at once, then the body at one byte a second.
    Slow = 1,
    /// Reads the request, then resets the connection (SO_LINGER 0) without answering.
    Reset = 2,
    /// Reads the request, answers bytes that are no HTTP, closes.
    Garbage = 3,
    /// As Normal with ten times the latency.
    Latency10x = 4,
}

impl Mode {
    fn from_u8(v: u8) -> Mode {
        match v {
            1 => Mode::Slow,
            2 => Mode::Reset,
            3 => Mode::Garbage,
            4 => Mode::Latency10x,
            _ => Mode::Normal,
        }
    }
}

#[derive(Default)]
struct Shared {
    mode: AtomicU8,
    /// The listener is closed (the origin is "dead").
    down: AtomicBool,
    stop: AtomicBool,
    /// Responses written whole.
    completed: AtomicU64,
    /// Requests read.
    requests: AtomicU64,
    /// Requests read for a `/cache/` path (each one a cache fill or a miss).
    cacheable: AtomicU64,
    /// WebSocket handshakes accepted.
    websockets: AtomicU64,
    /// Connections open now (by a serial), to shut them all at a kill. Each is taken out
    /// when its thread ends: a clone left here would keep the socket open.
    open: Mutex<Vec<(u64, TcpStream)>>,
    serial: AtomicU64,
}

/// A running fault origin; stops when dropped.
pub struct FaultOrigin {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultOrigin {
    /// Starts on `addr` (port 0 for an ephemeral loopback port).
    pub fn start(addr: SocketAddr) -> FaultOrigin {
        let listener = TcpListener::bind(addr).expect("bind fault origin");
        let addr = listener.local_addr().expect("fault origin addr");
        let origin = FaultOrigin {
            addr,
            shared: Arc::new(Shared::default()),
        };
        origin.accept_on(listener);
        origin
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set_mode(&self, mode: Mode) {
        self.shared.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// Responses written whole so far.
    pub fn completed(&self) -> u64 {
        self.shared.completed.load(Ordering::SeqCst)
    }

    /// Requests read so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Requests read so far for a cacheable (`/cache/`) path.
    pub fn cacheable(&self) -> u64 {
        self.shared.cacheable.load(Ordering::SeqCst)
    }

    /// WebSocket handshakes accepted so far.
    pub fn websockets(&self) -> u64 {
        self.shared.websockets.load(Ordering::SeqCst)
    }

    /// As a process killed by SIGKILL: the listener closes (connects are refused) and every
    /// open connection is shut now, in the middle of a response or not.
    pub fn kill(&self) {
        self.shared.down.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it drops the listener.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        self.drop_connections();
    }

    /// Shuts every open connection (the proxy's pooled ones included), e.g. so that the
    /// proxy's descriptors can be counted without its idle upstream pool.
    pub fn drop_connections(&self) {
        let open = std::mem::take(&mut *self.shared.open.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, stream) in open {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Listens again on the same address after `kill`.
    pub fn revive(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(self.addr) {
                Ok(l) => break l,
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("fault origin: rebind {}: {e}", self.addr);
                    thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("fault origin: rebind {}: {e}", self.addr),
            }
        };
        self.shared.down.store(false, Ordering::SeqCst);
        self.accept_on(listener);
    }

    fn accept_on(&self, listener: TcpListener) {
        let shared = self.shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                if shared.stop.load(Ordering::SeqCst) || shared.down.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let serial = shared.serial.fetch_add(1, Ordering::SeqCst);
                if let Ok(clone) = stream.try_clone() {
                    shared
                        .open
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((serial, clone));
                }
                let shared = shared.clone();
                thread::spawn(move || {
                    serve(stream, &shared);
                    shared
                        .open
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .retain(|(s, _)| *s != serial);
                });
            }
        });
    }
}

impl Drop for FaultOrigin {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        self.drop_connections();
    }
}

/// Serves one connection: a request head (no body: the load sends GETs), an answer as the
/// mode says, until the peer closes or the mode ends the connection.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    loop {
        let Some(end) = read_head(&mut stream, &mut buf) else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        shared.requests.fetch_add(1, Ordering::SeqCst);
        if websocket::field(&head, "upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket")) {
            shared.websockets.fetch_add(1, Ordering::SeqCst);
            return echo_websocket(stream, &head, buf);
        }
        let path = head.split(' ').nth(1).unwrap_or("/");
        let caching = if path.starts_with("/cache/") {
            shared.cacheable.fetch_add(1, Ordering::SeqCst);
            "Cache-Control: max-age=86400\r\n"
        } else if path.starts_with("/miss/") {
            "Cache-Control: no-store\r\n"
        } else {
            ""
        };
        let mode = Mode::from_u8(shared.mode.load(Ordering::SeqCst));
        if !answer(&mut stream, mode, caching) {
            return;
        }
        shared.completed.fetch_add(1, Ordering::SeqCst);
    }
}

/// Reads until `buf` holds a whole head; its length.
fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(p + 4);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Accepts a WebSocket handshake and echoes every frame (what came after the head in `rest`
/// first) until the client's Close, which is echoed too; then the connection closes.
fn echo_websocket(stream: TcpStream, head: &str, rest: Vec<u8>) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let key = websocket::field(head, "sec-websocket-key").unwrap_or("");
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        websocket::accept_for(key)
    );
    if writer.write_all(answer.as_bytes()).is_err() {
        return;
    }
    let mut reader = std::io::Cursor::new(rest).chain(stream);
    while let Ok((opcode, payload)) = websocket::read_frame(&mut reader) {
        let echoed = writer.write_all(&websocket::frame(opcode, &payload, None));
        if echoed.is_err() || opcode == websocket::OP_CLOSE {
            return;
        }
    }
}

/// Answers one request as `mode` says, with the `caching` field if any; true when a whole
/// response was written and the connection stays open.
fn answer(stream: &mut TcpStream, mode: Mode, caching: &str) -> bool {
    let write = |s: &mut TcpStream, b: &[u8]| s.write_all(b).and_then(|()| s.flush()).is_ok();
    match mode {
        Mode::Normal | Mode::Latency10x => {
            let pause = if mode == Mode::Normal {
                BASE_LATENCY
            } else {
                BASE_LATENCY * 10
            };
            thread::sleep(pause);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{caching}\r\n",
                BODY.len()
            );
            let (first, second) = BODY.split_at(BODY.len() / 2);
            if !write(stream, &[head.as_bytes(), first].concat()) {
                return false;
            }
            // The second half after a pause: a kill in between cuts a response midway.
            thread::sleep(pause);
            write(stream, second)
        }
        Mode::Slow => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                SLOW_BODY.len()
            );
            if !write(stream, head.as_bytes()) {
                return false;
            }
            for byte in SLOW_BODY {
                thread::sleep(Duration::from_secs(1));
                if !write(stream, std::slice::from_ref(byte)) {
                    return false;
                }
            }
            true
        }
        Mode::Reset => {
            let _ = socket2::SockRef::from(&*stream).set_linger(Some(Duration::ZERO));
            false
        }
        Mode::Garbage => {
            let _ = write(stream, b"\x00\x01garbage, not HTTP at all\r\n\r\n\x7f\xfe");
            false
        }
    }
}
