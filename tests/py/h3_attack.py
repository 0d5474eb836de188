#!/usr/bin/env python3
"""A QUIC client that misbehaves on purpose (tests/tests/h3_attack.rs): aioquic's connection
state (keys, connection IDs, packet numbers) with packets of our own making added to what it
sends, frames a well-behaved stack never sends that way.

Usage: h3_attack.py PORT KIND SECONDS [PATH]

KIND (after a handshake and one GET of PATH, default "/", unless said otherwise):
  ping          1-RTT packets of one PING frame and padding: the baseline of a datagram flood
  ack-frames    1-RTT packets packed with the smallest ACK frames (~200 per packet)
  ack-ranges    one ACK frame per packet with as many one-packet ranges as fit (~550),
                each a packet the proxy sent (GET a large PATH first)
  ack-unsent    one ACK frame for packet numbers the proxy never sent
  crypto-gaps   1-RTT packets packed with 1-byte CRYPTO frames that never fill offset 0
  crypto-far    one 1-RTT CRYPTO frame far past the CRYPTO buffer
  crypto-initial  no handshake: the ClientHello, then Initial packets packed with repeated
                1-byte CRYPTO frames of it (the proxy's answers are read, never processed)
  stall         no handshake: the ClientHello, then nothing (the answers are only counted)
  reset-only    request streams opened with HEADERS (no FIN) and reset (RESET_STREAM,
                H3_REQUEST_CANCELLED) once the proxy has them, never STOP_SENDING

Legitimate kinds (the proxy must not close them):
  keepalive     after the GET, one small PING packet every 12.5 ms (80 a second)
  download-acks the GET of PATH with one ACK-only packet more for every datagram received
                (a client that acknowledges packet by packet), then 0.5 s of quiet
  upload        a POST of 3 MB to PATH instead of the GET, then 0.5 s of quiet

Sends for SECONDS or until the connection is closed, then prints one JSON line: datagrams
and bytes sent and received, the frames added, the close seen (error code, reason) if any.
"""
import json
import select
import socket
import ssl
import sys
import time

try:
    from aioquic.buffer import Buffer
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic import events
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection
    from aioquic.quic.packet import QuicPacketType
    from aioquic.quic.packet_builder import QuicPacketBuilder
    from aioquic.tls import Epoch
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)

PAYLOAD = 1100  # bytes of frames per flood packet (a 1200-byte datagram at most)
PACKET_TYPE = {Epoch.INITIAL: QuicPacketType.INITIAL, Epoch.ONE_RTT: QuicPacketType.ONE_RTT}


class Client:
    def __init__(self, port):
        self.addr = ("127.0.0.1", port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                                   server_name="site.test", verify_mode=ssl.CERT_NONE)
        self.quic = QuicConnection(configuration=config)
        self.h3 = None
        self.stats = {"datagrams_sent": 0, "bytes_sent": 0, "datagrams_received": 0,
                      "bytes_received": 0, "frames": 0, "close": None}
        self.seen = set()  # 1-RTT packet numbers received (each the largest when it came)
        self.responses = {}  # stream -> [status, body bytes, ended, the body's first 16 bytes]
        self.connected = False
        self.ack_each = False  # an ACK-only packet for every datagram received

    def now(self):
        return time.monotonic()

    def send(self, data):
        try:
            self.sock.sendto(data, self.addr)
        except BlockingIOError:
            return
        self.stats["datagrams_sent"] += 1
        self.stats["bytes_sent"] += len(data)

    def flush(self):
        for data, _ in self.quic.datagrams_to_send(now=self.now()):
            self.send(data)

    def pump(self, wait, feed=True):
        """Reads what came within `wait` seconds; feeds it to aioquic unless `feed` is off."""
        end = self.now() + wait
        while True:
            left = end - self.now()
            timer = self.quic.get_timer() if feed else None
            if timer is not None:
                left = min(left, timer - self.now())
            ready, _, _ = select.select([self.sock], [], [], max(left, 0))
            for _ in range(256):
                try:
                    data, addr = self.sock.recvfrom(65536)
                except BlockingIOError:
                    break
                self.stats["datagrams_received"] += 1
                self.stats["bytes_received"] += len(data)
                if feed:
                    self.quic.receive_datagram(data, addr, now=self.now())
                    space = self.quic._spaces.get(Epoch.ONE_RTT)
                    if space is not None and space.largest_received_packet >= 0:
                        self.seen.add(space.largest_received_packet)
                        if self.ack_each and self.connected:
                            ack = encode(0x02, space.largest_received_packet, 0, 0, 0)
                            self.send(self.packet(Epoch.ONE_RTT, ack))
                            self.stats["acks"] = self.stats.get("acks", 0) + 1
            if feed:
                if timer is not None and timer <= self.now():
                    self.quic.handle_timer(now=self.now())
                self.events()
                self.flush()
            if self.now() >= end or self.stats["close"] is not None:
                return

    def events(self):
        while (ev := self.quic.next_event()) is not None:
            if isinstance(ev, events.HandshakeCompleted):
                self.connected = True
            elif isinstance(ev, events.ConnectionTerminated):
                self.stats["close"] = {"code": ev.error_code, "reason": ev.reason_phrase}
            for h in self.h3.handle_event(ev) if self.h3 else []:
                self.h3_event(h)

    def h3_event(self, h):
        if getattr(h, "stream_id", None) is None:
            return
        r = self.responses.setdefault(h.stream_id, [None, 0, False, b""])
        if isinstance(h, HeadersReceived) and r[0] is None:
            r[0] = int(dict(h.headers).get(b":status", b"0"))
        elif isinstance(h, DataReceived):
            r[1] += len(h.data)
            r[3] = (r[3] + h.data)[:16]
        r[2] = r[2] or getattr(h, "stream_ended", False)

    def connect(self):
        self.quic.connect(self.addr, now=self.now())
        self.h3 = H3Connection(self.quic)
        self.flush()
        deadline = self.now() + 10
        while not self.connected and self.now() < deadline and not self.stats["close"]:
            self.pump(0.05)
        if not self.connected:
            raise SystemExit(f"no handshake: {json.dumps(self.stats)}")

    def request(self, path, fin=True):
        sid = self.quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                   (b":authority", f"site.test:{self.addr[1]}".encode()),
                                   (b":path", path.encode())], end_stream=fin)
        self.flush()
        return sid

    def get(self, path, body=None):
        sid = self.request(path) if body is None else self.post(path, body)
        deadline = self.now() + 20
        while not self.responses.get(sid, [0, 0, False])[2] and self.now() < deadline:
            self.pump(0.05)
        return self.responses.get(sid)

    def post(self, path, body):
        sid = self.quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(b":method", b"POST"), (b":scheme", b"https"),
                                   (b":authority", f"site.test:{self.addr[1]}".encode()),
                                   (b":path", path.encode()),
                                   (b"content-length", str(len(body)).encode())])
        self.h3.send_data(sid, body, end_stream=True)
        self.flush()
        return sid

    def packet(self, epoch, frames):
        """One datagram of one packet of `epoch` holding `frames` (encoded frames)."""
        q = self.quic
        builder = QuicPacketBuilder(host_cid=q.host_cid, peer_cid=q._peer_cid.cid,
                                    version=q._version, is_client=True,
                                    max_datagram_size=q._max_datagram_size,
                                    packet_number=q._packet_number, peer_token=q._peer_token,
                                    spin_bit=q._spin_bit)
        builder.start_packet(PACKET_TYPE[epoch], q._cryptos[epoch])
        buf = builder.start_frame(frames[0], capacity=len(frames))
        buf.push_bytes(frames[1:])
        datagrams, _ = builder.flush()
        q._packet_number = builder.packet_number
        return datagrams[0]


def encode(*values):
    buf = Buffer(capacity=64)
    for v in values:
        buf.push_uint_var(v)
    return buf.data


def packed(frame):
    """As many copies of `frame` as fit in a flood packet."""
    return frame * (PAYLOAD // len(frame))


def largest_received(c):
    return max(c.seen)


def ack_ranges(c):
    """One ACK frame acknowledging received packets one by one, with a gap between each: as
    many ranges as fit in a flood packet. Returns the frame and its number of ranges."""
    seen = sorted(c.seen, reverse=True)
    chosen = [seen[0]]
    for pn in seen[1:]:
        if chosen[-1] - pn >= 2:
            chosen.append(pn)
    blocks = [encode(chosen[i - 1] - chosen[i] - 2, 0) for i in range(1, len(chosen))]
    extra, size = 0, 0
    while extra < len(blocks):
        head = encode(0x02, chosen[0], 0, extra + 1, 0)
        if len(head) + size + len(blocks[extra]) > PAYLOAD:
            break
        size += len(blocks[extra])
        extra += 1
    frame = encode(0x02, chosen[0], 0, extra, 0) + b"".join(blocks[:extra])
    return frame, extra + 1


def flood(c, seconds, epoch, frames, count, feed=True):
    c.stats["frames_per_packet"] = count
    end = time.monotonic() + seconds
    while time.monotonic() < end and c.stats["close"] is None:
        for _ in range(32):
            c.send(c.packet(epoch, frames))
            c.stats["frames"] += count
        c.pump(0, feed=feed)


def reset_only(c, seconds, path):
    """Streams opened with HEADERS, then reset once the proxy acknowledged them."""
    end = time.monotonic() + seconds
    resets = 0
    while time.monotonic() < end and c.stats["close"] is None:
        opened = []
        while c.quic.get_next_available_stream_id() // 4 < c.quic._remote_max_streams_bidi:
            opened.append(c.request(path, fin=False))
            if len(opened) >= 20:
                break
        c.pump(0.03)
        for sid in opened:
            c.quic.reset_stream(sid, 0x10C)
            resets += 1
        c.flush()
        c.pump(0.01 if opened else 0.05)
    c.stats["resets"] = resets


def keepalive(c, seconds):
    """A PING every 12.5 ms on a fixed schedule (one late is sent at once, so a slow machine
    still sends 80 a second on average), the proxy's answers read and fed to aioquic."""
    start = time.monotonic()
    pings = 0
    while pings < seconds * 80 and c.stats["close"] is None:
        c.send(c.packet(Epoch.ONE_RTT, b"\x01" + bytes(3)))
        pings += 1
        c.pump(max(start + pings * 0.0125 - time.monotonic(), 0))
    c.stats["pings"] = pings


def main(port, kind, seconds, path):
    c = Client(port)
    if kind in ("stall", "crypto-initial"):
        c.quic.connect(c.addr, now=c.now())
        c.flush()
        if kind == "stall":
            c.pump(seconds, feed=False)
        else:
            flood(c, seconds, Epoch.INITIAL, packed(encode(0x06, 0, 1) + b"\x01"),
                  PAYLOAD // 4, feed=False)
        print(json.dumps(c.stats))
        return
    c.connect()
    c.ack_each = kind == "download-acks"
    got = c.get(path, bytes(3_000_000) if kind == "upload" else None)
    c.ack_each = False
    c.stats["get"] = {"status": got and got[0], "length": got and got[1],
                      "start": got and got[3].decode(errors="replace")}
    one_rtt = Epoch.ONE_RTT
    if kind == "ping":
        flood(c, seconds, one_rtt, b"\x01" + bytes(PAYLOAD - 1), 1)
    elif kind == "ack-frames":
        frame = encode(0x02, largest_received(c), 0, 0, 0)
        flood(c, seconds, one_rtt, packed(frame), PAYLOAD // len(frame))
    elif kind == "ack-ranges":
        frame, ranges = ack_ranges(c)
        c.stats["ranges"] = ranges
        flood(c, seconds, one_rtt, frame + bytes(PAYLOAD - len(frame)), 1)
    elif kind == "ack-unsent":
        flood(c, seconds, one_rtt, encode(0x02, largest_received(c) + 1_000_000, 0, 0, 0), 1)
    elif kind == "crypto-gaps":
        frames = b"".join(encode(0x06, 1 + 2 * i, 1) + b"\x00" for i in range(PAYLOAD // 5))
        flood(c, seconds, one_rtt, frames[:PAYLOAD], PAYLOAD // 5)
    elif kind == "crypto-far":
        flood(c, seconds, one_rtt, encode(0x06, 1 << 20, 1) + b"\x00", 1)
    elif kind == "stream-dup":
        # A request stream opened (HEADERS, no FIN), then its first byte sent again and
        # again: STREAM frames that bring nothing new.
        sid = c.request(path, fin=False)
        c.pump(0.05)
        frame = encode(0x0E, sid, 0, 1) + b"\x01"
        flood(c, seconds, one_rtt, packed(frame), PAYLOAD // len(frame))
    elif kind == "reset-only":
        reset_only(c, seconds, path)
    elif kind == "keepalive":
        keepalive(c, seconds)
    elif kind not in ("download-acks", "upload"):
        raise SystemExit(f"unknown kind {kind}")
    c.pump(0.5)
    print(json.dumps(c.stats))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], float(sys.argv[3]),
         sys.argv[4] if len(sys.argv) > 4 else "/")
