#!/usr/bin/env python3
"""A misbehaving cleartext HTTP/2 origin (prior knowledge) for the tests of the HTTP/2 client
role: one connection at a time on 127.0.0.1:PORT, in one of these modes.

  refuse N     RST_STREAM REFUSED_STREAM to the first N requests, then 200 "ok" to the rest
               (python h2); prints "refused N" at each refusal.
  ping_flood   after the SETTINGS exchange, PING frames without end (raw frames); prints
               "goaway code C" when the client's GOAWAY arrives, then stops.
  big N        answers every request with N bytes (byte i is i % 251) as fast as the
               client's windows allow (python h2); prints "sent TOTAL" each time the window
               stops it, and "done" at the end.
  silent       sends its SETTINGS, then never acknowledges the client's nor answers; prints
               "goaway code C" when the client's GOAWAY arrives, then stops.
  shapes       answers by path (python h2): /interim a 103 with a Link field, then 200
               without content-length, "hello " and "world" as two DATA frames, and the
               trailer x-checksum: abc; /empty a 200 without content-length ended with its
               HEADERS; anything else 404 with its HEADERS.
  interim_flood N
               answers /big with 16 MiB as `big` does; anything else, once the proxy has
               given no window for a second, with N interim 103 heads (each with a 200-byte
               field), then 200 "done"; prints "flooded N" once the heads are out.

Usage: h2_bad_origin.py PORT MODE [N]. Runs until killed (the test kills it by pid)."""

import socket
import struct
import sys

import h2.config
import h2.connection
import h2.errors
import h2.events

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def refuse(sock, n):
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    refused = 0
    while True:
        data = sock.recv(65536)
        if not data:
            return
        for ev in c.receive_data(data):
            if not isinstance(ev, h2.events.RequestReceived):
                continue
            if refused < n:
                refused += 1
                c.reset_stream(ev.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                print("refused %d" % refused, flush=True)
            else:
                c.send_headers(ev.stream_id, [(b":status", b"200"), (b"content-length", b"2")])
                c.send_data(ev.stream_id, b"ok", end_stream=True)
        sock.sendall(c.data_to_send())


def goaway_code(buf):
    """The error code of the first GOAWAY in `buf` (frames after the client's preface)."""
    at = 0
    while at + 9 <= len(buf):
        length = int.from_bytes(buf[at:at + 3], "big")
        if buf[at + 3] == 7 and at + 9 + 8 <= len(buf):
            return int.from_bytes(buf[at + 13:at + 17], "big")
        at += 9 + length
    return None


def drain(sock, got):
    """Reads what is there (the client's GOAWAY may sit behind its PING ACKs); False at the
    end of the connection."""
    while True:
        try:
            more = sock.recv(65536)
        except BlockingIOError:
            return got, True
        except OSError:
            return got, False
        if not more:
            return got, False
        got += more


def ping_flood(sock):
    got = b""
    while len(got) < len(PREFACE):
        more = sock.recv(65536)
        if not more:
            return
        got += more
    got = got[len(PREFACE):]
    sock.sendall(frame(4, 0, 0, b""))  # SETTINGS
    ping = frame(6, 0, 0, b"12345678") * 512
    sock.setblocking(False)
    open_ = True
    while open_ and goaway_code(got) is None:
        got, open_ = drain(sock, got)
        try:
            sock.send(ping)
        except BlockingIOError:
            pass
        except OSError:
            got, open_ = drain(sock, got)
            break
    print("goaway code %s" % goaway_code(got), flush=True)


def big(sock, n, flood=None):
    """`big N`; with `flood`, a request for anything but /big gets `interim_flood` once the
    proxy has given no window for a second."""
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    body = bytes(i % 251 for i in range(251)) * (n // 251 + 1)
    streams = {}
    floods = []
    while True:
        # A second without window from the proxy: its client has stopped reading, and the
        # answers waiting get their floods.
        sock.settimeout(1.0 if floods else None)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            sock.settimeout(None)
            while floods:
                interim_flood(c, sock, floods.pop(0), flood)
            continue
        sock.settimeout(None)
        if not data:
            return
        for ev in c.receive_data(data):
            if not isinstance(ev, h2.events.RequestReceived):
                continue
            if flood is not None and dict(ev.headers).get(b":path") != b"/big":
                floods.append(ev.stream_id)
                continue
            c.send_headers(ev.stream_id, [(b":status", b"200"), (b"content-length", str(n).encode())])
            streams[ev.stream_id] = 0
        for sid in list(streams):
            sent = streams[sid]
            while sent < n:
                room = min(c.local_flow_control_window(sid), c.max_outbound_frame_size, n - sent)
                if room <= 0:
                    print("sent %d" % sent, flush=True)
                    break
                c.send_data(sid, body[sent:sent + room], end_stream=sent + room == n)
                sent += room
                sock.sendall(c.data_to_send())
            streams[sid] = sent
            if sent == n:
                print("done", flush=True)
                del streams[sid]
        sock.sendall(c.data_to_send())


def interim_flood(c, sock, sid, n):
    """N interim 103 heads on stream `sid`, each with a 200-byte field, then 200 "done"."""
    pad = (b"x-pad", b"p" * 200)
    for i in range(n):
        c.send_headers(sid, [(b":status", b"103"), pad])
        if i % 1000 == 999:
            sock.sendall(c.data_to_send())
    c.send_headers(sid, [(b":status", b"200"), (b"content-length", b"4")])
    c.send_data(sid, b"done", end_stream=True)
    sock.sendall(c.data_to_send())
    print("flooded %d" % n, flush=True)


def shapes(sock):
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    c.initiate_connection()
    sock.sendall(c.data_to_send())
    while True:
        data = sock.recv(65536)
        if not data:
            return
        for ev in c.receive_data(data):
            if not isinstance(ev, h2.events.RequestReceived):
                continue
            sid, path = ev.stream_id, dict(ev.headers).get(b":path")
            if path == b"/interim":
                c.send_headers(sid, [(b":status", b"103"), (b"link", b"</a.css>; rel=preload")])
                c.send_headers(sid, [(b":status", b"200"), (b"content-type", b"text/plain")])
                c.send_data(sid, b"hello ")
                c.send_data(sid, b"world")
                c.send_headers(sid, [(b"x-checksum", b"abc")], end_stream=True)
            elif path == b"/empty":
                c.send_headers(sid, [(b":status", b"200"), (b"x-empty", b"1")], end_stream=True)
            else:
                c.send_headers(sid, [(b":status", b"404")], end_stream=True)
        sock.sendall(c.data_to_send())


def silent(sock):
    got = b""
    sock.sendall(frame(4, 0, 0, b""))  # SETTINGS, and nothing after
    while goaway_code(got[len(PREFACE):]) is None:
        more = sock.recv(65536)
        if not more:
            break
        got += more
    print("goaway code %s" % goaway_code(got[len(PREFACE):]), flush=True)


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(8)
    while True:
        sock, _ = listener.accept()
        try:
            if mode == "refuse":
                refuse(sock, int(sys.argv[3]))
            elif mode == "ping_flood":
                ping_flood(sock)
            elif mode == "big":
                big(sock, int(sys.argv[3]))
            elif mode == "silent":
                silent(sock)
            elif mode == "interim_flood":
                big(sock, 16 << 20, flood=int(sys.argv[3]))
            elif mode == "shapes":
                shapes(sock)
            else:
                sys.exit("unknown mode " + mode)
        except (ConnectionError, OSError):
            pass
        finally:
            sock.close()


if __name__ == "__main__":
    main()
