#!/usr/bin/env python3
"""Lists the Rust functions over a line limit and the files over a line limit.

The team's size rule (DESIGN.md "Layout"): files under ~600 lines, functions under ~80.
Usage: etc/size-report.py [DIR ...] [--except PATH ...]
  (default: proxy/src; limits via FN_MAX and FILE_MAX; `--except` skips a file or a directory,
  for what is checked elsewhere or not brought under the rule yet)

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
    """(directories, skipped paths) from `DIR ... [--except PATH ...]`."""
    roots, skipped = [], []
    target = roots
    for arg in args:
        if arg == "--except":
            target = skipped
        else:
            target.append(arg)
    return roots or ["proxy/src"], skipped


def main():
    roots, skipped = parse_args(sys.argv[1:])
    over = 0
    for path in rust_files(roots, skipped):
        with open(path, encoding="utf-8") as source:
            lines = source.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) > FILE_MAX:
            print(f"file {path}: {len(lines)} lines (limit {FILE_MAX})")
            over += 1
        for name, line, length in function_lengths(lines):
            if length > FN_MAX:
                print(f"fn   {path}:{line} {name}: {length} lines (limit {FN_MAX})")
                over += 1
    print(f"{over} over the limits")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
