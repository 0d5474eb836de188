#!/usr/bin/env python3
"""Slow HTTP/3 clients (tests/tests/h3_heads.rs): aioquic (h3_attack.py's client) sending a
request head too slowly or in too many pieces, or never reading its responses.

Usage: h3_slow.py PORT KIND SECONDS [ARG]

KIND (after a handshake and one GET of /):
  dribble   a GET's HEADERS frame one byte per ARG seconds (default 0.25) on a new stream;
            after its third byte a normal GET on another stream of the same connection
  half      the first half of a GET's HEADERS frame, then nothing
  pieces    a GET's HEADERS frame (and FIN) in ARG pieces, one datagram each, 60 ms apart;
            its response read
  unread    ARG GETs of /big on as many streams, the client granting no stream credit past
            its first 16 KiB per stream (the responses are never read further); a PING
            every 0.3 s (a stateless reset in answer counts as the end)

Runs for SECONDS or until the connection is closed, then prints one JSON line: what
h3_attack.py reports (the close seen: error code and reason), plus per KIND: `head_bytes`
sent, `cut_after` (seconds from the head's first byte to the close), `status` of the
pieces' request or of the normal GET (`other_status`), `received` response bytes.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h3_attack import Client  # noqa: E402

try:
    from aioquic.h3.connection import FrameType, encode_frame
    from aioquic.quic.connection import QuicConnection
    from aioquic.tls import Epoch
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)


def head_frame(c, sid, path="/"):
    """The HEADERS frame of a GET of `path` on stream `sid` (its QPACK encoder updates go on
    the encoder stream now)."""
    fields = [(b":method", b"GET"), (b":scheme", b"https"),
              (b":authority", f"site.test:{c.addr[1]}".encode()), (b":path", path.encode())]
    return encode_frame(FrameType.HEADERS, c.h3._encode_headers(sid, fields))


def closed_after(c, start, seconds):
    """Pumps until the close or `seconds` from `start`; the close's time after `start`."""
    while c.stats["close"] is None and c.now() < start + seconds:
        c.pump(0.05)
    if c.stats["close"] is not None:
        c.stats["cut_after"] = round(c.now() - start, 3)


def dribble(c, seconds, interval):
    sid = c.quic.get_next_available_stream_id()
    frame = head_frame(c, sid)
    start = c.now()
    other = None
    for i, b in enumerate(frame):
        c.quic.send_stream_data(sid, bytes([b]), end_stream=i == len(frame) - 1)
        c.stats["head_bytes"] = i + 1
        c.flush()
        if i == 2:
            other = c.request("/")
        c.pump(interval)
        if c.stats["close"] is not None or c.now() > start + seconds:
            break
    closed_after(c, start, seconds)
    c.stats["other_status"] = other is not None and c.responses.get(other, [None])[0]
    c.stats["status"] = c.responses.get(sid, [None])[0]


def half(c, seconds):
    sid = c.quic.get_next_available_stream_id()
    frame = head_frame(c, sid)
    c.quic.send_stream_data(sid, frame[: len(frame) // 2])
    c.stats["head_bytes"] = len(frame) // 2
    c.flush()
    closed_after(c, c.now(), seconds)


def pieces(c, seconds, count):
    sid = c.quic.get_next_available_stream_id()
    frame = head_frame(c, sid)
    step = -(-len(frame) // count)
    parts = [frame[i:i + step] for i in range(0, len(frame), step)]
    c.stats["pieces"] = len(parts)
    start = c.now()
    for i, part in enumerate(parts):
        c.quic.send_stream_data(sid, part, end_stream=i == len(parts) - 1)
        c.flush()
        c.pump(0.06)
        if c.stats["close"] is not None:
            break
    while c.stats["close"] is None and c.now() < start + seconds:
        if c.responses.get(sid, [None, 0, False])[2]:
            break
        c.pump(0.05)
    c.stats["status"] = c.responses.get(sid, [None])[0]


def watch_for_reset(c):
    """Counts a stateless reset (a short-header datagram ending in a reset token the proxy
    gave with its connection IDs) as the connection's end: aioquic does not look for one."""
    q = c.quic
    receive = q.receive_datagram

    def checked(data, addr, now):
        ids = [q._peer_cid] + list(q._peer_cid_available)
        tokens = {i.stateless_reset_token for i in ids if i.stateless_reset_token}
        if data and (data[0] & 0xC0) == 0x40 and data[-16:] in tokens:
            c.stats["close"] = {"code": None, "reason": "stateless reset"}
            return None
        return receive(data, addr, now=now)

    q.receive_datagram = checked


def unread(c, seconds, streams):
    # No MAX_STREAM_DATA ever: each response stops at the stream's first window.
    c.quic._write_stream_limits = lambda *args, **kwargs: None
    watch_for_reset(c)
    sids = [c.request("/big") for _ in range(streams)]
    start = c.now()
    # A PING now and then: a connection the proxy dropped without its CONNECTION_CLOSE
    # getting out (its congestion window full) answers it with a stateless reset.
    while c.stats["close"] is None and c.now() < start + seconds:
        # Padded: a stateless reset must be smaller than the datagram it answers.
        c.send(c.packet(Epoch.ONE_RTT, b"\x01" + bytes(1000)))
        c.pump(0.3)
    if c.stats["close"] is not None:
        c.stats["cut_after"] = round(c.now() - start, 3)
    c.stats["received"] = sum(c.responses.get(s, [0, 0])[1] for s in sids)


def main(port, kind, seconds, arg):
    c = Client(port)
    if kind == "unread":
        config = c.quic._configuration
        config.max_stream_data = 16 * 1024
        c.quic = QuicConnection(configuration=config)
    c.connect()
    got = c.get("/")
    c.stats["get"] = {"status": got and got[0], "length": got and got[1]}
    if kind == "dribble":
        dribble(c, seconds, float(arg or 0.25))
    elif kind == "half":
        half(c, seconds)
    elif kind == "pieces":
        pieces(c, seconds, int(arg or 8))
    elif kind == "unread":
        unread(c, seconds, int(arg or 16))
    else:
        raise SystemExit(f"unknown kind {kind}")
    if c.stats["close"] is not None and isinstance(c.stats["close"]["reason"], bytes):
        c.stats["close"]["reason"] = c.stats["close"]["reason"].decode("latin-1")
    print(json.dumps(c.stats))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], float(sys.argv[3]),
         sys.argv[4] if len(sys.argv) > 4 else None)
