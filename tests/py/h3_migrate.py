#!/usr/bin/env python3
"""A client whose address changes mid-connection (tests/tests/h3_workers.rs).

Usage: h3_migrate.py PORT MOVES   One aioquic HTTP/3 connection to 127.0.0.1:PORT: a GET,
then MOVES times a new UDP socket (a new source port, as after a NAT rebinding) and a GET
from it, on the same QUIC connection. Prints "answered A of G on one connection" (G =
MOVES + 1 GETs, A answered 200 with body "ok"); exits 1 when the connection ended or a GET
timed out (10 s).
"""
import asyncio
import socket
import ssl
import sys

try:
    from aioquic.asyncio import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import ConnectionTerminated
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting = {}
        self.terminated = None

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.terminated = event
        for ev in self.h3.handle_event(event):
            entry = self.waiting.get(getattr(ev, "stream_id", None))
            if entry is None:
                continue
            if isinstance(ev, HeadersReceived):
                for name, value in ev.headers:
                    if name == b":status":
                        entry["status"] = int(value)
            elif isinstance(ev, DataReceived):
                entry["body"] += ev.data
            if getattr(ev, "stream_ended", False) and not entry["done"].done():
                entry["done"].set_result(True)

    async def get(self, authority):
        sid = self._quic.get_next_available_stream_id()
        entry = {"status": None, "body": b"",
                 "done": asyncio.get_running_loop().create_future()}
        self.waiting[sid] = entry
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                   (b":authority", authority.encode()),
                                   (b":path", b"/")], end_stream=True)
        self.transmit()
        await asyncio.wait_for(entry["done"], 10)
        return entry["status"] == 200 and entry["body"] == b"ok"


def dual_stack_socket():
    """A UDP socket as aioquic's connect() makes it (IPv6 with mapped IPv4 addresses), on a
    new port."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", 0))
    return sock


async def main(port, moves):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               server_name="site.test", verify_mode=ssl.CERT_NONE)
    loop = asyncio.get_running_loop()
    authority = f"site.test:{port}"
    answered = 0
    async with connect("127.0.0.1", port, configuration=config,
                       create_protocol=Client) as client:
        answered += await client.get(authority)
        old = []
        for _ in range(moves):
            # A new socket: the protocol sends from it from now on (connection_made).
            old.append(client._transport)
            await loop.create_datagram_endpoint(lambda: client, sock=dual_stack_socket())
            answered += await client.get(authority)
            if client.terminated is not None:
                break
        for t in old:
            t.close()
        ended = client.terminated
    print(f"answered {answered} of {moves + 1} on one connection")
    if ended is not None:
        print(f"the connection ended: {ended}")
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
