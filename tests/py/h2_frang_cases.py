"""Frang's limits over HTTP/2 (tests/tests/frang_h2.rs): the verdict must be HTTP/1.1's.

Usage: h2_frang_cases.py PORT SRC CASE ; connects from address SRC, prints "ok CASE ..." when
the case behaves, exits 1 otherwise. The proxy has `block_action attack reply`, so a block is
a 403 on the stream and then the connection's end (GOAWAY, close).
"""
import socket
import sys
import time

import h2.config
import h2.connection
import h2.events
import hpack

HOST = "site.test"
T = 10.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def connect(port, src):
    return socket.create_connection(("127.0.0.1", port), timeout=T, source_address=(src, 0))


class Client:
    def __init__(self, port, src):
        self.sock = connect(port, src)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.flush()
        self.status, self.ended, self.ended_conn, self.closed = {}, set(), False, False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self, until):
        deadline = time.time() + T
        while not until() and not self.closed:
            self.sock.settimeout(max(0.01, deadline - time.time()))
            if time.time() > deadline:
                raise AssertionError("timed out")
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                break
            for e in self.conn.receive_data(data):
                if isinstance(e, h2.events.ResponseReceived):
                    self.status[e.stream_id] = int(dict(e.headers)[b":status"])
                elif isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)):
                    self.ended.add(e.stream_id)
                elif isinstance(e, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                elif isinstance(e, h2.events.ConnectionTerminated):
                    self.ended_conn = True
            self.flush()

    def request(self, path="/", fields=(), body=None, content_length=True):
        sid = self.conn.get_next_available_stream_id()
        headers = [(":method", "GET" if body is None else "POST"), (":path", path),
                   (":scheme", "http"), (":authority", HOST)] + list(fields)
        if body is not None and content_length:
            headers.append(("content-length", str(len(body))))
        self.conn.send_headers(sid, headers, end_stream=body is None)
        if body is not None:
            self.conn.send_data(sid, body, end_stream=True)
        self.flush()
        self.pump(lambda: sid in self.ended)
        return self.status.get(sid)


def served(c, status):
    assert status == 200, f"expected 200, got {status}"


def blocked(c, status):
    assert status == 403, f"expected 403, got {status}"
    c.pump(lambda: c.ended_conn)
    assert c.ended_conn or c.closed, "the connection goes on after the block"


def frame(kind, flags, stream, payload):
    n = len(payload)
    return bytes([n >> 16 & 255, n >> 8 & 255, n & 255, kind, flags]) + stream.to_bytes(4, "big") + payload


def raw_open(port, src):
    """A connection past the setup: our SETTINGS, and the ack of the proxy's (so its own
    SETTINGS timeout is not what ends the connection)."""
    s = connect(port, src)
    s.sendall(PREFACE + frame(4, 0, 0, b""))
    s.settimeout(T)
    got = b""
    while len(got) < 9 or got[3] != 4:
        data = s.recv(1 << 16)
        assert data, "closed during the setup"
        got += data
    s.sendall(frame(4, 1, 0, b""))
    return s


def wait_closed(s, patience=T):
    """Seconds until the proxy closes `s` (reading and dropping what it sends), or None."""
    start = time.time()
    while time.time() - start < patience:
        s.settimeout(max(0.01, patience - (time.time() - start)))
        try:
            data = s.recv(1 << 16)
        except socket.timeout:
            return None
        except ConnectionResetError:
            data = b""
        if not data:
            return time.time() - start
    return None


def read_until_closed(s):
    """Reads raw frames until the proxy closes `s`: (statuses by stream, reset streams,
    whether a GOAWAY came). Fails if the connection is still open after T seconds."""
    status, resets, goaway, got = {}, set(), False, b""
    dec = hpack.Decoder()
    deadline = time.time() + T
    while time.time() < deadline:
        try:
            data = s.recv(1 << 16)
        except ConnectionResetError:
            data = b""
        if not data:
            return status, resets, goaway
        got += data
        while len(got) >= 9 and len(got) >= 9 + int.from_bytes(got[:3], "big"):
            n, kind, sid = int.from_bytes(got[:3], "big"), got[3], \
                int.from_bytes(got[5:9], "big") & 0x7fffffff
            payload, got = got[9:9 + n], got[9 + n:]
            if kind == 1:
                status[sid] = int(dict(dec.decode(payload))[":status"])
            elif kind == 3:
                resets.add(sid)
            elif kind == 7:
                goaway = True
    raise AssertionError(f"the connection stayed open; answers: {sorted(status.values())}")


def block(path="/slow"):
    return hpack.Encoder().encode([(":method", "GET"), (":path", path), (":scheme", "http"),
                                   (":authority", HOST), ("x-pad", "p" * 20)])


def main():
    port, src, case = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    if case in ("served", "served_crumbs", "blocked_fields", "blocked_uri", "blocked_field_len",
                "blocked_body_cl", "blocked_body_data"):
        c = Client(port, src)
        status = {
            "served": lambda: c.request(fields=[("x-a", "1")]),
            # A browser's cookies, one crumb each (RFC 9113 §8.2.3): one Cookie field.
            "served_crumbs": lambda: c.request(fields=[("cookie", "a=1"), ("cookie", "b=2"),
                                                       ("cookie", "c=3")]),
            "blocked_fields": lambda: c.request(fields=[("x-a", "1"), ("x-b", "2")]),
            "blocked_uri": lambda: c.request(path="/" + "u" * 29),
            "blocked_field_len": lambda: c.request(fields=[("x-long", "v" * 40)]),
            "blocked_body_cl": lambda: c.request(path="/p", body=b"0123456789a"),
            "blocked_body_data": lambda: c.request(path="/p", body=b"0123456789a",
                                                   content_length=False),
        }[case]()
        (served if case.startswith("served") else blocked)(c, status)
        print(f"ok {case}")
    elif case in ("dropped_batch", "replied_batch"):
        # One write: stream 1 over http_uri_len, then 20 ordinary GETs. None of them may be
        # served: HTTP/1.1 stops at the block, and so must HTTP/2. Raw frames: python-h2
        # refuses the RST_STREAMs that may follow a GOAWAY (RFC 9113 §6.8 allows them).
        s = raw_open(port, src)
        enc = hpack.Encoder()
        heads = lambda sid, path: frame(1, 5, sid, enc.encode(
            [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", HOST)]))
        s.sendall(heads(1, "/" + "u" * 29) + b"".join(heads(sid, "/after-the-block")
                                                      for sid in range(3, 43, 2)))
        status, resets, goaway = read_until_closed(s)
        got_200 = sorted(sid for sid, st in status.items() if st == 200)
        assert not got_200, f"streams served after the block: {got_200}"
        if case == "replied_batch":
            assert status.get(1) == 403 and goaway, f"stream 1: {status}, GOAWAY {goaway}"
        else:
            assert not status, f"answers on a dropped connection: {status}"
        print(f"ok {case} status={status} resets={len(resets)}")
    elif case == "malformed_flood":
        # 40 malformed requests (a space in :path: 400 on the stream, no exchange) in one
        # write, under `request_rate 10`: they count as requests, so the address is blocked
        # and the connection ends. Before, each got its 400 and the connection went on.
        s = raw_open(port, src)
        enc = hpack.Encoder()
        s.sendall(b"".join(frame(1, 5, sid, enc.encode(
            [(":method", "GET"), (":path", "/a b"), (":scheme", "http"), (":authority", HOST)]))
            for sid in range(1, 81, 2)))
        status, _, _ = read_until_closed(s)
        answered_400 = sum(1 for st in status.values() if st == 400)
        assert answered_400 <= 10, f"{answered_400} malformed requests answered over the rate"
        assert 403 in status.values(), f"no 403: {status}"
        print(f"ok {case} answered_400={answered_400}")
    elif case == "blocked_connect":
        # CONNECT (:method and :authority only): frang's http_methods refuses it as on
        # HTTP/1.1, a 403 and the connection's end, not the proxy's 501.
        s = raw_open(port, src)
        enc = hpack.Encoder()
        s.sendall(frame(1, 5, 1, enc.encode([(":method", "CONNECT"),
                                             (":authority", HOST + ":443")])))
        status, _, goaway = read_until_closed(s)
        assert status.get(1) == 403 and goaway, f"CONNECT: {status}, GOAWAY {goaway}"
        print(f"ok {case}")
    elif case == "slow_head":
        # A HEADERS frame without END_HEADERS, then nothing.
        s = raw_open(port, src)
        s.sendall(frame(1, 0, 1, block()[:10]))
        after = wait_closed(s)
        assert after is not None, f"still open after {T} s"
        print(f"ok {case} closed_after={after:.2f}")
    elif case == "head_chunks":
        # One head in six reads: HEADERS, then a CONTINUATION every 150 ms.
        b = block()
        s = raw_open(port, src)
        s.sendall(frame(1, 0, 1, b[:4]))
        pieces = [b[4 + i * 4:8 + i * 4] for i in range(5)]
        pieces[-1] = b[20:]
        start = time.time()
        for i, piece in enumerate(pieces):
            time.sleep(0.15)
            try:
                s.sendall(frame(9, 4 if i == len(pieces) - 1 else 0, 1, piece))
            except (BrokenPipeError, ConnectionResetError):
                break
        after = wait_closed(s)
        assert after is not None, f"still open {T} s after the head"
        print(f"ok {case} closed_after={time.time() - start:.2f}")
    elif case == "client_mem":
        # Eight connections from one address, each with 16 uploads of 60 000 bytes that the
        # slow origin does not take: ~7.5 MB held for the address, over `client_mem 2M 4M`.
        conns, refused = [], 0

        def upload(c):
            c.sock.settimeout(0.3)
            try:
                for _ in c.conn.receive_data(c.sock.recv(1 << 16)):
                    pass
            except socket.timeout:
                pass
            c.flush()
            for _ in range(16):
                sid = c.conn.get_next_available_stream_id()
                c.conn.send_headers(sid, [(":method", "POST"), (":path", "/slow"),
                                          (":scheme", "http"), (":authority", HOST),
                                          ("content-length", "60000")])
                n = min(60000, c.conn.local_flow_control_window(sid))
                while n > 0:
                    piece = min(n, c.conn.max_outbound_frame_size)
                    c.conn.send_data(sid, b"x" * piece)
                    n -= piece
            c.flush()

        for _ in range(8):
            try:
                c = Client(port, src)
                upload(c)
                conns.append(c)
            except (BrokenPipeError, ConnectionResetError):
                # Reset while uploading, or refused at accept once the address is blocked.
                refused += 1
        ended = refused
        for c in conns:
            # The reset comes on the connection's next receive pass: at once for those that
            # were sending when the total passed the limit.
            if wait_closed(c.sock, 2.0) is not None:
                ended += 1
        assert ended > 0, "no connection was reset"
        print(f"ok {case} ended={ended} refused={refused}")
    else:
        raise SystemExit(f"unknown case {case}")


main()
