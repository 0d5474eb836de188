"""The other side of h3's QPACK cross-check (tests/pylsqpack.rs), with pylsqpack (ls-qpack).

A line protocol on stdin/stdout, hex everywhere; a header list is "name:value" pairs of hex
joined by commas ("-" when empty).

  encode: prints "E <encoder stream>" (the capacity), then for each list of the corpus
          "B <stream id> <encoder stream> <field section> <list>", and reads back
          "D <decoder stream>" (our acknowledgments and increments) before the next; "END".
  decode: reads "H <stream id> <field section>" and answers "L <list>" or "X <error>";
          reads "Q" and exits.
"""

import signal
import sys

import pylsqpack

CAPACITY = 4096
BLOCKED = 16


def hexlist(headers):
    if not headers:
        return "-"
    return ",".join(n.hex() + ":" + v.hex() for n, v in headers)


def unhexlist(s):
    if s == "-":
        return []
    return [tuple(bytes.fromhex(x) for x in p.split(":")) for p in s.split(",")]


def corpus():
    common = [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"www.example.com"),
    ]
    ua = (b"user-agent", b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0")
    lists = []
    for i in range(24):
        h = list(common) + [(b":path", b"/assets/%d/app.js?v=%d" % (i % 5, i))]
        h.append(ua)
        h.append((b"accept", b"*/*" if i % 2 else b"text/html,application/xhtml+xml"))
        h.append((b"accept-language", b"en-US,en;q=0.5"))
        h.append((b"cookie", b"session=%032x" % (i % 3)))
        h.append((b"cookie", b"theme=dark"))
        h.append((b"x-request-id", b"%08d" % i))
        if i % 4 == 0:
            h.append((b"x-custom-%d" % i, b"value with spaces and \xc3\xa9 bytes"))
        if i % 7 == 3:
            h.append((b"x-empty", b""))
        lists.append(h)
    # Responses too, and a value too large for the dynamic table.
    lists.append([(b":status", b"200"), (b"content-type", b"text/html; charset=utf-8"),
                  (b"server", b"ktls-proxy"), (b"etag", b'"abc"')])
    lists.append([(b":status", b"418"), (b"x-big", b"b" * 5000)])
    lists.append([(b"x-field-%d" % n, b"%d" % n) for n in range(60)])
    return lists


def encode():
    enc = pylsqpack.Encoder()
    out = enc.apply_settings(CAPACITY, BLOCKED)
    print("E", out.hex() or "-", flush=True)
    for i, headers in enumerate(corpus()):
        sid = 4 * i
        enc_stream, section = enc.encode(sid, headers)
        print("B", sid, enc_stream.hex() or "-", section.hex(), hexlist(headers), flush=True)
        line = sys.stdin.readline().split()
        if not line or line[0] != "D":
            sys.exit("expected D, got %r" % line)
        if len(line) > 1 and line[1] != "-":
            enc.feed_decoder(bytes.fromhex(line[1]))
    print("END", flush=True)


def decode():
    dec = pylsqpack.Decoder(CAPACITY, BLOCKED)
    for line in sys.stdin:
        parts = line.split()
        if parts[0] == "Q":
            return
        sid, section = int(parts[1]), bytes.fromhex(parts[2])
        try:
            _, headers = dec.feed_header(sid, section)
            print("L", hexlist(headers), flush=True)
        except Exception as e:  # the Rust side reports it
            print("X", type(e).__name__, flush=True)


if __name__ == "__main__":
    signal.alarm(60)  # the test's bound on this process
    {"encode": encode, "decode": decode}[sys.argv[1]]()
