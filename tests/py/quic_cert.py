#!/usr/bin/env python3
"""One HTTP/3 connection held open across a reload (tests/tests/quic_reload.rs).

Usage: quic_cert.py PORT

Connects to 127.0.0.1:PORT with SNI site.test (no certificate check), GETs / and prints
"cert HEX status N goaway no", HEX being the SHA-256 of the certificate the server
presented. Then reads commands from standard input, one a line, each answered by a line:
  get     GET / on the same connection: "status N goaway G" or "reset CODE goaway G"
  start   begins GET /slow and prints "started" at once
  wait    waits for that GET: "status N goaway G" or "reset CODE goaway G"
G says whether the server's GOAWAY has arrived (yes/no). Exits 0 at the end of the input,
1 when an answer takes over 10 s or the connection ends.
"""
import asyncio
import ssl
import sys

try:
    from aioquic.asyncio import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, FrameType, H3Connection
    from aioquic.h3.events import HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import ConnectionTerminated, StreamReset
    from cryptography.hazmat.primitives import hashes
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)


class GoawayH3(H3Connection):
    """aioquic skips GOAWAY's payload without telling: its frame type is noted here, as every
    control frame's type passes the check."""

    goaway = False

    def _check_control_frame_type(self, frame_type):
        if frame_type == FrameType.GOAWAY:
            self.goaway = True
        return super()._check_control_frame_type(frame_type)


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = GoawayH3(self._quic)
        self.waiting = {}
        self.status = {}

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"connection ended: {event.reason_phrase}"))
            return
        if isinstance(event, StreamReset):
            fut = self.waiting.get(event.stream_id)
            if fut is not None and not fut.done():
                fut.set_result(f"reset {event.error_code}")
            return
        for ev in self.h3.handle_event(event):
            sid = getattr(ev, "stream_id", None)
            fut = self.waiting.get(sid)
            if fut is None or fut.done():
                continue
            if isinstance(ev, HeadersReceived):
                self.status[sid] = int(dict(ev.headers).get(b":status", b"0"))
            if getattr(ev, "stream_ended", False):
                fut.set_result(f"status {self.status.get(sid, 0)}")

    def begin(self, port, path):
        sid = self._quic.get_next_available_stream_id()
        fut = asyncio.get_running_loop().create_future()
        self.waiting[sid] = fut
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                   (b":authority", f"site.test:{port}".encode()),
                                   (b":path", path.encode())], end_stream=True)
        self.transmit()
        return fut

    async def answer(self, fut):
        result = await asyncio.wait_for(fut, 10)
        return f"{result} goaway {'yes' if self.h3.goaway else 'no'}"

    def certificate_sha256(self):
        cert = self._quic.tls._peer_certificate
        return cert.fingerprint(hashes.SHA256()).hex()


async def main(port):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               server_name="site.test", verify_mode=ssl.CERT_NONE)
    loop = asyncio.get_running_loop()
    async with connect("127.0.0.1", port, configuration=config,
                       create_protocol=Client) as client:
        first = await client.answer(client.begin(port, "/"))
        print(f"cert {client.certificate_sha256()} {first}", flush=True)
        started = None
        while command := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            if command == "get":
                print(await client.answer(client.begin(port, "/")), flush=True)
            elif command == "start":
                started = client.begin(port, "/slow")
                print("started", flush=True)
            elif command == "wait" and started is not None:
                print(await client.answer(started), flush=True)
            else:
                print(f"unknown command {command!r}", flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1])))
    except (asyncio.TimeoutError, ConnectionError) as e:
        print(f"failed: {e!r}", flush=True)
        sys.exit(1)
