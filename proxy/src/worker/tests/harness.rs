//! A real `Worker` stepped in-process, its client and upstream connections AF_UNIX
//! socketpairs: the test holds the other ends and plays the client and the upstream byte by
//! byte. Nothing listens, nothing connects over the network; what runs is the worker's own
//! code from the socket up (transport, codec, exchanges, frang, cache, upstream pool, timers).

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Events;

use super::super::{Shared, Worker};
use super::h2_peer::{H2Peer, H2Response};
use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::socket::{Connector, Socket};

/// The runtime of configuration `text`; the test's own text must be valid.
fn runtime(text: &str) -> Arc<Runtime> {
    let loaded = config::parse_str("t.conf", text, std::path::Path::new("/"))
        .unwrap_or_else(|d| panic!("test configuration: {d}"));
    Runtime::build(loaded.config).expect("runtime")
}

/// How long any expectation may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(5);

/// The address every test's server group names; the connector never dials it.
pub const ORIGIN: &str = "127.0.0.1:9";

/// A worker, the upstream connections it opened, and what the test has not looked at yet.
pub struct Harness {
    worker: Worker,
    events: Events,
    dialled: Receiver<(SocketAddr, UnixStream)>,
    next_port: u16,
}

impl Harness {
    /// A worker on a configuration of one plain listener and one vhost proxying to a group
    /// with one server, plus `top` directives (before the vhost: cache, frang, timeouts) and
    /// `group` directives inside the server group.
    pub fn new(top: &str, group: &str) -> Harness {
        Harness::with_server(top, "", group)
    }

    /// As `new`, with `server_params` on the server's line (`conns_n=1`).
    pub fn with_server(top: &str, server_params: &str, group: &str) -> Harness {
        let text = format!(
            "listen 127.0.0.1:1;\n{top}\n\
             srv_group default {{ server {ORIGIN} {server_params}; {group} }}\n\
             vhost site {{ proxy_pass default; }}\n\
             http_chain {{ -> site; }}\n"
        );
        let shared = Arc::new(Shared::new(runtime(&text), Metrics::new(1)));
        let (mut worker, _waker) =
            Worker::new(0, (Vec::new(), Vec::new()), shared).expect("worker");
        let (to_test, dialled) = channel();
        worker.connector = Connector::Pairs(to_test);
        Harness {
            worker,
            events: Events::with_capacity(64),
            dialled,
            next_port: 40000,
        }
    }

    /// Installs configuration `text` as a SIGHUP does; the worker applies it at its next turn.
    pub fn reload(&mut self, text: &str) {
        self.worker.shared.replace_runtime(runtime(text));
    }

    /// A new client connection, as the worker would have accepted it from 127.0.0.1.
    pub fn client(&mut self) -> Peer {
        Peer::new(self.accept(config::Proto::Http))
    }

    /// A new h2c client connection (prior knowledge, as on a `proto=h2c` listener) that has
    /// sent its preface and SETTINGS.
    pub fn h2_client(&mut self) -> H2Peer {
        H2Peer::new(Peer::new(self.accept(config::Proto::H2c)))
    }

    /// Hands the worker one end of a new socketpair as a connection accepted from
    /// 127.0.0.1 on a listener of `proto`; the test's end.
    fn accept(&mut self, proto: config::Proto) -> UnixStream {
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        ours.set_nonblocking(true).expect("nonblocking");
        let peer: SocketAddr = format!("127.0.0.1:{}", self.next_port)
            .parse()
            .expect("address");
        self.next_port += 1;
        let sock = Socket::Pair(mio::net::UnixStream::from_std(ours));
        let protos = [proto];
        let new = super::super::client::Accepted {
            sock,
            peer,
            tls: false,
            protos: &protos,
        };
        self.worker.new_client(new);
        theirs
    }

    /// A new client's GET goes out on `up`, the pooled connection: nothing new is dialled.
    pub fn next_client_reuses(&mut self, up: &mut Peer) {
        let mut next = self.client();
        next.send(&get("/next"));
        let req = self.message(up, "the next client's request on the pooled connection");
        assert_eq!(req.line(), "GET /next HTTP/1.1");
        assert_eq!(self.dialled(), 0);
    }

    /// Steps until `peer` holds a whole response on `stream` (HEADERS to END_STREAM, or a
    /// RST_STREAM), and takes it.
    pub fn h2_response(&mut self, peer: &mut H2Peer, stream: u32, what: &str) -> H2Response {
        self.until(what, |_| peer.take_response(stream))
    }

    /// One round of the worker's loop, waiting at most 10 ms for something to happen.
    pub fn turn(&mut self) {
        assert!(
            self.worker
                .turn(&mut self.events, Some(Duration::from_millis(10))),
            "the worker stopped"
        );
    }

    /// Steps the worker until `check` gives a value; fails the test after `PATIENCE`.
    pub fn until<T>(&mut self, what: &str, mut check: impl FnMut(&mut Harness) -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(value) = check(self) {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            self.turn();
        }
    }

    /// Steps the worker for `span` (to show that something does not happen).
    pub fn idle(&mut self, span: Duration) {
        let end = Instant::now() + span;
        while Instant::now() < end {
            self.turn();
        }
    }

    /// The next upstream connection the worker opens (to the group's server).
    pub fn upstream(&mut self) -> Peer {
        let (addr, stream) = self.until("an upstream connection", |h| h.dialled.try_recv().ok());
        assert_eq!(addr.to_string(), ORIGIN);
        Peer::new(stream)
    }

    /// Upstream connections opened and not yet taken with `upstream`.
    pub fn dialled(&mut self) -> usize {
        let mut n = 0;
        while self.dialled.try_recv().is_ok() {
            n += 1;
        }
        n
    }

    /// Steps until `peer` holds one whole HTTP/1.1 message (head, and a body of the
    /// Content-Length it names), and takes it.
    pub fn message(&mut self, peer: &mut Peer, what: &str) -> Message {
        self.until(what, |_| peer.take_message())
    }

    /// Steps until `peer` sees its connection closed (EOF or reset).
    pub fn closed(&mut self, peer: &mut Peer, what: &str) {
        self.until(what, |_| {
            peer.pump();
            peer.eof.then_some(())
        });
    }

    /// The worker's metrics (close reasons, counters).
    pub fn metrics(&self) -> &Metrics {
        &self.worker.shared.metrics
    }

    /// Exchanges the worker holds: every request that became one and has not finished.
    pub fn exchanges_open(&self) -> usize {
        self.worker.exchanges.len()
    }

    /// Requests the worker counted (`requests` of its worker metrics).
    pub fn requests_counted(&self) -> u64 {
        let requests = &self.metrics().workers[0].requests;
        requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Blocks counted for frang limit `limit` (`blocks_total{limit}`).
    pub fn blocks(&self, limit: &str) -> u64 {
        let blocks = self
            .metrics()
            .blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        blocks
            .iter()
            .find(|(l, _)| *l == limit)
            .map_or(0, |(_, n)| *n)
    }
}

/// The test's end of a client or upstream connection.
pub struct Peer {
    stream: UnixStream,
    /// Bytes received and not yet taken.
    pub got: Vec<u8>,
    /// The other side closed (or reset) the connection.
    pub eof: bool,
}

impl Peer {
    pub(super) fn new(stream: UnixStream) -> Peer {
        stream.set_nonblocking(true).expect("nonblocking");
        Peer {
            stream,
            got: Vec::new(),
            eof: false,
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Closes the sending direction (the peer is done sending: EOF on the other side).
    pub fn finish_sending(&mut self) {
        self.stream
            .shutdown(std::net::Shutdown::Write)
            .expect("shutdown");
    }

    /// Reads what has arrived, without waiting.
    pub fn pump(&mut self) {
        let mut buf = [0u8; 16384];
        while !self.eof {
            match self.stream.read(&mut buf) {
                Ok(0) => self.eof = true,
                Ok(n) => self.got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => self.eof = true,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Takes a head (to its blank line) from what arrived, if one is whole: a bodiless
    /// answer (HEAD) whose Content-Length must not be waited for.
    pub fn take_head(&mut self) -> Option<String> {
        self.pump();
        let end = self.got.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head: Vec<u8> = self.got.drain(..end).collect();
        Some(String::from_utf8_lossy(&head).into_owned())
    }

    /// Takes one whole message from what arrived, if there is one.
    pub fn take_message(&mut self) -> Option<Message> {
        self.pump();
        let head_end = self.got.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head = String::from_utf8(self.got[..head_end].to_vec()).expect("ASCII head");
        let message = Message {
            head,
            body: Vec::new(),
        };
        let len = message
            .header("content-length")
            .map_or(0, |v| v.parse::<usize>().expect("Content-Length"));
        if self.got.len() < head_end + len {
            return None;
        }
        let body = self.got[head_end..head_end + len].to_vec();
        self.got.drain(..head_end + len);
        Some(Message { body, ..message })
    }
}

/// One HTTP/1.1 message as it crossed a socket.
#[derive(Debug)]
pub struct Message {
    pub head: String,
    pub body: Vec<u8>,
}

impl Message {
    /// The start line.
    pub fn line(&self) -> &str {
        self.head.lines().next().unwrap_or("")
    }

    /// The status of a response.
    pub fn status(&self) -> u16 {
        self.line()
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// A field's value (first of that name, case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// A response from the scripted upstream: `status`, the fields, a body with Content-Length.
pub fn response(status: u16, fields: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} X\r\n{fields}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A GET of `path` on the test's vhost.
pub fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: site\r\n\r\n").into_bytes()
}
