#!/usr/bin/env python3
"""The certificate a QUIC listener serves for a name, seen by aioquic.

Usage: h3_issuer.py PORT NAME   handshakes with 127.0.0.1:PORT (UDP) for server name NAME
(no certificate check), GETs / and prints "issuer ISSUER" (RFC 4514) and "status N"; exits 1
on a timeout (10 s).
"""
import asyncio
import ssl
import sys

try:
    from aioquic.asyncio import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)


class Head(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.status = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event):
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived) and not self.status.done():
                self.status.set_result(dict(ev.headers).get(b":status", b"?").decode())


async def main(port, name):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               server_name=name, verify_mode=ssl.CERT_NONE)
    async with connect("127.0.0.1", port, configuration=config,
                       create_protocol=Head) as client:
        # aioquic keeps the peer's certificate on its TLS context; there is no public getter.
        cert = client._quic.tls._peer_certificate
        print(f"issuer {cert.issuer.rfc4514_string() if cert else '-'}")
        sid = client._quic.get_next_available_stream_id()
        client.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                     (b":authority", f"{name}:{port}".encode()),
                                     (b":path", b"/h3")], end_stream=True)
        client.transmit()
        print(f"status {await asyncio.wait_for(client.status, 10)}", flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(asyncio.wait_for(main(int(sys.argv[1]), sys.argv[2]), 15))
    except asyncio.TimeoutError:
        print("timeout")
        sys.exit(1)
