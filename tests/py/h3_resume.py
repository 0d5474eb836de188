#!/usr/bin/env python3
"""QUIC session resumption, and the certificate served, seen by aioquic.

Usage: h3_resume.py PORT [PORT2] [NAME]   a GET of / over HTTP/3 to 127.0.0.1:PORT for server
name NAME (default site.test; no certificate check), keeping the session ticket the server
sends; then, if there is one, a second connection to PORT2 (default PORT) offering it and a
GET there. Prints "issuer ISSUER" (RFC 4514) of the certificate and "first status N" of
the first connection, "ticket yes|no", then "resumed True|False" and "status N" of the
second; exits 1 on a timeout (10 s each).
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


class Get(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.status = None
        self.done = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event):
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived) and self.status is None:
                self.status = dict(ev.headers).get(b":status", b"?").decode()
            # The whole response, not its head: a connection closed before the proxy
            # finished the exchange would leave no access log line.
            if getattr(ev, "stream_ended", False) and not self.done.done():
                self.done.set_result(self.status)

    async def get(self, authority):
        sid = self._quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                   (b":authority", authority.encode()),
                                   (b":path", b"/")], end_stream=True)
        self.transmit()
        return await asyncio.wait_for(self.done, 10)


async def main(port, port2, name):
    tickets = []
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               server_name=name, verify_mode=ssl.CERT_NONE)
    async with connect("127.0.0.1", port, configuration=config, create_protocol=Get,
                       session_ticket_handler=tickets.append) as client:
        # aioquic keeps the peer's certificate on its TLS context; there is no public getter.
        cert = client._quic.tls._peer_certificate
        print(f"issuer {cert.issuer.rfc4514_string() if cert else '-'}")
        print(f"first status {await client.get(f'{name}:{port}')}", flush=True)
        # The ticket comes after the handshake, usually with the first response.
        for _ in range(50):
            if tickets:
                break
            await asyncio.sleep(0.02)
    print(f"ticket {'yes' if tickets else 'no'}", flush=True)
    if not tickets:
        return
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               server_name=name, verify_mode=ssl.CERT_NONE,
                               session_ticket=tickets[-1])
    async with connect("127.0.0.1", port2, configuration=config,
                       create_protocol=Get) as client:
        status = await client.get(f"{name}:{port2}")
        print(f"resumed {client._quic.tls.session_resumed}", flush=True)
        print(f"status {status}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    port = int(args[0])
    port2 = int(args[1]) if len(args) > 1 else port
    name = args[2] if len(args) > 2 else "site.test"
    try:
        asyncio.run(asyncio.wait_for(main(port, port2, name), 30))
    except asyncio.TimeoutError:
        print("timeout")
        sys.exit(1)
