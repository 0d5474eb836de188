#!/usr/bin/env python3
"""Sums a callgrind profile's self cost (Ir, instructions executed) per shared object.

    callgrind_objects.py FILE HANDSHAKES

Prints one JSON object: {"total": Ir per handshake, "objects": {name: Ir per handshake}}, the
objects grouped as libcrypto, libssl, libc (with ld.so and libm), the server's own binary
(`server`: anything else not a known library), and `other` (valgrind's own preload objects).

The format (valgrind docs, "Callgrind Format Specification"): `ob=` names the object of the
functions that follow, `calls=` lines are followed by one cost line that is the call's
inclusive cost (skipped here: only self cost is summed, so every instruction counts once),
and a cost line is a position followed by the event counts. Names may be compressed: the
first use is `(id) name`, later uses `(id)`.
"""

import json
import sys


def group(obj):
    base = obj.rsplit("/", 1)[-1]
    if base.startswith("libcrypto"):
        return "libcrypto"
    if base.startswith("libssl"):
        return "libssl"
    if base.startswith(("libc.so", "libc-", "ld-linux", "libm.so", "libpthread")):
        return "libc"
    if base.startswith(("vgpreload", "valgrind")) or base == "???":
        return "other"
    if base.startswith(("libmimalloc", "libjemalloc")):
        return "allocator"
    return "server"


def parse(path):
    names = {}
    per_object = {}
    current = "???"
    skip_next_cost = False
    summary = None

    def resolve(value):
        value = value.strip()
        if value.startswith("("):
            ident, _, name = value.partition(")")
            name = name.strip()
            if name:
                names[ident] = name
            return names.get(ident, "???")
        return value

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line or line[0] == "\n":
                continue
            head = line[0]
            if head.isdigit() or head in "+-*":
                if skip_next_cost:
                    skip_next_cost = False
                    continue
                fields = line.split()
                if len(fields) >= 2:
                    per_object[current] = per_object.get(current, 0) + int(fields[1])
                continue
            if line.startswith("ob="):
                current = resolve(line[3:])
            elif line.startswith("cob="):
                resolve(line[4:])
            elif line.startswith("calls="):
                skip_next_cost = True
            elif line.startswith(("summary:", "totals:")):
                summary = int(line.split()[1])
    return per_object, summary


def main():
    path, handshakes = sys.argv[1], int(sys.argv[2])
    per_object, summary = parse(path)
    grouped = {}
    for obj, cost in per_object.items():
        key = group(obj)
        grouped[key] = grouped.get(key, 0) + cost
    total = sum(grouped.values())
    if summary is not None and summary != total:
        print(f"callgrind_objects: self costs sum to {total}, summary says {summary}",
              file=sys.stderr)
        sys.exit(1)
    out = {
        "total": round(total / handshakes),
        "objects": {k: round(v / handshakes) for k, v in sorted(grouped.items())},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
