#!/usr/bin/env python3
"""Writes the seed corpus of the key_update fuzz target into fuzz/seeds/key_update/.

Each seed is a control byte (bits 0-1 the cipher, bit 2 a small send buffer on the socket's
end, bits 3-4 the read buffer: 1, 7, 4096 or 20000 bytes) and ops of two bytes (op, argument)
as fuzz_targets/key_update.rs reads them. Run it again after changing the format:

    python3 fuzz/seeds/key_update.py
"""
import os

(EMPTY, KEY_UPDATE, KEY_UPDATE_REQUESTED, DATA, USER_CANCELED, TICKET, BAD_KEY_UPDATE,
 GARBAGE, FLIP, DELIVER, READ, WRITE, PEER_READS, CLOSE_NOTIFY, FIN, KEY_UPDATES) = range(16)

ALL = 255
SMALL_SNDBUF = 4


def ops(*pairs):
    return bytes(b for pair in pairs for b in pair)


def exchange():
    """Deliver everything, read it, let the peer read our answers."""
    return ops((DELIVER, ALL), (READ, 0), (PEER_READS, 0))


SCRIPTS = {
    # 1280 empty records before a request: many reads of at most the bound each.
    "empty_run_then_data": ops(*[(EMPTY, 63)] * 20, (DATA, 1)) + exchange()
    + ops((WRITE, 3), (PEER_READS, 0)),
    "padded_empty_run": ops(*[(EMPTY, 0x80 | 63)] * 4, (DATA, 0)) + exchange(),
    "request_answered": ops((KEY_UPDATE_REQUESTED, 0)) + exchange()
    + ops((WRITE, 1), (PEER_READS, 0)),
    # Twenty requests, one answer; data; another request, another answer.
    "requests_one_answer": ops((KEY_UPDATES, 0x40 | 19)) + exchange()
    + ops((WRITE, 0), (KEY_UPDATE_REQUESTED, 0)) + exchange() + ops((WRITE, 2), (PEER_READS, 0)),
    "not_requested": ops((KEY_UPDATE, 0), (DATA, 2)) + exchange(),
    # 33 KeyUpdates without data: the flood.
    "flood": ops((KEY_UPDATES, 32)) + exchange(),
    "flood_requested": ops((KEY_UPDATES, 0x40 | 32)) + exchange(),
    "flood_spread_over_empty_records": ops(*[(KEY_UPDATE, 0), (EMPTY, 39)] * 33) + exchange(),
    "under_the_flood_limit": ops((KEY_UPDATES, 31), (DATA, 0), (KEY_UPDATES, 31), (DATA, 0))
    + exchange(),
    # A write the socket takes in part, then a request: the answer queues behind it.
    "answer_behind_a_blocked_write": ops((WRITE, 255), (KEY_UPDATE_REQUESTED, 0)) + exchange()
    + ops((WRITE, 0), (PEER_READS, 0), (WRITE, 0), (PEER_READS, 0)),
    "interleaved": ops((DATA, 5), (KEY_UPDATE_REQUESTED, 0), (DELIVER, 3), (READ, 0),
                       (WRITE, 9), (DELIVER, ALL), (READ, 0), (KEY_UPDATE_REQUESTED, 0),
                       (WRITE, 9), (DELIVER, ALL), (READ, 0), (PEER_READS, 0), (WRITE, 1),
                       (PEER_READS, 0)),
    "partial_delivery": ops((DATA, 10), (KEY_UPDATE_REQUESTED, 0), (DELIVER, 0), (READ, 0),
                            (DELIVER, 3), (READ, 0), (DELIVER, ALL), (READ, 0), (PEER_READS, 0)),
    "fin_mid_record": ops((DATA, 10), (DELIVER, 20), (FIN, 0), (READ, 0), (READ, 0)),
    "fin_between_records": ops((DATA, 1)) + exchange() + ops((FIN, 0), (READ, 0), (WRITE, 1),
                                                            (PEER_READS, 0)),
    "close_notify": ops((DATA, 1), (CLOSE_NOTIFY, 0), (DATA, 1)) + exchange()
    + ops((READ, 0), (WRITE, 1), (PEER_READS, 0)),
    "user_canceled": ops((USER_CANCELED, 0), (DATA, 0)) + exchange(),
    "ticket": ops((DATA, 0), (TICKET, 0), (DATA, 0)) + exchange() + ops((WRITE, 0)),
    "bad_key_update": ops((KEY_UPDATE_REQUESTED, 0), (BAD_KEY_UPDATE, 0)) + exchange(),
    "garbage": ops((DATA, 0), (GARBAGE, 7)) + b"\x17\x03\x03\x00\x20\x00\x00" + exchange(),
    "flip": ops((DATA, 0), (KEY_UPDATE_REQUESTED, 0), (FLIP, 77)) + exchange(),
}


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "key_update")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        os.remove(os.path.join(out, name))
    count = 0
    for name, script in SCRIPTS.items():
        for cipher in range(3):
            # Read buffers of 4096 bytes, then 7 and 1 byte for the first cipher only.
            reads = [2, 1, 0] if cipher == 0 else [2]
            for read in reads:
                sndbuf = SMALL_SNDBUF if "blocked" in name or cipher == 2 else 0
                control = cipher | sndbuf | (read << 3)
                path = os.path.join(out, f"{name}-c{cipher}-r{read}")
                with open(path, "wb") as f:
                    f.write(bytes([control]) + script)
                count += 1
    print(f"{count} seeds in {out}")


if __name__ == "__main__":
    main()
