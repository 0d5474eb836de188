#!/usr/bin/env python3
"""Writes the seed corpus of the dns_answer fuzz target into fuzz/seeds/dns_answer/.

Each seed is the target's input: a kind byte (0 A, 1 AAAA, 2 SRV), the question's id (2
bytes), then a DNS response datagram built here by hand (RFC 1035 section 4): an A answer
for origin.example, and an SRV answer for _http._tcp.origin.example whose target's address
is in the additional section (RFC 2782).
"""
import os
import struct


def name(n):
    return b"".join(bytes([len(l)]) + l.encode() for l in n.split(".")) + b"\0"


def header(qid, answers, additional):
    return struct.pack(">HHHHHH", qid, 0x8180, 1, answers, 0, additional)


here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dns_answer")
os.makedirs(here, exist_ok=True)

question = name("origin.example") + struct.pack(">HH", 1, 1)
answer = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 60, 4) + bytes([127, 0, 0, 1])
with open(os.path.join(here, "a"), "wb") as f:
    f.write(bytes([0, 0x12, 0x34]) + header(0x1234, 1, 0) + question + answer)

question = name("_http._tcp.origin.example") + struct.pack(">HH", 33, 1)
target = name("a.test")
srv = b"\xc0\x0c" + struct.pack(">HHIH", 33, 1, 30, 6 + len(target))
srv += struct.pack(">HHH", 0, 10, 8080) + target
extra = target + struct.pack(">HHIH", 1, 1, 30, 4) + bytes([127, 0, 0, 2])
with open(os.path.join(here, "srv"), "wb") as f:
    f.write(bytes([2, 0xAB, 0xCD]) + header(0xABCD, 1, 1) + question + srv + extra)
