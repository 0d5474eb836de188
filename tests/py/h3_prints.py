#!/usr/bin/env python3
"""Connections one after the other from one aioquic process, each with one GET of /
(tests/tests/h3_prints.rs: the TLS fingerprint limits over QUIC; one process, so that two
connections fit in a second however slowly Python starts).

Usage: h3_prints.py PORT COUNT   prints one JSON line per connection:
  {"status": 200, "close": null}     served
  {"status": null, "close": 263}     closed by the proxy (its error code) before an answer
  {"status": null, "close": "timeout"}  nothing within 5 s
"""
import asyncio
import json
import ssl
import sys

try:
    from aioquic.asyncio import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import ConnectionTerminated
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)

TIMEOUT = 5


class Once(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.result = {"status": None, "close": None}
        self.done = asyncio.get_running_loop().create_future()

    def finish(self):
        if not self.done.done():
            self.done.set_result(self.result)

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.result["close"] = event.error_code
            self.finish()
            return
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived):
                for name, value in ev.headers:
                    if name == b":status":
                        self.result["status"] = int(value)
            if getattr(ev, "stream_ended", False):
                self.finish()

    def get(self, port):
        sid = self._quic.get_next_available_stream_id()
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                   (b":authority", f"site.test:{port}".encode()),
                                   (b":path", b"/")], end_stream=True)
        self.transmit()


async def once(port):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               server_name="site.test", verify_mode=ssl.CERT_NONE)
    try:
        async with connect("127.0.0.1", port, configuration=config, create_protocol=Once,
                           wait_connected=True) as client:
            client.get(port)
            try:
                return await asyncio.wait_for(client.done, TIMEOUT)
            except asyncio.TimeoutError:
                return {"status": None, "close": "timeout"}
    except ConnectionError as e:
        # Closed before `connect` returned: the handshake's end, or right after it.
        return {"status": None, "close": str(e) or "closed"}


async def main(port, count):
    for _ in range(count):
        result = await asyncio.wait_for(once(port), TIMEOUT * 2)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
