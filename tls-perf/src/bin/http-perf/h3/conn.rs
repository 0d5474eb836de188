//! One `--h3` connection: its own connected UDP socket and quinn-proto endpoint (so a
//! reconnect is a new socket, as a new client would be), the control stream, and request
//! streams of one HEADERS frame each whose responses are read by `frame::ResponseReader`.
//! Server-opened unidirectional streams (control, QPACK) are read and dropped.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use mio::net::UdpSocket;
use quinn_proto::{
    ConnectionError, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig, Event,
    ReadError, StreamEvent, StreamId, TransportErrorCode, VarInt,
};

use super::frame::{self, FrameError, ResponseReader};

/// The largest datagram read.
const MAX_DATAGRAM: usize = 65_535;
/// The receive buffer asked for each connection's socket.
const RECV_BUFFER: usize = 4 << 20;
/// HTTP/3 error codes (RFC 9114 §8.1, RFC 9204 §6).
const H3_NO_ERROR: u32 = 0x100;
const H3_FRAME_UNEXPECTED: u32 = 0x105;
const QPACK_DECOMPRESSION_FAILED: u32 = 0x200;
/// The TLS alert a server without `h3` among its protocols answers (RFC 7301 §3.2).
const NO_APPLICATION_PROTOCOL: u8 = 120;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum State {
    Handshaking,
    Ready,
}

/// A response that completed.
pub struct Done {
    pub start_ns: u64,
    pub status: u16,
    pub body: u64,
}

struct Request {
    start_ns: u64,
    written: usize,
    reader: ResponseReader,
}

pub struct H3Conn {
    pub socket: UdpSocket,
    peer: SocketAddr,
    endpoint: Endpoint,
    conn: quinn_proto::Connection,
    pub state: State,
    /// The control stream and how much of its preface is written.
    control: Option<(StreamId, usize)>,
    streams: HashMap<StreamId, Request>,
    /// Requests due (their start times) that wait for stream credit or the handshake.
    pending: VecDeque<u64>,
    buf: Vec<u8>,
    /// When the connection was opened, and when it last made progress.
    pub since: Instant,
    pub busy_since: Instant,
    /// UDP payload bytes received.
    pub received: u64,
}

impl H3Conn {
    /// A new connection to `peer` on a new socket (not registered yet).
    pub fn open(
        peer: SocketAddr,
        config: &quinn_proto::ClientConfig,
        server_name: &str,
    ) -> io::Result<H3Conn> {
        let local: SocketAddr = match peer {
            SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local)?;
        // Room for a burst of responses: at the default (208 KiB here) a 26 KiB page on 100
        // streams overflowed it, and every dropped datagram waits for QUIC's loss recovery.
        // The kernel caps this at net.core.rmem_max (and doubles it for its bookkeeping).
        let _ = socket2::SockRef::from(&socket).set_recv_buffer_size(RECV_BUFFER);
        // Connected: the kernel drops other senders' datagrams, and an ICMP "port
        // unreachable" becomes ECONNREFUSED on the next read.
        socket.connect(peer)?;
        let mut endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let now = Instant::now();
        let (_, conn) = endpoint
            .connect(now, config.clone(), peer, server_name)
            .map_err(io::Error::other)?;
        Ok(H3Conn {
            socket,
            peer,
            endpoint,
            conn,
            state: State::Handshaking,
            control: None,
            streams: HashMap::new(),
            pending: VecDeque::new(),
            buf: Vec::with_capacity(MAX_DATAGRAM),
            since: now,
            busy_since: now,
            received: 0,
        })
    }

    /// Requests queued or in flight.
    pub fn outstanding(&self) -> usize {
        self.pending.len() + self.streams.len()
    }

    /// The QUIC connection itself (`--h3-flood` writes its own streams on it).
    pub fn quic(&mut self) -> &mut quinn_proto::Connection {
        &mut self.conn
    }

    /// Queues a request intended to start at `start_ns`.
    pub fn request(&mut self, start_ns: u64) {
        if self.outstanding() == 0 {
            self.busy_since = Instant::now();
        }
        self.pending.push_back(start_ns);
    }

    /// Reads every datagram waiting into the connection. Err: the socket failed (an ICMP
    /// error: ECONNREFUSED when nothing listens on the UDP port).
    pub fn recv(&mut self, scratch: &mut [u8]) -> io::Result<()> {
        loop {
            let n = match self.socket.recv(scratch) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.received += n as u64;
            let data = BytesMut::from(&scratch[..n]);
            self.buf.clear();
            let now = Instant::now();
            match self
                .endpoint
                .handle(now, self.peer, None, None, data, &mut self.buf)
            {
                Some(DatagramEvent::ConnectionEvent(_, event)) => self.conn.handle_event(event),
                Some(DatagramEvent::Response(t)) => {
                    let _ = self.socket.send(&self.buf[..t.size.min(self.buf.len())]);
                }
                _ => {}
            }
        }
    }

    /// The connection's deadline, if it has one.
    pub fn deadline(&mut self) -> Option<Instant> {
        self.conn.poll_timeout()
    }

    pub fn on_timeout(&mut self, now: Instant) {
        self.conn.handle_timeout(now);
    }

    /// Takes in what the connection received; completed responses go to `done`. Err: the
    /// connection is over (lost, refused, or a response it could not read), in words.
    pub fn drive(&mut self, done: &mut Vec<Done>) -> Result<(), String> {
        let handle = ConnectionHandle(0);
        while let Some(event) = self.conn.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(handle, event) {
                self.conn.handle_event(back);
            }
        }
        while let Some(event) = self.conn.poll() {
            match event {
                Event::Connected => self.connected()?,
                Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                    while let Some(id) = self.conn.streams().accept(Dir::Uni) {
                        self.read(id, done)?;
                    }
                }
                Event::Stream(StreamEvent::Readable { id }) => self.read(id, done)?,
                Event::ConnectionLost { reason } => return Err(lost(&reason)),
                _ => {}
            }
        }
        if self.conn.is_drained() {
            return Err("the connection was closed".into());
        }
        Ok(())
    }

    /// The handshake is done: the server must have agreed to `h3`.
    fn connected(&mut self) -> Result<(), String> {
        let alpn = self
            .conn
            .crypto_session()
            .handshake_data()
            .and_then(|d| {
                d.downcast::<quinn_proto::crypto::rustls::HandshakeData>()
                    .ok()
            })
            .and_then(|d| d.protocol);
        if alpn.as_deref() != Some(b"h3") {
            let got = alpn.map_or("none".into(), |p| String::from_utf8_lossy(&p).into_owned());
            return Err(format!("the server agreed to ALPN {got}, not h3"));
        }
        self.state = State::Ready;
        self.control = self.conn.streams().open(Dir::Uni).map(|id| (id, 0));
        Ok(())
    }

    /// Reads stream `id`: a response into its reader (completing it at the stream's end),
    /// anything else dropped.
    fn read(&mut self, id: StreamId, done: &mut Vec<Done>) -> Result<(), String> {
        let mut request = self.streams.get_mut(&id);
        let mut recv = self.conn.recv_stream(id);
        let Ok(mut chunks) = recv.read(true) else {
            return Ok(());
        };
        let mut end = None;
        let mut failed = None;
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => {
                    if let Some(r) = request.as_deref_mut() {
                        if let Err(e) = r.reader.feed(&chunk.bytes) {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                Ok(None) => {
                    end = Some(Ok(()));
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(code)) => {
                    end = Some(Err(code));
                    break;
                }
            }
        }
        let _ = chunks.finalize();
        if let Some(e) = failed {
            return Err(self.refuse(e));
        }
        match end {
            Some(Ok(())) => self.complete(id, done),
            Some(Err(code)) if self.streams.contains_key(&id) => Err(format!(
                "the server reset a request stream (error 0x{:x})",
                code.into_inner()
            )),
            _ => Ok(()),
        }
    }

    /// A response stream ended: the response is done if whole.
    fn complete(&mut self, id: StreamId, done: &mut Vec<Done>) -> Result<(), String> {
        let Some(r) = self.streams.remove(&id) else {
            return Ok(());
        };
        match r.reader.finish() {
            Ok(status) => {
                self.busy_since = Instant::now();
                done.push(Done {
                    start_ns: r.start_ns,
                    status,
                    body: r.reader.body,
                });
                Ok(())
            }
            Err(e) => Err(self.refuse(e)),
        }
    }

    /// Closes the connection for a response it cannot read; returns the reason.
    fn refuse(&mut self, e: FrameError) -> String {
        let code = match e {
            FrameError::Qpack(super::qpack::QpackError::Dynamic) => QPACK_DECOMPRESSION_FAILED,
            _ => H3_FRAME_UNEXPECTED,
        };
        let reason = e.to_string();
        self.conn.close(
            Instant::now(),
            VarInt::from_u32(code),
            bytes::Bytes::copy_from_slice(reason.as_bytes()),
        );
        reason
    }

    /// Opens a stream for each pending request the server's stream credit allows, and
    /// writes what the streams have left to write.
    pub fn send_requests(&mut self, frame: &[u8]) {
        if self.state != State::Ready {
            return;
        }
        if let Some((id, written)) = self.control.as_mut() {
            if *written < frame::CONTROL_PREFACE.len() {
                if let Ok(n) = self
                    .conn
                    .send_stream(*id)
                    .write(&frame::CONTROL_PREFACE[*written..])
                {
                    *written += n;
                }
            }
        }
        for (&id, r) in self
            .streams
            .iter_mut()
            .filter(|(_, r)| r.written < frame.len())
        {
            let mut send = self.conn.send_stream(id);
            if let Ok(n) = send.write(&frame[r.written..]) {
                r.written += n;
                if r.written == frame.len() {
                    let _ = send.finish();
                }
            }
        }
        while let Some(&start_ns) = self.pending.front() {
            let Some(id) = self.conn.streams().open(Dir::Bi) else {
                return;
            };
            self.pending.pop_front();
            let mut send = self.conn.send_stream(id);
            let written = send.write(frame).unwrap_or(0);
            if written == frame.len() {
                let _ = send.finish();
            }
            let reader = ResponseReader::default();
            let request = Request {
                start_ns,
                written,
                reader,
            };
            self.streams.insert(id, request);
        }
    }

    /// Sends the datagrams the connection has ready (a full socket buffer drops one; QUIC
    /// sends it again).
    pub fn flush(&mut self) {
        let now = Instant::now();
        loop {
            self.buf.clear();
            let Some(t) = self.conn.poll_transmit(now, 1, &mut self.buf) else {
                return;
            };
            let _ = self.socket.send(&self.buf[..t.size.min(self.buf.len())]);
        }
    }

    /// Closes the connection (H3_NO_ERROR) and sends the close.
    pub fn close(&mut self) {
        if !self.conn.is_closed() {
            self.conn.close(
                Instant::now(),
                VarInt::from_u32(H3_NO_ERROR),
                bytes::Bytes::new(),
            );
        }
        self.flush();
    }
}

/// Why a connection was lost, in words; a refused ALPN says what it means.
pub fn lost(reason: &ConnectionError) -> String {
    match reason {
        ConnectionError::ConnectionClosed(close)
            if close.error_code == TransportErrorCode::crypto(NO_APPLICATION_PROTOCOL) =>
        {
            "the server refused ALPN h3 (TLS alert no_application_protocol): it speaks QUIC but not HTTP/3".into()
        }
        ConnectionError::TimedOut => "no answer from the server (QUIC idle timeout)".into(),
        ConnectionError::ApplicationClosed(c) => format!(
            "the server closed the connection: application error 0x{:x} ({})",
            c.error_code.into_inner(),
            String::from_utf8_lossy(&c.reason)
        ),
        other => format!("QUIC connection lost: {other}"),
    }
}
