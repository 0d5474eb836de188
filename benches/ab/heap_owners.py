#!/usr/bin/env python3
"""Sorts the live heap of a heaptrack capture by owner (benches/ab/h3_idle_heap.sh).

Input: the folded stacks `heaptrack_print --flamegraph-cost-type leaked -F FILE` writes
(frames root first, separated by ';', then the bytes), and N, the connections held. Each
stack goes to the first owner whose pattern one of its frames matches, scanning the frames
from the allocation up (the innermost caller that says whose the memory is wins). Prints
a Markdown table: owner, bytes per connection, share; then the largest stacks of each
owner (their innermost frames), to see what inside an owner holds the bytes.
"""

import re
import sys
from collections import defaultdict

# heaptrack names a frame "function (file.rs)", without its crate: an owner is recognised by
# the frames of its own code (function@file) among the allocation's innermost ones, the
# first rule that matches deciding; the Box<H3Codec> is the allocation made in `admit`
# itself. Frames of std, alloc, hashbrown and the worker's loop
# (GENERIC) are skipped. Allocations outside the worker's turns (start-up: the cache's
# table, the sockets' buffers) are not the connections' and are counted apart.
OWNERS = [
    ("proxy: Box<H3Codec> (quinn-proto's Connection inline, h3::Connection, ours)",
     r"^admit@admit\.rs$"),
    ("quinn-proto: stream tables and stream state",
     r"@(state|send|recv|send_buffer|btree_range_set)\.rs$"),
    ("quinn-proto: 1-RTT packet keys, this phase and the next (aws-lc AEAD contexts)",
     r"^(packet_key|next_packet_keys)@quic\.rs$|^aes_\d+_gcm@aead_ctx\.rs$"),
    ("quinn-proto: header protection keys", r"^header_protection_key@quic\.rs$"),
    ("rustls: record-layer keys set by the handshake (unused by QUIC)",
     r"^new@tls\.rs$|^(en|de)crypter@tls13\.rs$"),
    ("rustls: session (connection state, handshake buffers)",
     r"@(rustls|server_conn|handshake|tls13|hs|common_state|buffers|server_name|key_schedule)\.rs$|^new<>@conn\.rs$|^read_hs|^write_hs"),
    ("quinn-proto: congestion controller", r"@(cubic|new_reno|bbr)\.rs$"),
    ("quinn-proto: sent packets, ACK ranges, CRYPTO reassembly",
     r"@(spaces|packet_builder|assembler|paths|range_set|array_range_set)\.rs$"),
    ("quinn-proto endpoint: connection IDs and the connection's slot",
     r"@(endpoint|cid_state|cid_queue)\.rs$"),
    ("proxy: client table slot (amortised)", r"^insert@table\.rs$|^adopt@conn\.rs$"),
    ("proxy: timers (amortised)", r"@(timer|timers)\.rs$"),
    ("h3 crate: connection (uni streams, requests, QPACK, events)",
     r"@(uni|request|decoder|table|counters)\.rs$|^new@codec\.rs$"),
    ("proxy: H3Codec (request streams, uni buffers)", r"@(codec|conn)\.rs$"),
]
COMPILED = [(name, re.compile(p)) for name, p in OWNERS]
OTHER = "other"
GENERIC = set(
    "alloc.rs boxed.rs mod.rs map.rs entry.rs node.rs raw_vec.rs global.rs iter.rs "
    "iterator.rs spec_from_iter.rs spec_from_iter_nested.rs function.rs backtrace.rs "
    "panic.rs panicking.rs lifecycle.rs lib.rs vec_deque.rs macros.rs spec_extend.rs "
    "cow.rs clone.rs slice.rs set.rs mem.c option.rs rev.rs double_ended.rs "
    "unwind_safe.rs rustc_entry.rs server.rs unix.rs pthread_create.c clone3.S".split()
)
WINDOW = 3
FRAME = re.compile(r"(\S+) \(([^)]+)\)$")


def own_frames(frames):
    """The frames of named code, allocation first."""
    out = []
    for f in reversed(frames):
        m = FRAME.search(f.strip())
        if m and m.group(2) not in GENERIC:
            out.append(f"{m.group(1)}@{m.group(2)}")
    return out


def owner_of(frames):
    """The first rule any of the allocation's innermost named frames matches (inlining
    lists an allocation's callers out of order, so a few frames are looked at together)."""
    near = own_frames(frames)[:WINDOW]
    if near[:1] == ["admit@admit.rs"]:
        return OWNERS[0][0]
    for name, rx in COMPILED[1:]:
        if any(rx.search(frame) for frame in near):
            return name
    return OTHER


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: heap_owners.py FOLDED_STACKS N")
    path, n = sys.argv[1], int(sys.argv[2])
    by_owner = defaultdict(int)
    fixed = 0
    stacks = defaultdict(lambda: defaultdict(int))
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            stack, _, cost = line.rpartition(" ")
            if not stack or not cost.isdigit():
                continue
            frames = stack.split(";")
            if not any(f.startswith("turn (") for f in frames):
                fixed += int(cost)
                continue
            who = owner_of(frames)
            by_owner[who] += int(cost)
            tail = " <- ".join(own_frames(frames)[:4])
            stacks[who][tail] += int(cost)
    total = sum(by_owner.values())
    print(f"live heap allocated in the worker's turns: {total} B, {total / n:.0f} B per "
          f"connection (N = {n}); at start-up: {fixed} B\n")
    print("| owner | bytes per connection | share |")
    print("|---|---:|---:|")
    for who, b in sorted(by_owner.items(), key=lambda kv: -kv[1]):
        print(f"| {who} | {b / n:.0f} | {100 * b / total:.1f} % |")
    print()
    for who, b in sorted(by_owner.items(), key=lambda kv: -kv[1]):
        print(f"## {who}: {b / n:.0f} B per connection")
        for tail, c in sorted(stacks[who].items(), key=lambda kv: -kv[1])[:8]:
            if c / n >= 8:
                print(f"  {c / n:7.0f}  {tail[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
