#!/usr/bin/env python3
"""Writes seeds for the h2_client_frames fuzz target: an origin's answers to the streams the
target opens (control byte, opens byte, then frames), with heads from HPACK's static table
(0x88 :status 200, 0x89 204, 0x8d 404) and literal fields.
Usage: python3 fuzz/seeds/h2_client_frames.py (writes next to itself)."""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h2_client_frames")


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value


DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WU, CONT = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS = 1, 4

seeds = {
    "get_200_body": bytes([0x41, 0x01])
    + frame(HEADERS, END_HEADERS, 1, b"\x88" + literal(b"content-length", b"5"))
    + frame(DATA, END_STREAM, 1, b"hello")
    + frame(HEADERS, END_HEADERS | END_STREAM, 3, b"\x89"),
    "interim_trailers": bytes([0x45, 0x02])
    + frame(HEADERS, END_HEADERS, 1, literal(b":status", b"103"))
    + frame(HEADERS, 0, 1, b"\x88")
    + frame(CONT, END_HEADERS, 1, literal(b"content-type", b"application/grpc"))
    + frame(DATA, 0, 1, b"\x00\x00\x00\x00\x00")
    + frame(HEADERS, END_HEADERS | END_STREAM, 1, literal(b"grpc-status", b"0")),
    "refused_goaway": bytes([0x07, 0x0b])
    + frame(RST, 0, 1, struct.pack(">I", 7))
    + frame(WU, 0, 0, struct.pack(">I", 100000))
    + frame(WU, 0, 3, struct.pack(">I", 100000))
    + frame(PING, 0, 0, b"12345678")
    + frame(SETTINGS, 0, 0, struct.pack(">HI", 3, 1) + struct.pack(">HI", 4, 1000))
    + frame(GOAWAY, 0, 0, struct.pack(">II", 3, 0) + b"bye"),
    "own_settings": bytes([0x80, 0x81])
    + frame(SETTINGS, 0, 0, struct.pack(">HI", 1, 0) + struct.pack(">HI", 5, 20000))
    + frame(HEADERS, END_HEADERS, 1, b"\x20\x8d")
    + frame(DATA, END_STREAM, 1, b"x" * 100),
}

os.makedirs(HERE, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
