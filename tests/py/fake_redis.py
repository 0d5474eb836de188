"""A misbehaving Redis for tests/tests/fleet.rs: it answers the fleet's commands as Redis
would for the first TURNS pipelines it is sent (counted over all its connections), then
misbehaves on every later one, by MODE:

  trickle  the right replies, one byte every 30 ms (each byte well within any read timeout);
  flood    XREAD answered by an endless array of integers, up to CAP bytes per connection.

Usage: fake_redis.py PORT MODE TURNS CAP LIFETIME_S. It stops by itself after LIFETIME_S
seconds (the test also kills it by pid), and never sends more than CAP bytes on one
connection.
"""

import socket
import sys
import threading
import time

port, mode, good_turns, cap, lifetime = (
    int(sys.argv[1]),
    sys.argv[2],
    int(sys.argv[3]),
    int(sys.argv[4]),
    float(sys.argv[5]),
)
turns = 0
turns_lock = threading.Lock()


def parse_commands(buf):
    """Complete commands at the start of buf (RESP arrays of bulk strings), and the bytes
    they take."""
    commands, at = [], 0
    while at < len(buf) and buf[at : at + 1] == b"*":
        end = buf.find(b"\r\n", at)
        if end < 0:
            break
        count, pos, args = int(buf[at + 1 : end]), end + 2, []
        for _ in range(count):
            end = buf.find(b"\r\n", pos)
            if end < 0:
                return commands, at
            size = int(buf[pos + 1 : end])
            if end + 2 + size + 2 > len(buf):
                return commands, at
            args.append(buf[end + 2 : end + 2 + size])
            pos = end + 2 + size + 2
        commands.append(args)
        at = pos
    return commands, at


def reply(args):
    name = args[0].upper()
    if name == b"MGET":
        return b"*%d\r\n" % (len(args) - 1) + b"$-1\r\n" * (len(args) - 1)
    if name == b"XREAD":
        return b"*-1\r\n"
    if name == b"XINFO":
        return b"-ERR no such key\r\n"
    if name in (b"INCRBY", b"PEXPIRE"):
        return b":1\r\n"
    return b"+OK\r\n"


def misbehave(conn, commands):
    if mode == "trickle":
        for byte in b"".join(reply(c) for c in commands):
            conn.sendall(bytes([byte]))
            time.sleep(0.03)
        return
    # flood: the replies before XREAD, then XREAD's "reply" without end.
    sent = 0
    for c in commands:
        if c[0].upper() == b"XREAD":
            break
        conn.sendall(reply(c))
    conn.sendall(b"*1048576\r\n" * 4)
    chunk = b":1\r\n" * 16384
    while sent < cap:
        conn.sendall(chunk)
        sent += len(chunk)
    time.sleep(lifetime)


def serve(conn):
    global turns
    buf = b""
    with conn:
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                commands, used = parse_commands(buf)
                if not commands:
                    continue
                buf = buf[used:]
                with turns_lock:
                    turns += 1
                    turn = turns
                if turn <= good_turns:
                    conn.sendall(b"".join(reply(c) for c in commands))
                else:
                    misbehave(conn, commands)
        except OSError:
            return


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(16)
listener.settimeout(0.2)
print("listening", flush=True)
started = time.time()
while time.time() - started < lifetime:
    try:
        conn, _ = listener.accept()
    except socket.timeout:
        continue
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
