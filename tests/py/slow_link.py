"""A slow network link for tests/tests/fleet_scale.rs: a TCP relay from a loopback port to a real
Redis that carries at most RATE bytes per second in each direction, as a link to a Redis in
another zone would. It changes no byte: the replies are Redis's own, only later, and a large
pipeline takes longer than a small one in proportion to its size.

Usage: slow_link.py PORT REDIS_PORT RATE LIFETIME_S. It stops by itself after LIFETIME_S
seconds (the test also kills it by pid).
"""

import socket
import sys
import threading
import time

port, redis_port, rate, lifetime = (
    int(sys.argv[1]),
    int(sys.argv[2]),
    int(sys.argv[3]),
    float(sys.argv[4]),
)
CHUNK = 1024


def pump(src, dst):
    """Copies src to dst, CHUNK bytes at a time, at `rate` bytes per second.

    Each chunk waits until the time its bytes are due on a clock that starts when the link
    goes idle, not a fixed sleep after every chunk: on a loaded machine each wake-up comes
    late, and late sleeps that add up made a 30 KB reply take twice its time (CI judged
    Redis down on the link, not on the proxy)."""
    try:
        due = time.monotonic()
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            # An idle link does not bank time for a later burst.
            due = max(due, time.monotonic()) + len(data) / rate
            dst.sendall(data)
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def relay(client):
    try:
        upstream = socket.create_connection(("127.0.0.1", redis_port), timeout=5)
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    for src, dst in ((client, upstream), (upstream, client)):
        threading.Thread(target=pump, args=(src, dst), daemon=True).start()


def main():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(16)
    listener.settimeout(0.2)
    print("listening", flush=True)
    end = time.monotonic() + lifetime
    while time.monotonic() < end:
        try:
            client, _ = listener.accept()
        except socket.timeout:
            continue
        relay(client)


main()
