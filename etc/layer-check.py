#!/usr/bin/env python3
"""The worker's layering rules (issue 31), checked as a ratchet.

Rules, over proxy/src without its tests (files under a tests/ folder, *_tests.rs, and the
`#[cfg(test)] mod tests` at the end of a file):
  crlf     a "\\r\\n" literal outside the HTTP/1 codec files (CODEC_FILES): HTTP/1 text built
           by glue code instead of a codec.
  impl     an `impl Worker` block outside worker/mod.rs: a step that takes the whole worker.
  layer    an import from worker/client/ or worker/upstream/ into worker/exchange/ beyond the
           id types (the exchange pipeline receives the parts it touches as parameters).
  owner    worker/client/ or worker/upstream/ naming `Worker` or a step of the exchange
           pipeline (PIPELINE): the connections' owners return what happens next to the loop
           and never call into the pipeline.

Today's counts per file are in etc/layer-baseline.txt (`rule count file`). The check fails
when a file has more than its baseline or a rule appears in a file the baseline does not name;
it names the lines. Fewer than the baseline passes and says so: lower the baseline in the same
commit (`etc/layer-check.py --write`). The redesign brings every count to 0.

Usage: etc/layer-check.py            (tests/run.sh)
       etc/layer-check.py --write    (rewrite the baseline from the tree)
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = "proxy/src"
BASELINE = "etc/layer-baseline.txt"
# The HTTP/1 codec: the only code that may write HTTP/1 text.
CODEC_FILES = {"proxy/src/worker/h1.rs"}
ID_TYPES = re.compile(r"\b(ClientId|UpstreamId|ExchangeId)\b")
OWNERS = ("proxy/src/worker/client/", "proxy/src/worker/upstream/")
# The modules of the exchange pipeline. In an owner's file: `Worker`, a path through one of
# them (`super::super::route::`, `crate::worker::finish::`), or one of them named anywhere in
# a `use` statement (grouped imports, continuation lines).
PIPELINE_MODULES = (
    r"(route|forward|finish|response|caching|h2_serve|sticky_hook|background|fill|"
    r"request_body)"
)
PIPELINE_PATH = re.compile(
    r"\bWorker\b|\b" + PIPELINE_MODULES + r"::|super::super::\*|crate::worker::\*"
)
PIPELINE_NAME = re.compile(r"\b" + PIPELINE_MODULES + r"\b")


def production_lines(path):
    """The file's lines up to its `#[cfg(test)]` module, numbered from 1."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    for number, line in enumerate(lines, 1):
        if line.startswith("#[cfg(test)]"):
            return
        yield number, line


def source_files():
    for folder, _, files in os.walk(os.path.join(ROOT, SRC)):
        rel_folder = os.path.relpath(folder, ROOT)
        if "/tests" in rel_folder + "/" and rel_folder.split("/")[-1] == "tests":
            continue
        for name in sorted(files):
            if name.endswith(".rs") and not name.endswith("_tests.rs"):
                yield os.path.join(rel_folder, name)


def findings():
    """(rule, file, line number) for every place a rule is broken."""
    for path in source_files():
        in_use = False
        for number, line in production_lines(path):
            if line.lstrip().startswith("//"):
                continue
            in_use = in_use or re.match(r"\s*(pub(\([^)]*\))?\s+)?use\b", line) is not None
            if path.startswith(OWNERS) and (
                PIPELINE_PATH.search(line) or (in_use and PIPELINE_NAME.search(line))
            ):
                yield "owner", path, number
            if in_use and ";" in line:
                in_use = False
            if "\\r\\n" in line and path not in CODEC_FILES:
                yield "crlf", path, number
            if re.match(r"^impl Worker\b", line) and path != "proxy/src/worker/mod.rs":
                yield "impl", path, number
            if (
                path.startswith("proxy/src/worker/exchange/")
                and re.match(r"\s*use\s+.*\b(client|upstream)::", line)
                and not ID_TYPES.search(line)
            ):
                yield "layer", path, number


def main():
    found = list(findings())
    counts = {}
    for rule, path, _ in found:
        counts[(rule, path)] = counts.get((rule, path), 0) + 1
    baseline_path = os.path.join(ROOT, BASELINE)
    if "--write" in sys.argv[1:]:
        with open(baseline_path, "w", encoding="utf-8") as f:
            for (rule, path), n in sorted(counts.items()):
                f.write(f"{rule} {n} {path}\n")
        print(f"wrote {BASELINE}: {sum(counts.values())} places in {len(counts)} entries")
        return 0
    baseline = {}
    with open(baseline_path, encoding="utf-8") as f:
        for line in f:
            rule, n, path = line.split()
            baseline[(rule, path)] = int(n)
    worse = [(k, n) for k, n in counts.items() if n > baseline.get(k, 0)]
    better = [(k, n) for k, n in baseline.items() if counts.get(k, 0) < n]
    for (rule, path), n in sorted(worse):
        lines = [str(num) for r, p, num in found if (r, p) == (rule, path)]
        print(f"{rule}: {path} has {n} (baseline {baseline.get((rule, path), 0)}), "
              f"lines {', '.join(lines)}")
    for (rule, path), n in sorted(better):
        print(f"{rule}: {path} down to {counts.get((rule, path), 0)} from {n}: "
              f"lower the baseline (etc/layer-check.py --write)")
    total = sum(counts.values())
    print(f"{total} places left to the redesign ({', '.join(f'{r} {sum(n for (q, _), n in counts.items() if q == r)}' for r in ('crlf', 'impl', 'layer', 'owner'))})")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
