#!/usr/bin/env python3
"""One HTTP/3 GET with aioquic (tests/tests/http_perf_h3.rs cross-checks http-perf --h3).

Usage: h3_fetch.py PORT PATH OUT [HOST]   GET https://site.test:PORT/PATH from HOST:PORT
(default 127.0.0.1; no certificate check), writes the body to OUT and prints "status N length
L"; exits 1 on a timeout (10 s) or a reset.
"""
import asyncio
import ssl
import sys

try:
    from aioquic.asyncio import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)


class Fetch(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.status = None
        self.body = bytearray()
        self.done = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event):
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived) and self.status is None:
                for name, value in ev.headers:
                    if name == b":status":
                        self.status = int(value)
            elif isinstance(ev, DataReceived):
                self.body += ev.data
            if getattr(ev, "stream_ended", False) and not self.done.done():
                self.done.set_result(True)

    def get(self, authority, path):
        sid = self._quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                   (b":authority", authority.encode()),
                                   (b":path", path.encode())], end_stream=True)
        self.transmit()


async def main(port, path, out, host="127.0.0.1"):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               server_name="site.test", verify_mode=ssl.CERT_NONE)
    async with connect(host, port, configuration=config,
                       create_protocol=Fetch) as client:
        client.get(f"site.test:{port}", path)
        await asyncio.wait_for(client.done, 10)
        with open(out, "wb") as f:
            f.write(client.body)
        print(f"status {client.status} length {len(client.body)}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), *sys.argv[2:5]))
