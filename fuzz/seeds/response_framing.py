#!/usr/bin/env python3
"""Writes the seed corpus of the response_framing fuzz target into fuzz/seeds/response_framing/.

Each seed is an input for fuzz_targets/response_framing.rs: a method byte (0 GET, 1 HEAD,
2 POST, 3 CONNECT, 4 OPTIONS), a byte for how the connection ends (bits 0-1: 0 open, 1
orderly close, 2 or 3 reset; 0x80: a bodiless status line in front, bits 4-5 pick 204, 304, 100 or
an HTTP/1.0 204), the body's split point, then the response. The seeds carry the field
names the framing depends on, which the fuzzer would otherwise take long to spell.
"""
import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "response_framing")

SEEDS = {
    "bodiless_204_length": (0, 0x80, 0, b"Content-Length: 87\r\n\r\n"),
    "bodiless_304_chunked": (0, 0x90, 0, b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    "bodiless_100_length": (
        0,
        0xA0,
        0,
        b"Content-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ),
    "head_200_length": (1, 0x00, 0, b"HTTP/1.1 200 OK\r\nContent-Length: 87\r\n\r\n"),
    "connect_200_length": (3, 0x00, 0, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"),
    "close_delimited_reset": (
        0,
        0x02,
        7,
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n\r\n" + b"c" * 40,
    ),
    "close_delimited_orderly": (0, 0x01, 7, b"HTTP/1.0 200 OK\r\n\r\n" + b"c" * 40),
    "length_cut_reset": (0, 0x02, 3, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"),
    "chunked_done": (
        2,
        0x00,
        4,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    ),
}

os.makedirs(HERE, exist_ok=True)
for name, (method, how, split, rest) in SEEDS.items():
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(bytes([method, how, split]) + rest)
