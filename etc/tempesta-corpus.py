#!/usr/bin/env python3
"""Loads every Tempesta configuration written in a tempesta-test checkout with `proxy -t`
and reports which load and which are refused, and why (issue 35: "a real Tempesta config
loads as it is; a config Tempesta refuses is refused").

    etc/tempesta-corpus.py PATH-TO-tempesta-test [--proxy target/release/proxy] [--list]

The checkout is not ours and is not copied: the configurations are read from it where it
is, at run time. A configuration counts when it is a string the test file writes out
whole: a literal (or literals joined with `+`) under a "config" key, or passed to
`set_defconfig`; f-strings and configurations assembled at run time are counted as
skipped. The framework's `${...}` variables are filled with loopback addresses and a
self-signed certificate. Whether Tempesta accepts a given configuration is not known from
the text alone (a test may expect the start to fail), so the refusals are listed with
their message for a reader to judge.
"""

import argparse
import ast
import collections
import pathlib
import re
import subprocess
import sys
import tempfile

VARIABLES = {
    "server_ip": "127.0.0.1",
    "tempesta_ip": "127.0.0.1",
    "tempesta_ipv6": "::1",
    "server_ipv6": "::1",
    "client_ip": "127.0.0.2",
    "port": "8000",
    "pid": "1",
    "server_keepalive_timeout": "60",
    "server_keepalive_requests": "100",
    "delay": "1",
    "server_resources": "",
    "sched_opts": "",
    "sched_global_opt": "",
    "sched_global_late_opt": "",
    "sched_custom_opt": "",
}


TEMPLATE = re.compile(r"%\(|%s|(?<!\$)\{[a-z_]+\}")


def folded(node):
    """The string a node spells when it is literals joined by `+`; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = folded(node.left), folded(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def tempesta_dicts(tree):
    """The dicts assigned to a name starting with `tempesta` (`tempesta = {"config": ...}`),
    not those of the backends (nginx's configurations have a "config" key too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            names = [getattr(t, "id", getattr(t, "attr", "")) for t in node.targets]
            if any(name.startswith("tempesta") for name in names):
                yield node.value


def configurations(path):
    """(line, text or None) of every configuration in one test file (None: not a literal)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError):
        return
    for node in tempesta_dicts(tree):
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and key.value == "config":
                yield value.lineno, folded(value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name == "set_defconfig" and node.args:
                yield node.args[0].lineno, folded(node.args[0])


def filled(text, workdir):
    variables = dict(VARIABLES, tempesta_workdir=str(workdir), server_workdir=str(workdir))
    variables["tfw_logger_logger_config"] = str(workdir / "logger.json")
    for name, value in variables.items():
        text = text.replace("${" + name + "}", value)
    return text


def self_signed(workdir):
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "30", "-subj", "/CN=tempesta-tech.com",
         "-addext", "subjectAltName=DNS:tempesta-tech.com,DNS:localhost",
         "-keyout", str(workdir / "tempesta.key"), "-out", str(workdir / "tempesta.crt")],
        check=True, capture_output=True)


def refuses_start(function):
    """Whether a test method expects Tempesta not to start (`ProcessBadExitStatusException`)."""
    return any(
        (isinstance(n, ast.Name) and n.id == "ProcessBadExitStatusException")
        or (isinstance(n, ast.Attribute) and n.attr == "ProcessBadExitStatusException")
        for n in ast.walk(function)
    )


def parameterized(path):
    """(line, configuration, expected to load) of every parameterized test that appends a
    literal fragment to its class's literal configuration (`Parameterize.expand([Param(...,
    config="...")])` with a `*update_tempesta_config(fragment)` that appends it): the cases
    where the tests say what Tempesta does, refusals included."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError):
        return
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        bases = [folded(v) for d in tempesta_dicts(cls) for k, v in zip(d.keys, d.values)
                 if isinstance(k, ast.Constant) and k.value == "config"]
        if len(bases) != 1 or bases[0] is None or TEMPLATE.search(bases[0]):
            continue
        for function in (n for n in cls.body if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)):
            appends = any(getattr(c.func, "attr", "").endswith("update_tempesta_config")
                          for c in ast.walk(function) if isinstance(c, ast.Call))
            expands = [d for d in function.decorator_list
                       if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "expand"]
            if not appends or not expands or not expands[0].args:
                continue
            # A test that refuses a configuration written in its own body (and loads its
            # parameters around it) says nothing of the parameters alone.
            own = [n for n in ast.walk(function) if isinstance(n, ast.Assign)
                   and (folded(n.value) or "").count(";") + (folded(n.value) or "").count("{")]
            if own and refuses_start(function):
                continue
            for param in ast.walk(expands[0].args[0]):
                if not isinstance(param, ast.Call):
                    continue
                for kw in param.keywords:
                    fragment = folded(kw.value)
                    if kw.arg != "name" and fragment and ";" in fragment:
                        yield kw.value.lineno, bases[0] + fragment, not refuses_start(function)


def fixtures(text, workdir):
    """Creates the files under the working directory a configuration names, as the tests'
    setup does: certificates and keys from the self-signed pair, other files empty."""
    for name in re.findall(r"\$\{tempesta_workdir\}/([A-Za-z0-9_.-]+)", text):
        target = workdir / name
        if target.exists():
            continue
        if name.endswith((".crt", ".pem")):
            target.write_bytes((workdir / "tempesta.crt").read_bytes())
        elif name.endswith(".key"):
            target.write_bytes((workdir / "tempesta.key").read_bytes())
        else:
            target.write_text("")


def judge(proxy, text, workdir):
    """(loaded, first line of the refusal)."""
    conf = workdir / "tempesta.conf"
    conf.write_text(text)
    try:
        run = subprocess.run([proxy, "-t", "-c", str(conf)], capture_output=True,
                             text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False, "proxy -t did not finish within 20 s"
    if run.returncode == 0:
        return True, ""
    lines = [l for l in (run.stderr + run.stdout).splitlines() if l.strip()]
    return False, lines[0] if lines else f"exit {run.returncode}, no message"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=pathlib.Path)
    parser.add_argument("--proxy", default="target/release/proxy")
    parser.add_argument("--list", action="store_true", help="print every refusal")
    args = parser.parse_args()
    tests = args.checkout / "tests"
    if not tests.is_dir():
        sys.exit(f"{args.checkout}: no tests/ folder: give the path of a tempesta-test checkout")
    if not pathlib.Path(args.proxy).is_file():
        sys.exit(f"{args.proxy}: no proxy binary (cargo build --release -p proxy)")
    counts = collections.Counter()
    reasons = collections.Counter()
    refusals = []
    differing = []
    with tempfile.TemporaryDirectory(prefix="tempesta-corpus-") as tmp:
        workdir = pathlib.Path(tmp)
        self_signed(workdir)
        (workdir / "logger.json").write_text("{}\n")
        for path in sorted(tests.rglob("*.py")):
            for line, text in configurations(path):
                # A %- or format-template, or a file tempesta.sh includes, is completed at
                # run time.
                if text is None or TEMPLATE.search(text) or "!include" in text:
                    counts["skipped (built at run time)"] += 1
                    continue
                fixtures(text, workdir)
                loaded, why = judge(args.proxy, filled(text, workdir), workdir)
                counts["loaded" if loaded else "refused"] += 1
                if not loaded:
                    where = f"{path.relative_to(args.checkout)}:{line}"
                    refusals.append((where, why))
                    # The message without its position, to group alike refusals.
                    reasons[why.split(": ", 2)[-1][:100]] += 1
        for path in sorted(tests.rglob("*.py")):
            for line, text, expected in parameterized(path):
                if TEMPLATE.search(text) or "!include" in text:
                    continue
                fixtures(text, workdir)
                loaded, why = judge(args.proxy, filled(text, workdir), workdir)
                agrees = loaded == expected
                counts[("agree" if agrees else "differ") + (" load" if expected else " refuse")] += 1
                if not agrees or args.list:
                    where = f"{path.relative_to(args.checkout)}:{line}"
                    verdict = "loads" if loaded else why
                    differing.append((agrees, where, "Tempesta " + ("loads" if expected else "refuses"), verdict))
    total = counts["loaded"] + counts["refused"]
    print(f"{total} configurations read: {counts['loaded']} loaded, {counts['refused']} refused; "
          f"{counts['skipped (built at run time)']} built at run time, skipped")
    print("\nrefusals by message:")
    for why, n in reasons.most_common():
        print(f"{n:5}  {why}")
    print(f"\nparameterized cases (class configuration + a test's fragment): "
          f"{counts['agree load']} load as in Tempesta, {counts['agree refuse']} refused as in "
          f"Tempesta, {counts['differ load']} refused that Tempesta loads, "
          f"{counts['differ refuse']} loaded that Tempesta refuses")
    for agrees, where, tempesta, verdict in differing:
        if not agrees:
            print(f"  differs: {where}: {tempesta}; here: {verdict}")
    if args.list:
        print("\nevery refusal:")
        for where, why in refusals:
            print(f"{where}: {why}")
        for agrees, where, tempesta, verdict in differing:
            if agrees:
                print(f"{where}: {tempesta}; here: {verdict}")


if __name__ == "__main__":
    main()
