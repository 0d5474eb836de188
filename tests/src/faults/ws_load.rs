//! The soak's WebSocket load: sessions begun at a fixed rate over HTTP/1.1 (plain), each the
//! opening handshake through the server to the origin's echo, a number of masked text
//! messages each waited for and checked byte for byte, then a Close answered by a Close. A
//! session counts as answered 101 when all of that held, as answered with the handshake's
//! status when the handshake was refused, as cut when an echo or the accept key differed,
//! as lost when its connection ended or went silent (the answer timeout) midway, as not sent
//! when no connection could be opened or the clients were a second behind. Each message's
//! round trip goes into the session's window histogram.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::driver::Counts;
use super::window::{Clock, Hist, Window};
use crate::websocket::{accept_for, field, frame, handshake_request, read_frame, read_head};
use crate::websocket::{KEY, OP_CLOSE, OP_TEXT};

const MASK: Option<[u8; 4]> = Some([0x3a, 0x91, 0x0c, 0x5e]);
/// The size of each message.
const MESSAGE_LEN: usize = 64;
const MAX_BEHIND: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct WsLoad {
    pub addr: SocketAddr,
    pub host: String,
    /// Sessions begun a second.
    pub rate: f64,
    pub duration: Duration,
    /// Client threads: the most sessions open at once.
    pub connections: usize,
    /// Messages echoed in each session.
    pub messages: u32,
    pub answer_timeout: Duration,
    /// The width of the windows the sessions are counted in.
    pub window: Duration,
}

/// The WebSocket load running in the background.
pub struct RunningWs {
    workers: Vec<JoinHandle<Counts>>,
    scheduler: JoinHandle<()>,
}

/// How one session ended.
enum Session {
    Done,
    Refused(u16),
    Mismatch,
    Broken { timeout: bool },
    NoConnection,
}

impl WsLoad {
    pub fn start(&self) -> RunningWs {
        let (tx, rx) = mpsc::channel::<(Instant, u64)>();
        let rx = Arc::new(Mutex::new(rx));
        let clock = Clock {
            start: Instant::now(),
            width: self.window,
        };
        let workers = (0..self.connections.max(1))
            .map(|_| {
                let (rx, load) = (rx.clone(), self.clone());
                thread::spawn(move || load.worker(&rx, &clock))
            })
            .collect();
        let (rate, duration, start) = (self.rate.max(0.01), self.duration, clock.start);
        let scheduler = thread::spawn(move || {
            let interval = Duration::from_secs_f64(1.0 / rate);
            for n in 0u64.. {
                let due = start + interval.mul_f64(n as f64);
                if due >= start + duration {
                    return;
                }
                thread::sleep(due.saturating_duration_since(Instant::now()));
                if tx.send((due, n)).is_err() {
                    return;
                }
            }
        });
        RunningWs { workers, scheduler }
    }

    fn worker(&self, rx: &Mutex<mpsc::Receiver<(Instant, u64)>>, clock: &Clock) -> Counts {
        let mut counts = Counts::default();
        loop {
            let (due, n) = {
                let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(next) => next,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return counts,
                }
            };
            let mut delta = Window::default();
            let outcome = if due.elapsed() > MAX_BEHIND {
                Session::NoConnection
            } else {
                self.session(n, &mut delta.latency)
            };
            let status = match outcome {
                Session::NoConnection => {
                    delta.not_sent = 1;
                    0
                }
                Session::Done => 101,
                Session::Refused(status) => status,
                Session::Mismatch => {
                    delta.cut = 1;
                    0
                }
                Session::Broken { timeout } => {
                    delta.lost = 1;
                    if timeout {
                        counts.lost_timeout += 1;
                    } else {
                        counts.lost_closed += 1;
                    }
                    0
                }
            };
            delta.sent = u64::from(delta.not_sent == 0);
            if status != 0 {
                delta.answered.insert(status, 1);
                *counts.answered.entry(status).or_insert(0) += 1;
            }
            counts.sent += delta.sent;
            counts.cut += delta.cut;
            counts.not_sent += delta.not_sent;
            counts
                .windows
                .entry(clock.index(due))
                .or_default()
                .add(&delta);
        }
    }

    /// One session: handshake, the messages, the close.
    fn session(&self, n: u64, rtts: &mut Hist) -> Session {
        let Ok(mut tcp) = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)) else {
            return Session::NoConnection;
        };
        let _ = tcp.set_nodelay(true);
        let _ = tcp.set_read_timeout(Some(self.answer_timeout));
        let _ = tcp.set_write_timeout(Some(self.answer_timeout));
        let broken = |e: std::io::Error| Session::Broken {
            timeout: matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
        let request = handshake_request(&format!("/ws/{n}"), &self.host);
        if let Err(e) = tcp.write_all(request.as_bytes()) {
            return broken(e);
        }
        let head = match read_head(&mut tcp) {
            Ok(h) => h,
            Err(e) => return broken(e),
        };
        let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        if status != 101 {
            return if status == 0 {
                Session::Mismatch
            } else {
                Session::Refused(status)
            };
        }
        if field(&head, "sec-websocket-accept") != Some(accept_for(KEY).as_str()) {
            return Session::Mismatch;
        }
        for i in 0..self.messages {
            let mut payload = format!("soak session {n} message {i} ").into_bytes();
            payload.resize(MESSAGE_LEN, b'.');
            let sent = Instant::now();
            if let Err(e) = tcp.write_all(&frame(OP_TEXT, &payload, MASK)) {
                return broken(e);
            }
            match read_frame(&mut tcp) {
                Ok((OP_TEXT, echo)) if echo == payload => rtts.record(sent.elapsed()),
                Ok(_) => return Session::Mismatch,
                Err(e) => return broken(e),
            }
        }
        if let Err(e) = tcp.write_all(&frame(OP_CLOSE, &1000u16.to_be_bytes(), MASK)) {
            return broken(e);
        }
        match read_frame(&mut tcp) {
            Ok((OP_CLOSE, _)) => Session::Done,
            Ok(_) => Session::Mismatch,
            Err(e) => broken(e),
        }
    }
}

impl RunningWs {
    /// Waits for the schedule to end and every session to end.
    pub fn finish(self) -> Counts {
        let _ = self.scheduler.join();
        let mut total = Counts::default();
        for w in self.workers {
            if let Ok(c) = w.join() {
                total.add(&c);
            }
        }
        total
    }
}
