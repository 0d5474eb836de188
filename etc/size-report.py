#!/usr/bin/env python3
"""Lists the Rust functions over a line limit and the files over a line limit.

The team's size rule (DESIGN.md "Layout"): files under ~600 lines, functions under ~80.
Usage: etc/size-report.py [DIR ...] [--except PATH ...] [--known FILE]
  (default: proxy/src; limits via FN_MAX and FILE_MAX; `--except` skips a file or a directory,
  for what is checked elsewhere or not brought under the rule yet)

`--known FILE` is a ratchet for code not brought under the rule yet: each line of FILE names
an item over the limit and the size it may not exceed (`file PATH LINES` or
`fn PATH NAME LINES`). A listed item passes while it is no larger; an unlisted one, a listed
one that grew, and a listed one now within the limit (remove its line) fail.

Relies on rustfmt's layout (the workspace is `cargo fmt` clean): a function's body closes with
a `}` alone on a line at the indentation of its `fn` line. Declarations without a body (trait
methods ending in `;`) and one-line functions are skipped. Exit status 1 when anything is over.
"""
import os
import re
import sys

FN_MAX = int(os.environ.get("FN_MAX", "80"))
FILE_MAX = int(os.environ.get("FILE_MAX", "600"))
FN_START = re.compile(r"^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def function_lengths(lines):
    """Yields (name, first line number, length in lines) for every function with a body."""
    for start, line in enumerate(lines):
        found = FN_START.match(line)
        if not found:
            continue
        indent, name = found.group(1), found.group(7)
        end = body_end(lines, start, indent)
        if end is not None:
            yield name, start + 1, end - start + 1


def body_end(lines, start, indent):
    """The index of the line closing the function opened at `start`, or None without a body."""
    in_signature = True
    for index in range(start, len(lines)):
        text = lines[index].rstrip()
        if in_signature:
            if text.endswith(";"):
                return None  # a declaration: `fn name(..);`
            if text.endswith("}") and "{" in text:
                return None  # a one-line function
            in_signature = not text.endswith("{")
        elif text == indent + "}":
            return index
    return None


def rust_files(roots, skipped):
    skipped = [os.path.normpath(path) for path in skipped]

    def is_skipped(path):
        path = os.path.normpath(path)
        return any(path == s or path.startswith(s + os.sep) for s in skipped)

    for root in roots:
        for directory, _, names in sorted(os.walk(root)):
            for name in sorted(names):
                path = os.path.join(directory, name)
                if name.endswith(".rs") and not is_skipped(path):
                    yield path


def parse_args(args):
    """(directories, skipped paths, known-items file) from the command line."""
    roots, skipped, known = [], [], None
    target = roots
    items = iter(args)
    for arg in items:
        if arg == "--except":
            target = skipped
        elif arg == "--known":
            known = next(items, None)
        else:
            target.append(arg)
    return roots or ["proxy/src"], skipped, known


def read_known(path):
    """{(kind, path, name): allowed size} from a --known file (blank lines and # comments)."""
    known = {}
    if path is None:
        return known
    with open(path, encoding="utf-8") as listing:
        for line in listing:
            words = line.split("#", 1)[0].split()
            if len(words) == 3 and words[0] == "file":
                known[("file", words[1], "")] = int(words[2])
            elif len(words) == 4 and words[0] == "fn":
                known[("fn", words[1], words[2])] = int(words[3])
            elif words:
                raise SystemExit(f"{path}: cannot read `{line.strip()}`")
    return known


def oversized(roots, skipped):
    """Yields (kind, path, name, line, size, limit) for every item over its limit."""
    for path in rust_files(roots, skipped):
        with open(path, encoding="utf-8") as source:
            lines = source.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) > FILE_MAX:
            yield "file", path, "", 1, len(lines), FILE_MAX
        for name, line, length in function_lengths(lines):
            if length > FN_MAX:
                yield "fn", path, name, line, length, FN_MAX


def main():
    roots, skipped, known_path = parse_args(sys.argv[1:])
    known = read_known(known_path)
    over = failed = within_known = 0
    seen = set()
    for kind, path, name, line, size, limit in oversized(roots, skipped):
        key = (kind, os.path.normpath(path), name)
        where = f"{path}: {size} lines" if kind == "file" else f"{path}:{line} {name}: {size} lines"
        allowed = known.get(key)
        seen.add(key)
        over += 1
        if allowed is None:
            print(f"{kind:4} {where} (limit {limit})")
            failed += 1
        elif size > allowed:
            print(f"{kind:4} {where}, grew past the {allowed} of {known_path} (limit {limit})")
            failed += 1
        else:
            within_known += 1
    for key in sorted(set(known) - seen):
        kind, path, name = key
        print(f"{kind:4} {path} {name}: within the limit now; remove its line from {known_path}")
        failed += 1
    print(f"{over} over the limits, {within_known} of them known, {failed} failing")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
