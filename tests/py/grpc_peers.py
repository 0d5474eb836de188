#!/usr/bin/env python3
"""gRPC peers for the tests of HTTP/2 to origins (grpcio, raw bytes: no generated code).

  server PORT        an h2c gRPC server on 127.0.0.1:PORT, service `test.Echo`:
                     Unary (the message reversed), Stream (request "N": N messages "i:N"),
                     Collect (client streaming: "COUNT BYTES"), Chat (bidirectional: each
                     message echoed upper-cased), Slow (answers after 3 s), Fail (NOT_FOUND
                     "no such thing" with trailing metadata `detail-bin`). Prints "ready".
                     It prints "cancelled Slow" when a Slow call is cancelled by its client.
  client TARGET      the cases through TARGET (host:port, h2c), one line each:
                     "CASE ok DETAIL" or "CASE FAIL DETAIL"; exit status 0 when all are ok.

Runs until killed (server) or the cases are done (client)."""

import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "test.Echo"


def unary(req, ctx):
    return req[::-1]


def stream(req, ctx):
    n = int(req.decode())
    for i in range(n):
        yield ("%d:%d" % (i, n)).encode()


def collect(it, ctx):
    count = total = 0
    for m in it:
        count += 1
        total += len(m)
    return ("%d %d" % (count, total)).encode()


def chat(it, ctx):
    for m in it:
        yield m.upper()


def slow(req, ctx):
    done = threading.Event()
    ctx.add_callback(done.set)
    if done.wait(3.0) and not ctx.is_active():
        print("cancelled Slow", flush=True)
        return b""
    return b"late"


def fail(req, ctx):
    ctx.set_trailing_metadata((("detail-bin", b"\x00\x01details"),))
    ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing")


def serve(port):
    h = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(unary),
            "Stream": grpc.unary_stream_rpc_method_handler(stream),
            "Collect": grpc.stream_unary_rpc_method_handler(collect),
            "Chat": grpc.stream_stream_rpc_method_handler(chat),
            "Slow": grpc.unary_unary_rpc_method_handler(slow),
            "Fail": grpc.unary_unary_rpc_method_handler(fail),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((h,))
    server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def cases(target):
    ch = grpc.insecure_channel(target, options=(("grpc.default_authority", "site.test"),))
    grpc.channel_ready_future(ch).result(timeout=10)
    m = lambda kind, name: getattr(ch, kind)("/%s/%s" % (SERVICE, name))
    results = []

    def case(name, fn):
        try:
            ok, detail = fn()
        except grpc.RpcError as e:
            ok, detail = False, "%s %s" % (e.code(), e.details())
        except Exception as e:  # noqa: BLE001 - reported, the test judges
            ok, detail = False, repr(e)
        results.append(ok)
        print("%s %s %s" % (name, "ok" if ok else "FAIL", detail), flush=True)

    def unary_case():
        got = m("unary_unary", "Unary")(b"hello grpc", timeout=10)
        return got == b"cprg olleh", got

    def stream_case():
        got = list(m("unary_stream", "Stream")(b"50", timeout=10))
        return got == [("%d:50" % i).encode() for i in range(50)], len(got)

    def collect_case():
        msgs = [bytes([i % 256]) * 20000 for i in range(40)]
        got = m("stream_unary", "Collect")(iter(msgs), timeout=10)
        return got == b"40 800000", got

    def chat_case():
        # Each answer is awaited before the next message goes: nothing may wait for the end.
        q = []
        cv = threading.Condition()

        def requests():
            for i in range(20):
                with cv:
                    q.append(("msg %d" % i).encode())
                    yield q[-1]
                    cv.wait_for(lambda: len(q) == 0, timeout=5)

        got = []
        for r in m("stream_stream", "Chat")(requests(), timeout=10):
            got.append(r)
            with cv:
                q.clear()
                cv.notify_all()
        return got == [("MSG %d" % i).encode() for i in range(20)], len(got)

    def deadline_case():
        start = time.monotonic()
        try:
            m("unary_unary", "Slow")(b"", timeout=0.5)
            return False, "answered"
        except grpc.RpcError as e:
            took = time.monotonic() - start
            return e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and took < 2.5, "%s %.2f" % (e.code(), took)

    def fail_case():
        try:
            m("unary_unary", "Fail")(b"", timeout=10)
            return False, "answered"
        except grpc.RpcError as e:
            meta = dict(e.trailing_metadata() or ())
            ok = (
                e.code() == grpc.StatusCode.NOT_FOUND
                and e.details() == "no such thing"
                and meta.get("detail-bin") == b"\x00\x01details"
            )
            return ok, "%s %s %r" % (e.code(), e.details(), meta)

    case("unary", unary_case)
    case("server_streaming", stream_case)
    case("client_streaming", collect_case)
    case("bidi", chat_case)
    case("deadline", deadline_case)
    case("status_details", fail_case)
    # The connection is still good after a deadline and a failure.
    case("unary_after", unary_case)
    return 0 if all(results) else 1


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(int(sys.argv[2]))
    else:
        sys.exit(cases(sys.argv[2]))
