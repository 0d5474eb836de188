#!/usr/bin/env python3
"""Which address the proxy's QUIC replies come from (tests/tests/h3_reply_source.rs).

Usage: h3_reply_source.py HOST PORT [MOVES [BIND]]   One HTTP/3 connection (aioquic's,
driven here over plain UDP sockets bound to BIND, default any) to HOST:PORT: a GET of /,
then MOVES times a new socket (a new source port, as after a NAT rebinding) and a GET from
it. Each datagram received is counted by its source address; only those from HOST:PORT are
given to the connection, as a client with a connected UDP socket (curl's, Chromium's) would
take them: the kernel drops the others for it. Prints "answered A of G; from HOST:PORT N,
from elsewhere M [addresses]" (A: GETs answered 200 with body "ok"); exits 1 when a GET
had no answer within 5 s or the connection ended.
"""
import select
import socket
import ssl
import sys
import time

try:
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection
    from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)


class Client:
    def __init__(self, host, port, bind):
        self.server, self.bind = (host, port), bind
        self.family = socket.AF_INET6 if ":" in host else socket.AF_INET
        config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                                   server_name="site.test", verify_mode=ssl.CERT_NONE)
        self.quic = QuicConnection(configuration=config)
        self.quic.connect(self.server, now=time.time())
        self.h3 = H3Connection(self.quic)
        self.sock = self.new_socket()
        self.ours, self.others, self.ended, self.connected = 0, {}, False, False
        self.streams = {}

    def new_socket(self):
        sock = socket.socket(self.family, socket.SOCK_DGRAM)
        any_addr = "::" if self.family == socket.AF_INET6 else "0.0.0.0"
        sock.bind((self.bind or any_addr, 0))
        return sock

    def step(self, deadline):
        for data, addr in self.quic.datagrams_to_send(now=time.time()):
            self.sock.sendto(data, addr)
        timer = self.quic.get_timer()
        wait = min(deadline, timer if timer is not None else deadline) - time.time()
        readable, _, _ = select.select([self.sock], [], [], max(wait, 0))
        if readable:
            data, src = self.sock.recvfrom(65536)
            if (src[0], src[1]) == self.server:
                self.ours += 1
                self.quic.receive_datagram(data, self.server, now=time.time())
            else:
                key = f"{src[0]}:{src[1]}"
                self.others[key] = self.others.get(key, 0) + 1
        elif timer is not None and time.time() >= timer:
            self.quic.handle_timer(now=time.time())
        while (event := self.quic.next_event()) is not None:
            self.connected |= isinstance(event, HandshakeCompleted)
            self.ended |= isinstance(event, ConnectionTerminated)
            for ev in self.h3.handle_event(event):
                stream = self.streams.get(getattr(ev, "stream_id", None))
                if stream is None:
                    continue
                if isinstance(ev, HeadersReceived):
                    stream["status"] = dict(ev.headers).get(b":status", b"?").decode()
                elif isinstance(ev, DataReceived):
                    stream["body"] += ev.data
                stream["done"] |= getattr(ev, "stream_ended", False)

    def run_until(self, done):
        deadline = time.time() + 5
        while not done() and not self.ended and time.time() < deadline:
            self.step(deadline)
        return done()

    def get(self):
        if not self.run_until(lambda: self.connected):
            return False
        sid = self.quic.get_next_available_stream_id()
        stream = self.streams[sid] = {"status": None, "body": b"", "done": False}
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                   (b":authority", f"site.test:{self.server[1]}".encode()),
                                   (b":path", b"/")], end_stream=True)
        self.run_until(lambda: stream["done"])
        return stream["status"] == "200" and stream["body"] == b"ok"


def main(host, port, moves, bind):
    client = Client(host, port, bind)
    answered = int(client.get())
    for _ in range(moves):
        if answered == 0 or client.ended:
            break
        old, client.sock = client.sock, client.new_socket()
        old.close()
        answered += client.get()
    elsewhere = sum(client.others.values())
    print(f"answered {answered} of {moves + 1}; from {host}:{port} {client.ours},"
          f" from elsewhere {elsewhere} {sorted(client.others)}")
    sys.exit(0 if answered == moves + 1 else 1)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], int(args[1]), int(args[2]) if len(args) > 2 else 0,
         args[3] if len(args) > 3 else None)
