#!/usr/bin/env python3
"""HTTP/3 cases against the proxy with aioquic as the client (tests/tests/h3_serve.rs).

Usage: h3_cases.py PORT CASE...   prints "ok CASE" for each case that passed; exits 1 on the
first failure with what was seen. Every request is bounded by a timeout.
"""
import asyncio
import os
import ssl
import sys

try:
    from aioquic.asyncio import connect
    from aioquic.asyncio.protocol import QuicConnectionProtocol
    from aioquic.h3.connection import H3_ALPN, H3Connection
    from aioquic.h3.events import DataReceived, HeadersReceived
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import StreamReset
except ImportError:
    print("aioquic is missing: python3 -m pip install aioquic (tests/run.sh does)")
    sys.exit(2)

TIMEOUT = 10
# The server name of the handshake, and the authority of the requests (H3_SNI, default
# site.test); H3_CROSS: another vhost's name, for a request whose authority differs.
SNI = os.environ.get("H3_SNI", "site.test")
CROSS = os.environ.get("H3_CROSS", "")


def pattern(n):
    return bytes(((i * 31 + i // 251) % 251) for i in range(n))


class Answer:
    def __init__(self):
        self.status = None
        self.headers = {}
        self.body = bytearray()
        self.reset = None
        self.trailers = {}


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting = {}

    def quic_event_received(self, event):
        if isinstance(event, StreamReset) and event.stream_id in self.waiting:
            answer, done = self.waiting.pop(event.stream_id)
            answer.reset = event.error_code
            done.set_result(answer)
            return
        for ev in self.h3.handle_event(event):
            entry = self.waiting.get(getattr(ev, "stream_id", None))
            if entry is None:
                continue
            answer, done = entry
            if isinstance(ev, HeadersReceived) and answer.status is not None and answer.status >= 200:
                answer.trailers.update((n.decode(), v.decode()) for n, v in ev.headers)
            elif isinstance(ev, HeadersReceived):
                for name, value in ev.headers:
                    if name == b":status":
                        if answer.status is None or answer.status < 200:
                            answer.status = int(value)
                    else:
                        answer.headers[name.decode()] = value.decode()
            elif isinstance(ev, DataReceived):
                answer.body += ev.data
            if getattr(ev, "stream_ended", False):
                del self.waiting[ev.stream_id]
                done.set_result(answer)

    async def request(self, method, path, body=b"", extra=(), drop=(), trailers=()):
        sid = self._quic.get_next_available_stream_id()
        headers = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", SNI.encode()),
            (b":path", path.encode()),
        ]
        headers = [h for h in headers if h[0] not in drop] + list(extra)
        done = asyncio.get_event_loop().create_future()
        self.waiting[sid] = (Answer(), done)
        self.h3.send_headers(sid, headers, end_stream=not body and not trailers)
        if body:
            self.h3.send_data(sid, body, end_stream=not trailers)
        if trailers:
            self.h3.send_headers(sid, list(trailers), end_stream=True)
        self.transmit()
        return await asyncio.wait_for(done, TIMEOUT)


def check(cond, what, answer=None):
    if not cond:
        seen = ""
        if answer is not None:
            seen = f" (status {answer.status}, reset {answer.reset}, {len(answer.body)} bytes, {answer.headers})"
        raise AssertionError(what + seen)


async def case(client, name):
    if name == "get_small":
        a = await client.request("GET", "/small")
        check(a.status == 200 and bytes(a.body) == b"ok", "GET /small: 200 ok", a)
        check("alt-svc" not in a.headers, "no Alt-Svc over HTTP/3 itself", a)
    elif name == "get_large":
        a = await client.request("GET", "/pattern/100000")
        check(a.status == 200 and bytes(a.body) == pattern(100000), "100 KB body byte-exact", a)
    elif name == "post":
        body = pattern(50000)
        a = await client.request("POST", "/echo", body, [(b"content-length", b"50000")])
        check(a.status == 200 and bytes(a.body) == body, "POST 50 KB echoed", a)
    elif name == "post_large":
        body = pattern(400000)
        a = await client.request("POST", "/echo", body, [(b"content-length", b"400000")])
        check(a.status == 200 and bytes(a.body) == body, "POST 400 KB echoed", a)
    elif name == "get_huge":
        a = await client.request("GET", "/pattern/3000000")
        check(a.status == 200 and bytes(a.body) == pattern(3000000), "3 MB body byte-exact", a)
    elif name == "post_chunked":
        body = pattern(30000)
        a = await client.request("POST", "/echo", body)
        check(a.status == 200 and bytes(a.body) == body, "POST without length echoed", a)
    elif name == "cache_hit":
        first = await client.request("GET", "/cached")
        second = await client.request("GET", "/cached")
        check(first.status == 200 and bytes(first.body) == b"cached body", "first /cached", first)
        check(second.status == 200 and bytes(second.body) == b"cached body", "second /cached", second)
        check("age" in second.headers, "the second answer comes from the cache (Age)", second)
    elif name == "cache_hit_shared":
        # A stored 1 MB body goes out shared with the cache (no copy): whole, and in ranges.
        body = pattern(1000000)
        first = await client.request("GET", "/cached-big")
        check(first.status == 200 and bytes(first.body) == body, "first /cached-big", first)
        second = await client.request("GET", "/cached-big")
        check(second.status == 200 and bytes(second.body) == body, "stored 1 MB byte-exact", second)
        check("age" in second.headers, "the second answer comes from the cache (Age)", second)
        one = await client.request("GET", "/cached-big", extra=[(b"range", b"bytes=1000-1999")])
        check(one.status == 206 and bytes(one.body) == body[1000:2000], "one range of the stored body", one)
        two = await client.request("GET", "/cached-big",
                                   extra=[(b"range", b"bytes=0-9,500000-500009")])
        check(two.status == 206 and "multipart/byteranges" in two.headers.get("content-type", ""),
              "two ranges: multipart", two)
        check(body[0:10] in two.body and body[500000:500010] in two.body,
              "both ranges of the stored body", two)
    elif name == "concurrent":
        slow = asyncio.ensure_future(client.request("GET", "/slow"))
        await asyncio.sleep(0.1)
        fast = await client.request("GET", "/pattern/20000")
        check(not slow.done(), "the fast stream finished while the slow one waits")
        check(fast.status == 200 and bytes(fast.body) == pattern(20000), "fast stream", fast)
        a = await slow
        check(a.status == 200 and bytes(a.body) == b"slow", "slow stream", a)
    elif name == "no_path":
        a = await client.request("GET", "/", drop=(b":path",))
        # RFC 9114 §4.1.2: malformed, a stream error H3_MESSAGE_ERROR (0x10e), or a 400.
        check(a.reset == 0x10E or a.status == 400, "missing :path refused", a)
        print(f"no_path: status {a.status}, reset {a.reset}", flush=True)
        b = await client.request("GET", "/small")
        check(b.status == 200, "the connection serves on after the refused stream", b)
    elif name == "bad_method":
        a = await client.request("GE T", "/small")
        check(a.status == 400, "a method with a space: the proxy's 400 on the stream", a)
        b = await client.request("GET", "/small")
        check(b.status == 200, "the connection serves on after the 400", b)
    elif name == "cancel":
        # STOP_SENDING while the origin has not answered yet, then in the middle of a 3 MB
        # answer: the proxy resets the stream and drops the exchange; the connection serves on.
        for path, wait_data in ((b"/slow", False), (b"/pattern/3000000", True)):
            sid = client._quic.get_next_available_stream_id()
            answer, done = Answer(), asyncio.get_event_loop().create_future()
            client.waiting[sid] = (answer, done)
            client.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                         (b":authority", b"site.test"), (b":path", path)],
                                   end_stream=True)
            client.transmit()
            for _ in range(1000):
                if (len(answer.body) > 0) == wait_data and not done.done():
                    break
                await asyncio.sleep(0.001)
            check(not done.done(), "the answer is still coming when the client stops it", answer)
            client._quic.stop_stream(sid, 0x10C)
            client.transmit()
            a = await asyncio.wait_for(done, TIMEOUT)
            check(a.reset is not None and len(a.body) < 3000000, "the stream was reset", a)
            b = await client.request("GET", "/small")
            check(b.status == 200, "the connection serves on after the cancel", b)
    elif name == "sni_control":
        a = await client.request("GET", "/x")
        check(a.status == 200 and bytes(a.body) == b"A/x", "the vhost SNI chose serves", a)
    elif name == "sni_cross":
        a = await client.request("GET", "/cross", drop=(b":authority",),
                                 extra=[(b":authority", CROSS.encode())])
        check(a.reset is not None or a.status in (400, 403, 421),
              "a request for another vhost than SNI chose is refused", a)
    elif name == "trailer_kept":
        a = await client.request("POST", "/echo", b"abc", trailers=[(b"x-checksum", b"1")])
        check(a.status == 200 and bytes(a.body) == b"abc",
              "request trailers that repeat no head field: served", a)
    elif name == "trailer_split":
        a = await client.request("POST", "/echo", b"abc", [(b"x-token", b"a")],
                                 trailers=[(b"x-token", b"b")])
        check(a.status == 403, "a trailer field the head has: frang block, 403", a)
    elif name == "post_blocked":
        a = await client.request("POST", "/echo", b"x", [(b"content-length", b"1")])
        check(a.status == 403, "a method frang does not allow: 403 (block_action attack reply)", a)
    elif name == "abandon":
        # Another connection starts a 3 MB answer and closes in its middle; this one serves on.
        config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=SNI)
        config.verify_mode = ssl.CERT_NONE
        async with connect("127.0.0.1", PORT, configuration=config, create_protocol=Client) as other:
            fut = asyncio.ensure_future(other.request("GET", "/pattern/3000000"))
            for _ in range(1000):
                entry = next(iter(other.waiting.values()), None)
                if entry is not None and len(entry[0].body) > 0:
                    break
                await asyncio.sleep(0.001)
            other.close()
            fut.cancel()
        b = await client.request("GET", "/pattern/100000")
        check(b.status == 200 and bytes(b.body) == pattern(100000), "served on after", b)
    elif name == "trailers":
        a = await client.request("GET", "/trailers")
        check(a.status == 200 and bytes(a.body) == b"hello world", "chunked body", a)
        check(a.trailers == {"x-checksum": "abc123", "grpc-status": "0"},
              f"the end-to-end trailer fields only: {a.trailers}", a)
    elif name == "hold":
        # An idle connection the server closes (the test stops the proxy meanwhile).
        a = await client.request("GET", "/small")
        check(a.status == 200, "GET before the stop", a)
        print("ok hold_request", flush=True)
        await asyncio.wait_for(client.wait_closed(), 15)
    elif name == "no_datagrams":
        # The client offers DATAGRAM frames (main sets max_datagram_frame_size); the server
        # must not: nothing of it reads them.
        a = await client.request("GET", "/small")
        check(a.status == 200, "GET /small", a)
        remote = client._quic._remote_max_datagram_frame_size
        check(remote is None, f"the server offers no DATAGRAM frames (it said {remote})")
    else:
        raise AssertionError(f"unknown case {name}")


async def main(port, cases):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=SNI)
    config.verify_mode = ssl.CERT_NONE
    if "no_datagrams" in cases:
        config.max_datagram_frame_size = 65536
    if cases == ["refused"]:
        # A server name no vhost has, without tls_match_any_server_name: no handshake.
        try:
            async with connect("127.0.0.1", port, configuration=config,
                               create_protocol=Client, wait_connected=True) as client:
                await client.request("GET", "/")
        except (ConnectionError, asyncio.TimeoutError) as e:
            print(f"ok refused ({type(e).__name__}: {e})", flush=True)
            return
        raise AssertionError("the handshake for an unknown name succeeded")
    async with connect("127.0.0.1", port, configuration=config, create_protocol=Client) as client:
        for name in cases:
            await case(client, name)
            print(f"ok {name}", flush=True)


PORT = 0

if __name__ == "__main__":
    PORT = int(sys.argv[1])
    try:
        asyncio.run(asyncio.wait_for(main(int(sys.argv[1]), sys.argv[2:]), 60))
    except Exception as e:  # every failure says what was expected
        print(f"FAILED: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
