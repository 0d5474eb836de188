#!/usr/bin/env python3
"""Frame-level cases against an h2c server, written with the Python `h2`
package (and its `hyperframe` for frames h2 refuses to send).

Usage: h2_cases.py PORT CASE... Prints what it saw; exits 0 when the server
behaved as expected in every case, 1 otherwise. Every socket operation is bounded by a
timeout, so a hung server fails the case instead of hanging the test.
"""
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
from hyperframe.frame import ContinuationFrame, HeadersFrame, PingFrame, RstStreamFrame

TIMEOUT = 10.0
REQ = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/")]


class Client:
    def __init__(self, port, settings=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def raw(self, data):
        self.sock.sendall(data)

    def events(self, deadline):
        """Reads until something arrives or the deadline; [] on EOF."""
        self.sock.settimeout(max(0.01, deadline - time.time()))
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return []
        if not data:
            return None
        evs = self.conn.receive_data(data)
        self.flush()
        return evs

    def until(self, pred, seconds=TIMEOUT):
        """Collects events until pred(all events so far) or EOF/deadline."""
        deadline = time.time() + seconds
        seen = []
        while time.time() < deadline:
            evs = self.events(deadline)
            if evs is None:
                break
            seen.extend(evs)
            if pred(seen):
                break
        return seen


def goaway_code(evs):
    for e in evs:
        if isinstance(e, h2.events.ConnectionTerminated):
            return e.error_code
    return None


def raw_goaway(sock, seconds=TIMEOUT):
    """Reads raw frames until a GOAWAY (returns its code) or EOF/timeout."""
    deadline = time.time() + seconds
    buf = b""
    while time.time() < deadline:
        sock.settimeout(max(0.01, deadline - time.time()))
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 9:
            length = int.from_bytes(buf[0:3], "big")
            if len(buf) < 9 + length:
                break
            kind = buf[3]
            payload = buf[9:9 + length]
            buf = buf[9 + length:]
            if kind == 7:
                return struct.unpack(">I", payload[4:8])[0]
    return None


def get_ok(port):
    c = Client(port)
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, REQ, end_stream=True)
    c.flush()
    evs = c.until(lambda s: any(isinstance(e, h2.events.StreamEnded) for e in s))
    status = [dict(e.headers).get(":status") for e in evs if isinstance(e, h2.events.ResponseReceived)]
    return status == ["200"]


def case_concurrent(port):
    c = Client(port)
    ids = []
    for _ in range(100):
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, REQ, end_stream=True)
        ids.append(sid)
    c.flush()
    evs = c.until(lambda s: sum(isinstance(e, h2.events.StreamEnded) for e in s) >= 100)
    ok = [e for e in evs if isinstance(e, h2.events.ResponseReceived) and dict(e.headers)[":status"] == "200"]
    print(f"responses: {len(ok)}")
    return len(ok) == 100


def case_window(port):
    """Server's send window of 10 bytes: DATA stops at 10 and resumes after WINDOW_UPDATE."""
    c = Client(port, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 10})
    c.conn.max_inbound_frame_size = 16384
    body = bytes(range(256)) * 4
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, [(":method", "POST")] + REQ[1:], end_stream=False)
    c.conn.send_data(sid, body, end_stream=True)
    c.flush()
    # h2 acknowledges data automatically only when told: keep the window shut.
    got = b""
    evs = c.until(lambda s: sum(len(e.data) for e in s if isinstance(e, h2.events.DataReceived)) >= 10, 3)
    got = b"".join(e.data for e in evs if isinstance(e, h2.events.DataReceived))
    more = c.until(lambda s: False, 0.5)
    stalled = b"".join(e.data for e in more if isinstance(e, h2.events.DataReceived))
    print(f"before WINDOW_UPDATE: {len(got)} + {len(stalled)} bytes")
    if len(got) + len(stalled) != 10:
        return False
    got += stalled
    c.conn.increment_flow_control_window(len(body), stream_id=sid)
    c.conn.increment_flow_control_window(len(body))
    c.flush()
    evs = c.until(lambda s: any(isinstance(e, h2.events.StreamEnded) for e in s))
    got += b"".join(e.data for e in evs if isinstance(e, h2.events.DataReceived))
    print(f"after: {len(got)} bytes, equal: {got == body}")
    return got == body


def case_reset_midbody(port):
    """RST_STREAM in the middle of a request body; the connection goes on."""
    c = Client(port)
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, [(":method", "POST")] + REQ[1:], end_stream=False)
    c.conn.send_data(sid, b"x" * 1000, end_stream=False)
    c.conn.reset_stream(sid)
    sid2 = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid2, REQ, end_stream=True)
    c.flush()
    evs = c.until(lambda s: any(isinstance(e, h2.events.StreamEnded) and e.stream_id == sid2 for e in s))
    return any(isinstance(e, h2.events.StreamEnded) and e.stream_id == sid2 for e in evs)


def case_ping_flood(port):
    c = Client(port)
    sent = 0
    try:
        for i in range(300):
            c.raw(PingFrame(0, opaque_data=struct.pack(">Q", i)).serialize())
            sent += 1
    except (BrokenPipeError, ConnectionResetError):
        pass
    code = raw_goaway(c.sock)
    print(f"pings sent: {sent}, GOAWAY code: {code}")
    return code == 11 and get_ok(port)


def case_rapid_reset(port):
    c = Client(port)
    for _ in range(300):
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, REQ, end_stream=True)
        c.conn.reset_stream(sid)
    try:
        c.flush()
    except (BrokenPipeError, ConnectionResetError):
        pass
    code = raw_goaway(c.sock)
    print(f"GOAWAY code: {code}")
    return code == 11 and get_ok(port)


def case_continuation_flood(port):
    c = Client(port)
    c.raw(HeadersFrame(1, data=b"\x82").serialize())
    try:
        for _ in range(1000):
            c.raw(ContinuationFrame(1, data=b"\x84" * 100).serialize())
    except (BrokenPipeError, ConnectionResetError):
        pass
    code = raw_goaway(c.sock)
    print(f"GOAWAY code: {code}")
    return code == 11 and get_ok(port)


def case_hpack_table_update(port):
    """A dynamic table size update above the advertised 4096 is a COMPRESSION_ERROR."""
    c = Client(port)
    block = b"\x3f\xe2\x1f" + b"\x82\x86\x84"
    c.raw(HeadersFrame(1, data=block, flags=["END_HEADERS", "END_STREAM"]).serialize())
    code = raw_goaway(c.sock)
    print(f"GOAWAY code: {code}")
    return code == 9


def case_bad_stream_reset(port):
    """RST_STREAM on an idle stream is a connection PROTOCOL_ERROR."""
    c = Client(port)
    c.raw(RstStreamFrame(5, error_code=8).serialize())
    code = raw_goaway(c.sock)
    print(f"GOAWAY code: {code}")
    return code == 1


def case_settings_flood(port):
    c = Client(port)
    try:
        for _ in range(30):
            c.raw(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
    except (BrokenPipeError, ConnectionResetError):
        pass
    code = raw_goaway(c.sock)
    print(f"GOAWAY code: {code}")
    return code == 11 and get_ok(port)


def case_header_list_431(port):
    """Small on the wire, over 16 KiB decoded (the dynamic table repeats a
    3000-byte field): 431 on that stream, the next stream is served."""
    c = Client(port)
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, REQ + [("x-big", "v" * 3000)] * 6, end_stream=True)
    sid2 = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid2, REQ, end_stream=True)
    c.flush()
    evs = c.until(lambda s: sum(isinstance(e, h2.events.StreamEnded) for e in s) >= 2)
    status = {e.stream_id: dict(e.headers)[":status"] for e in evs if isinstance(e, h2.events.ResponseReceived)}
    print(f"statuses: {status}")
    return status == {sid: "431", sid2: "200"}


CASES = {
    "settings_flood": case_settings_flood,
    "header_list_431": case_header_list_431,
    "get": get_ok,
    "concurrent": case_concurrent,
    "window": case_window,
    "reset_midbody": case_reset_midbody,
    "ping_flood": case_ping_flood,
    "rapid_reset": case_rapid_reset,
    "continuation_flood": case_continuation_flood,
    "hpack_table_update": case_hpack_table_update,
    "bad_stream_reset": case_bad_stream_reset,
}

if __name__ == "__main__":
    port = int(sys.argv[1])
    failed = []
    for case in sys.argv[2:]:
        ok = CASES[case](port)
        print(f"{case}: {'ok' if ok else 'FAILED'}")
        if not ok:
            failed.append(case)
    sys.exit(1 if failed else 0)
