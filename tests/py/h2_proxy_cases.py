"""Frame-level HTTP/2 cases against the proxy's h2c listener (tests/tests/h2_proxy.rs).

Usage: h2_proxy_cases.py PORT CASE... ; prints "ok CASE" per passing case, exits 1 on the
first failure. The origin behind the proxy answers /pattern/N with N bytes of
e2e::origin::pattern_byte, /echo with the request body, /slow after a delay.
"""
import select
import socket
import sys
import time

import h2.config
import h2.exceptions
import h2.connection
import h2.events
import h2.settings

HOST = "site.test"
T = 20.0


def pattern(n):
    return bytes((i * 31 + i // 251) % 251 for i in range(n))


class Client:
    def __init__(self, port, window=None, raw=False):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=T)
        config = h2.config.H2Configuration(
            client_side=True,
            validate_outbound_headers=not raw,
            normalize_outbound_headers=not raw,
        )
        self.conn = h2.connection.H2Connection(config)
        self.conn.initiate_connection()
        if window is not None:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.flush()
        self.bodies, self.status, self.ended, self.resets = {}, {}, set(), {}
        self.goaway = None
        self.auto_ack = True

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, method, path, body=None, extra=()):
        sid = self.conn.get_next_available_stream_id()
        headers = [(":method", method), (":path", path), (":scheme", "http"),
                   (":authority", HOST)] + list(extra)
        if body is not None:
            headers.append(("content-length", str(len(body))))
        self.conn.send_headers(sid, headers, end_stream=body is None)
        self.bodies[sid] = bytearray()
        self.flush()
        return sid

    def pump(self, until, timeout=T):
        deadline = time.time() + timeout
        while not until():
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError("timed out")
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                continue
            data = self.sock.recv(1 << 16)
            if not data:
                raise AssertionError("connection closed")
            for e in self.conn.receive_data(data):
                self.on(e)
            self.flush()

    def on(self, e):
        if isinstance(e, h2.events.ResponseReceived):
            self.status[e.stream_id] = int(dict(e.headers)[b":status"])
        elif isinstance(e, h2.events.DataReceived):
            self.bodies[e.stream_id] += e.data
            if self.auto_ack:
                self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        elif isinstance(e, h2.events.StreamEnded):
            self.ended.add(e.stream_id)
        elif isinstance(e, h2.events.StreamReset):
            self.resets[e.stream_id] = e.error_code
            self.ended.add(e.stream_id)
        elif isinstance(e, h2.events.ConnectionTerminated):
            self.goaway = e

    def send_body(self, sid, body):
        sent = 0
        while sent < len(body):
            w = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size,
                    len(body) - sent)
            if w > 0:
                self.conn.send_data(sid, body[sent:sent + w], end_stream=sent + w == len(body))
                sent += w
                self.flush()
            else:
                before = self.conn.local_flow_control_window(sid)
                self.pump(lambda: self.conn.local_flow_control_window(sid) > before or sid in self.ended)
                if sid in self.ended:
                    return


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def case_concurrent(port):
    """100 streams at once on one connection, each a different size, all byte-exact."""
    c = Client(port)
    sizes = {c.request("GET", f"/pattern/{1000 + i * 997}"): 1000 + i * 997 for i in range(100)}
    c.pump(lambda: all(s in c.ended for s in sizes))
    for sid, n in sizes.items():
        check(c.status.get(sid) == 200, f"stream {sid}: status {c.status.get(sid)}")
        check(bytes(c.bodies[sid]) == pattern(n), f"stream {sid}: body differs ({len(c.bodies[sid])} of {n})")


def case_upload(port):
    """A 5 MB request body passes through the windows and comes back byte-exact."""
    c = Client(port)
    body = pattern(5_000_000)
    sid = c.request("POST", "/echo", body=body)
    c.send_body(sid, body)
    c.pump(lambda: sid in c.ended, timeout=60)
    check(c.status.get(sid) == 200, f"status {c.status.get(sid)}")
    check(bytes(c.bodies[sid]) == body, f"echo differs: {len(c.bodies[sid])} bytes")


def case_interleaved(port):
    """A slow stream does not hold back fast ones on the same connection."""
    c = Client(port)
    slow = c.request("GET", "/slow")
    fast = [c.request("GET", f"/pattern/{100 + i}") for i in range(5)]
    c.pump(lambda: all(s in c.ended for s in fast))
    check(slow not in c.ended, "the slow stream should still be running")
    c.pump(lambda: slow in c.ended)
    check(c.status.get(slow) == 200, "slow stream answered")


def case_small_window(port):
    """A client window of 16 KiB: a 1 MB body arrives whole, a window at a time. (Much
    smaller windows make a client send a WINDOW_UPDATE per KiB: the flood limits treat that
    as the attack it is.)"""
    c = Client(port, window=16384)
    sid = c.request("GET", "/pattern/1000000")
    c.pump(lambda: sid in c.ended, timeout=60)
    check(bytes(c.bodies[sid]) == pattern(1_000_000), f"body differs: {len(c.bodies[sid])}")


def case_window_stall_then_resume(port):
    """The client stops reading (no WINDOW_UPDATE) mid-body; the stream waits, then resumes."""
    c = Client(port)
    c.auto_ack = False
    sid = c.request("GET", "/pattern/500000")
    c.pump(lambda: len(c.bodies[sid]) >= 65535 - 16384)
    time.sleep(0.5)
    have = len(c.bodies[sid])
    check(have <= 65535, f"got {have} bytes past the window")
    c.auto_ack = True
    c.conn.acknowledge_received_data(have, sid)
    c.flush()
    c.pump(lambda: sid in c.ended, timeout=60)
    check(bytes(c.bodies[sid]) == pattern(500_000), "body differs after resuming")


def case_stall_hold(port):
    """Holds a stream whose window is exhausted, with the response's last bytes waiting,
    for 3 s (the Rust side measures the proxy's CPU meanwhile: it must sleep)."""
    c = Client(port)
    c.auto_ack = False
    sid = c.request("GET", "/pattern/70000")
    c.pump(lambda: len(c.bodies[sid]) >= 65535 - 16384)
    time.sleep(3)


def case_reset_mid_body(port):
    """RST_STREAM in the middle of a 5 MB download; the connection goes on serving."""
    c = Client(port)
    big = c.request("GET", "/pattern/5000000")
    c.pump(lambda: len(c.bodies[big]) > 0)
    c.conn.reset_stream(big, error_code=8)
    c.flush()
    nxt = c.request("GET", "/pattern/12345")
    c.pump(lambda: nxt in c.ended)
    check(bytes(c.bodies[nxt]) == pattern(12345), "the next stream is served")


def case_redirect(port):
    c = Client(port)
    sid = c.request("GET", "/old")
    c.pump(lambda: sid in c.ended)
    check(c.status.get(sid) == 301, f"status {c.status.get(sid)}")


def case_frang_block(port):
    """A request frang blocks gets 403 on its stream, then the connection ends (GOAWAY)."""
    c = Client(port)
    sid = c.request("DELETE", "/pattern/10")
    c.pump(lambda: sid in c.ended)
    check(c.status.get(sid) == 403, f"status {c.status.get(sid)}")
    c.pump(lambda: c.goaway is not None)


def case_malformed(port):
    """A stream whose header block breaks RFC 9113 §8 is reset; the connection goes on."""
    c = Client(port, raw=True)
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, [(":method", "GET"), (":path", "/pattern/10"), (":scheme", "http"),
                              (":authority", HOST), ("connection", "keep-alive")], end_stream=True)
    c.bodies[sid] = bytearray()
    c.flush()
    try:
        c.pump(lambda: sid in c.ended)
    except h2.exceptions.ProtocolError:
        pass
    check(c.resets.get(sid) == 1 or c.status.get(sid, 0) >= 400, f"malformed stream: {c.resets}")
    nxt = c.request("GET", "/pattern/10")
    c.pump(lambda: nxt in c.ended)
    check(c.status.get(nxt) == 200, "the connection still serves")


def case_websocket(port):
    """WebSockets over HTTP/2 (RFC 8441) are not offered: the proxy's SETTINGS do not enable
    extended CONNECT, a stream that sends :protocol anyway is reset (PROTOCOL_ERROR), and the
    connection goes on."""
    c = Client(port, raw=True)
    sid = c.conn.get_next_available_stream_id()
    c.conn.send_headers(sid, [(":method", "CONNECT"), (":protocol", "websocket"),
                              (":scheme", "http"), (":path", "/chat"), (":authority", HOST),
                              ("sec-websocket-version", "13")], end_stream=False)
    c.bodies[sid] = bytearray()
    c.flush()
    try:
        c.pump(lambda: sid in c.ended)
    except h2.exceptions.ProtocolError:
        pass
    check(c.resets.get(sid) == 1, f"extended CONNECT: resets {c.resets}, status {c.status}")
    # The server's SETTINGS came first, before the reset.
    check(c.conn.remote_settings.get(8, 0) != 1, "SETTINGS_ENABLE_CONNECT_PROTOCOL is on")
    nxt = c.request("GET", "/pattern/10")
    c.pump(lambda: nxt in c.ended)
    check(c.status.get(nxt) == 200, "the connection still serves")


CASES = {name[5:]: f for name, f in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    port = int(sys.argv[1])
    for name in sys.argv[2:]:
        CASES[name](port)
        print("ok", name, flush=True)
