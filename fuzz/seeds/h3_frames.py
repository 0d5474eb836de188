#!/usr/bin/env python3
"""Writes the seed corpus of the h3_frames fuzz target into fuzz/seeds/h3_frames/.

Each seed is a control byte (the frame reader's piece size) then records
`[selector, length, bytes]`: selector bits 0-2 pick the stream (2, 6, 10, 14, 0, 4, 8, 12:
control, QPACK encoder, QPACK decoder, another unidirectional one, four requests), bit 7
is FIN, bit 6 a reset after the bytes. The connection's control, encoder and decoder
streams are already open (types and an empty SETTINGS). Run it again after changing the
format:

    python3 fuzz/seeds/h3_frames.py
"""
import os

CONTROL, ENCODER, DECODER, UNI, R0, R4, R8, R12 = range(8)
FIN = 0x80


def frame(ty, payload):
    assert ty < 64 and len(payload) < 64
    return bytes([ty, len(payload)]) + payload


def rec(sel, b):
    assert len(b) < 256
    return bytes([sel, len(b)]) + b


GET = bytes([0x00, 0x00, 0xD1, 0xD7, 0xC1, 0x50, 6]) + b"a.test"
# RIC 1 (capacity 4096), Base 1: :method GET, :scheme https, :path /, dynamic relative 0.
DYNAMIC = bytes([0x02, 0x00, 0xD1, 0xD7, 0xC1, 0x80])
INSERT = bytes([0x3F, 0xE1, 0x1F, 0xC0, 6]) + b"a.test"
POST = bytes([0x00, 0x00, 0xD4, 0xD7, 0xC1, 0x50, 6]) + b"a.test" + bytes([0x54, 1]) + b"5"

SEEDS = {
    "get": bytes([7]) + rec(R0 | FIN, frame(1, GET)),
    "post_with_trailers": bytes([3])
    + rec(R4, frame(1, POST) + frame(0, b"hel"))
    + rec(R4 | FIN, frame(0, b"lo") + frame(1, bytes([0, 0, 0x21]) + b"x" + bytes([1]) + b"1")),
    "blocked_then_insert": bytes([1])
    + rec(R8, frame(1, DYNAMIC) + frame(0, b"body"))
    + rec(ENCODER, INSERT)
    + rec(R8 | FIN, b""),
    "control_frames": bytes([2])
    + rec(CONTROL, frame(0x0D, bytes([4])) + frame(0x03, bytes([1])) + frame(0x21, b"g"))
    + rec(CONTROL, frame(0x07, bytes([0]))),
    "decoder_and_reset": bytes([5])
    + rec(DECODER, bytes([0x44]))
    + rec(R12 | 0x40, frame(1, DYNAMIC)),
}

if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h3_frames")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
