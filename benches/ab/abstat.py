#!/usr/bin/env python3
"""Helpers for benches/ab/run.sh (Python 3 standard library only).

    abstat.py measure --pid PID --out FILE --meta JSON -- CMD...
        Runs CMD (the benchmark client), reading the CPU seconds of the server's
        whole process tree (PID and descendants, /proc/*/stat utime+stime) before
        and after it, and appends one JSON line to FILE: the meta fields, the
        client's exit status, wall seconds, server CPU seconds and the client's
        JSON report (its stdout). Prints a one-line summary on stderr.
        Exit status: the client's, or 3 if its report is unusable or shows errors.
        CMD runs in a process group of its own, which a TERM, INT or HUP of this
        process kills (SIGKILL) before it exits: a benchmark stopped (timeout, kill,
        Ctrl-C) leaves no client running.

    abstat.py report --results FILE --machine JSON --out-json F --out-svg F
        Medians of the runs per row and server, the advantages, the bound;
        writes F (JSON) and the SVG chart, prints the Markdown table on stdout.

    abstat.py machine --load "1 5 15" --command CMD ...
        Prints the machine section as JSON.
"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

import latency

SERVERS = ["proxy", "nginx_static", "nginx_cache", "haproxy", "trafficserver", "caddy",
           "caddy_proxy"]
BASELINES = SERVERS[1:]
COLORS = {"nginx_static": "#4c78a8", "nginx_cache": "#f58518", "haproxy": "#54a24b",
          "trafficserver": "#b279a2", "caddy": "#e45756", "caddy_proxy": "#72b7b2"}
# With AB_PROXY_OPENSSL=1: the proxy with `tls_ktls off` (OpenSSL's record layer).
OPENSSL_PROXY = "proxy_openssl"
# A server at or above this share of its core is the bottleneck of the run.
SERVER_BOUND_UTIL = 0.90

ROW_UNITS = {
    "handshakes_full_tls12": "handshakes/s",
    "handshakes_full_tls13": "handshakes/s",
    "handshakes_resumed_tls13": "handshakes/s",
    "keepalive_10b_rps": "req/s",
    "keepalive_26k_rps": "req/s",
    "close_10b_rps": "req/s",
    "close_26k_rps": "req/s",
    "h2_10b_rps": "req/s",
    "h2_26k_rps": "req/s",
    "h2_1024c_rps": "req/s",
    "h3_10b_rps": "req/s",
    "h3_26k_rps": "req/s",
    "idle_tls_conn_bytes": "bytes/conn",
    "h3_idle_conn_bytes": "bytes/conn",
}
ROW_UNITS.update({name: latency.UNIT for name in latency.ROWS})

CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- /proc ------------------------------------------------------------------

def _children(pid):
    """Direct children of pid, through /proc/PID/task/*/children (or a /proc scan)."""
    kids = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids.update(int(x) for x in f.read().split())
            except OSError:
                pass
        return kids
    except OSError:
        return kids


def tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _stat_cpu(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0
    # Fields after the command (which may hold spaces) are split after ')'.
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])  # utime, stime (fields 14, 15)


def tree_cpu_secs(pid):
    return sum(_stat_cpu(p) for p in tree(pid)) / CLK_TCK


def _rss_bytes(pid):
    """VmRSS + VmSwap of one process, as http-perf's --server-pid counts it."""
    total = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmSwap:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return total


def tree_rss_bytes(pid):
    return sum(_rss_bytes(p) for p in tree(pid))


# Server memory during a hold run: sampled this often, and a sample is "idle" when the
# server's whole tree used no CPU tick (1/CLK_TCK s) since the previous one.
HOLD_SAMPLE_S = 0.2
IDLE_MIN_SAMPLES = 3


def idle_memory(samples):
    """The server's memory once it is idle with every connection open: the median RSS of
    the longest run of consecutive idle samples after the first busy one (the ramp). Before
    the ramp the server is fresh; the hold (5 s) is the longest rest after it, longer than
    any pause in the ramp or after the request round. None if no rest lasted
    IDLE_MIN_SAMPLES samples."""
    busy_seen = False
    run, best = [], []
    for (_, cpu0, _), (_, cpu1, rss) in zip(samples, samples[1:]):
        if cpu1 - cpu0 > 0:
            busy_seen = True
            run = []
        elif busy_seen:
            run.append(rss)
            if len(run) > len(best):
                best = list(run)
    if len(best) < IDLE_MIN_SAMPLES:
        return None
    return int(statistics.median(best))


def start_client(cmd):
    """Starts the client in a process group of its own (`timeout` makes its own group
    anyway, out of reach of a signal to ours), and makes a TERM, INT or HUP of this process
    kill that group before exiting."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)

    def stop(signum, _frame):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        sys.exit(128 + signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop)
    return proc


def run_client(cmd):
    """Runs the client to its end (start_client): its exit status and output."""
    proc = start_client(cmd)
    stdout, stderr = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def run_sampled(cmd, pid):
    """Runs cmd while sampling the server tree's (time, CPU ticks, RSS)."""
    samples = []
    proc = start_client(cmd)
    out = []

    def drain():
        out.append(proc.communicate())

    import threading
    reader = threading.Thread(target=drain)
    reader.start()
    while reader.is_alive():
        ticks = sum(_stat_cpu(p) for p in tree(pid))
        samples.append((time.monotonic(), ticks, tree_rss_bytes(pid)))
        reader.join(HOLD_SAMPLE_S)
    stdout, stderr = out[0]
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), samples


# --- measure ----------------------------------------------------------------

def _check(meta, rep, wall):
    """Returns (ops, rate, problems) from a client report."""
    problems = []
    tool = meta["tool"]
    if tool == "tls-perf":
        ops = rep["handshakes"]
        rate = rep["handshakes_per_sec"]["avg"]
        if rep.get("errors_total", 0) > 0:
            problems.append(f"tls-perf errors {rep['errors']}")
        if rep.get("end") not in ("time", "count"):
            problems.append(f"tls-perf ended by {rep.get('end')}")
        if meta.get("resumed_expected"):
            share = rep.get("resumed", 0) / max(ops, 1)
            if share < 0.5:
                problems.append(f"only {share:.0%} of handshakes resumed")
        elif rep.get("resumed", 0) > 0:
            problems.append(f"{rep['resumed']} handshakes resumed in a full-handshake row")
    elif tool == "http-perf":
        ops = rep["requests"]
        rate = rep["requests_per_sec"]
        errs = rep.get("errors", {})
        nerr = sum(errs.values()) if isinstance(errs, dict) else 0
        if nerr > 0:
            problems.append(f"http-perf socket errors {errs}")
        if rep.get("non_2xx_3xx", 0) > 0:
            problems.append(f"http-perf non-2xx/3xx responses: {rep['non_2xx_3xx']}")
        if ops == 0:
            problems.append("http-perf completed no request")
        elif meta.get("h3"):
            # http-perf --h3 counts the DATA payloads: exactly the page per response.
            if rep.get("body_bytes") != ops * meta.get("body_bytes", 0):
                problems.append(f"{rep.get('body_bytes')} body bytes in {ops} h3 responses, "
                                f"the page is {meta.get('body_bytes')}")
        elif meta.get("h2"):
            # HTTP/2 frames and HPACK: at least the whole page per response.
            if rep["bytes"] / ops < meta.get("body_bytes", 0):
                problems.append(f"{rep['bytes'] / ops:.0f} bytes per h2 response, the page is "
                                f"{meta.get('body_bytes')}")
        else:
            per = rep["bytes"] / ops
            want = meta.get("resp_bytes") or meta.get("body_bytes", 0)
            # Every response must be the page the probe saw (status 200, the whole
            # body): a redirect or an error page has another size. A little slack
            # for headers whose values change length (Date is fixed-size; Age grows).
            if abs(per - want) > 64:
                problems.append(f"{per:.0f} bytes per response, the 200 page is {want} bytes")
    elif tool == "h2load":
        ops = rep["succeeded"]
        rate = rep["req_per_sec"]
        if rep["failed"] or rep["errored"]:
            problems.append(f"h2load: {rep['failed']} failed, {rep['errored']} errored")
        if rep["non_2xx"]:
            problems.append(f"h2load: {rep['non_2xx']} responses not 2xx")
        if ops == 0:
            problems.append("h2load completed no request")
        else:
            # h2load's data count includes the streams still in flight when the time is
            # up: at least the whole page per completed request.
            per = rep["data_bytes"] / ops
            want = meta.get("body_bytes", 0)
            if per < want:
                problems.append(f"{per:.0f} body bytes per response, the page is {want}")
    elif tool == "hold":
        # The value is the server's memory per connection once it is idle (all handshakes
        # done), measured here during the hold; http-perf's own figure is taken the moment
        # its ramp ends, when the server may still be finishing the last handshakes.
        srv = rep.get("server") or {}
        ops = rep.get("established", 0)
        rate = None
        if not rep.get("pass"):
            problems.append(f"http-perf --hold failed: {rep.get('failures')}")
        idle = meta.get("idle_rss_bytes")
        if srv.get("baseline_bytes") is None:
            problems.append("http-perf --hold reported no server memory")
        elif idle is None:
            problems.append("the server was never idle for "
                            f"{IDLE_MIN_SAMPLES * HOLD_SAMPLE_S:.1f} s after the ramp")
        elif ops:
            rate = max(idle - srv["baseline_bytes"], 0) // ops
    else:
        raise SystemExit(f"unknown tool {tool}")
    return ops, rate, problems


def parse_h2load(text):
    """The numbers of h2load's text report (it has no JSON output)."""
    import re

    def num(pattern):
        m = re.search(pattern, text)
        if not m:
            raise ValueError(f"h2load report without {pattern!r}")
        return float(m.group(1))

    two = num(r"status codes: (\d+) 2xx")
    three = num(r"status codes: \d+ 2xx, (\d+) 3xx")
    four = num(r"(\d+) 4xx")
    five = num(r"(\d+) 5xx")
    return {
        "succeeded": int(num(r"(\d+) succeeded")),
        "failed": int(num(r"(\d+) failed")),
        "errored": int(num(r"(\d+) errored")),
        "req_per_sec": num(r"finished in [\d.]+m?s, ([\d.]+) req/s"),
        "non_2xx": int(three + four + five),
        "ok_2xx": int(two),
        "data_bytes": num(r"\((\d+)\) data"),
        "text": text[-2000:],
    }


def cmd_measure(a):
    meta = json.loads(a.meta)
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    cpu0 = tree_cpu_secs(a.pid)
    t0 = time.monotonic()
    if meta["tool"] == "hold":
        p, samples = run_sampled(cmd, a.pid)
        meta["idle_rss_bytes"] = idle_memory(samples)
    else:
        p = run_client(cmd)
    wall = time.monotonic() - t0
    cpu1 = tree_cpu_secs(a.pid)
    alive = os.path.exists(f"/proc/{a.pid}")
    rec = dict(meta)
    rec.update(rc=p.returncode, wall_s=round(wall, 3), server_cpu_s=round(cpu1 - cpu0, 3),
               server_alive=alive, time=time.strftime("%H:%M:%S"),
               loadavg=open("/proc/loadavg").read().split()[:3])
    problems = []
    rep = None
    try:
        rep = parse_h2load(p.stdout) if meta["tool"] == "h2load" else json.loads(p.stdout)
    except ValueError:
        problems.append(f"no report from the client (exit {p.returncode})")
    if p.returncode not in (0,) and not (meta["tool"] == "hold" and p.returncode == 1):
        problems.append(f"client exit status {p.returncode}")
    if not alive:
        problems.append("the server died during the run")
    if rep is not None:
        ops, rate, probs = _check(meta, rep, wall)
        problems += probs
        if meta["row"] in latency.ROWS and not probs:
            rate, rec["latency"] = latency.check(meta, rep)
        rec.update(ops=ops, value=rate)
        if meta["tool"] != "hold" and ops:
            rec["cpu_s_per_1000"] = round(1000.0 * (cpu1 - cpu0) / ops, 5)
            # Share of one core (the server is pinned to one core).
            rec["server_util"] = round((cpu1 - cpu0) / wall, 3) if wall > 0 else None
        rec["report"] = rep
    rec["problems"] = problems
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    summary = (f"{meta['server']:12} {meta['row']:26} run {meta['rep']}: "
               f"value {rec.get('value')} ")
    if "cpu_s_per_1000" in rec:
        summary += f"cpu/1000 {rec['cpu_s_per_1000']}s util {rec['server_util']:.0%}"
    print(summary, file=sys.stderr)
    if problems:
        print("  PROBLEM: " + "; ".join(problems), file=sys.stderr)
        if p.stderr:
            print("  client stderr (tail):\n    " +
                  "\n    ".join(p.stderr.strip().splitlines()[-10:]), file=sys.stderr)
        return 3
    return 0


# --- probe ------------------------------------------------------------------

def cmd_probe(a):
    """One GET over TLS (SNI and Host a.host, connected to a.addr); checks the status
    is 200 and the body a.body bytes; prints the response's size (head + body).
    With --min-age N the response must carry an Age header of N seconds or more (a cache hit)."""
    import socket
    import ssl
    host, port = a.addr.rsplit(":", 1)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=a.host) as s:
            s.sendall(f"GET {a.path} HTTP/1.1\r\nHost: {a.host}\r\n\r\n".encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = lines[0].split(" ")[1] if " " in lines[0] else "?"
            clen = None
            age = None
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    clen = int(v.strip())
                if k.strip().lower() == "age" and v.strip().isdigit():
                    age = int(v.strip())
            while clen is not None and len(body) < clen:
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
    if status != "200" or clen != a.body or len(body) != a.body:
        print(f"ab: {a.addr} {a.path}: status {status}, Content-Length {clen}, "
              f"{len(body)} body bytes; want 200 and {a.body}\n{head.decode('latin-1')}",
              file=sys.stderr)
        return 1
    if a.min_age is not None and (age is None or age < a.min_age):
        print(f"ab: {a.addr} {a.path}: Age {age}, want {a.min_age} or more (a cache hit)\n"
              f"{head.decode('latin-1')}", file=sys.stderr)
        return 1
    print(len(head) + 4 + len(body))
    return 0


# --- report -----------------------------------------------------------------

def _median(xs):
    return statistics.median(xs) if xs else None


def _fmt(v, unit=""):
    if v is None:
        return "–"
    if unit == "ratio":
        return f"{v:.2f}"
    if abs(v) >= 100:
        return f"{v:,.0f}".replace(",", " ")
    return f"{v:.3g}"


def aggregate(records):
    rows = {}
    order = []
    failed = {}
    for r in records:
        key = r["row"]
        if key not in rows:
            rows[key] = {s: [] for s in SERVERS + [OPENSSL_PROXY]}
            order.append(key)
        if r.get("problems") or r.get("value") is None:
            failed.setdefault(key, {}).setdefault(r["server"], 0)
            failed[key][r["server"]] += 1
            continue
        rows[key][r["server"]].append(r)
    known = list(ROW_UNITS)
    order.sort(key=lambda k: known.index(k) if k in known else 99)
    out = []
    for name in order:
        runs = rows[name]
        unit = ROW_UNITS.get(name, "")
        row = {"name": name, "unit": unit, "runs": {}, "spread": {}, "advantage": {},
               "failed_runs": failed.get(name, {})}
        med_val, med_cpu, med_util = {}, {}, {}
        for s in SERVERS + [OPENSSL_PROXY]:
            vals = [r["value"] for r in runs[s]]
            row["runs"][s] = len(vals)
            med_val[s] = _median(vals)
            row[s] = med_val[s]
            row["spread"][s] = [min(vals), max(vals)] if vals else None
            cpus = [r["cpu_s_per_1000"] for r in runs[s] if "cpu_s_per_1000" in r]
            utils = [r["server_util"] for r in runs[s] if r.get("server_util") is not None]
            med_cpu[s] = _median(cpus)
            med_util[s] = _median(utils)
        if name in latency.ROWS:
            row["latency"] = latency.summarize(runs)
        if unit == latency.UNIT:
            # Lower is better: the peer's p99 over the proxy's.
            row["bound"] = "latency"
            row["cpu_s_per_1000"] = med_cpu
            row["server_core_util"] = med_util
            for b in BASELINES:
                p, n = med_val["proxy"], med_val[b]
                row["advantage"][b] = (n / p) if (p and n is not None) else None
        elif unit == "bytes/conn":
            row["bound"] = "memory"
            for b in BASELINES:
                p, n = med_val["proxy"], med_val[b]
                row["advantage"][b] = (n / p) if (p and n is not None) else None
        else:
            row["cpu_s_per_1000"] = med_cpu
            row["server_core_util"] = med_util
            utils = [u for u in med_util.values() if u is not None]
            server_bound = bool(utils) and min(utils) >= SERVER_BOUND_UTIL
            row["bound"] = ("server (all >=90% of a core): throughput" if server_bound
                            else "client (a server <90% of its core): CPU efficiency")
            for b in BASELINES:
                if server_bound:
                    p, n = med_val["proxy"], med_val[b]
                    row["advantage"][b] = (p / n) if (p is not None and n) else None
                else:
                    p, n = med_cpu["proxy"], med_cpu[b]
                    row["advantage"][b] = (n / p) if (p and n is not None) else None
        p, o = med_val["proxy"], med_val[OPENSSL_PROXY]
        if o is not None and p:
            # > 1: the proxy's record layer is better (less memory, more req/s, less CPU).
            if unit == "bytes/conn":
                row["records_vs_openssl"] = {"memory": o / p}
            else:
                pc, oc = med_cpu["proxy"], med_cpu[OPENSSL_PROXY]
                row["records_vs_openssl"] = {
                    "throughput": p / o,
                    "cpu_per_op": (oc / pc) if (pc and oc is not None) else None,
                }
        out.append(row)
    return out


def present(rows):
    """The servers (of SERVERS) with at least one run, ok or not, in some row."""
    return [s for s in SERVERS
            if any(r["runs"].get(s) or r["failed_runs"].get(s) for r in rows)]


def markdown(rows):
    servers = present(rows)
    bases = [b for b in BASELINES if b in servers] if "proxy" in servers else []
    short = " / ".join(s.replace("nginx_", "") for s in servers)
    lines = [
        "| row | unit | " + " | ".join(servers) + " | "
        + "".join(f"adv. vs {b} | " for b in bases)
        + f"compared by | server CPU s/1000 ops ({short}) | server core use ({short}) |",
        "|---|---|" + "---|" * (len(servers) + len(bases) + 3),
    ]
    for r in rows:
        def cell(s):
            v = _fmt(r[s])
            sp = r["spread"].get(s)
            if sp and r["runs"][s] > 1:
                v += f" ({_fmt(sp[0])}..{_fmt(sp[1])})"
            nf = r["failed_runs"].get(s)
            if nf:
                v += f" ⚠{nf} run(s) with errors"
            return v
        if r["bound"] == "memory":
            by, cpu, util = "memory (peer/proxy)", "–", "–"
        elif r["bound"] == "latency":
            by = "p99 (peer/proxy)"
            c, u = r["cpu_s_per_1000"], r["server_core_util"]
            cpu = " / ".join(_fmt(c[s]) for s in servers)
            util = " / ".join("–" if u[s] is None else f"{u[s]:.0%}" for s in servers)
        else:
            by = "throughput" if r["bound"].startswith("server") else "CPU/op (client-bound)"
            c = r["cpu_s_per_1000"]
            cpu = " / ".join(_fmt(c[s]) for s in servers)
            u = r["server_core_util"]
            util = " / ".join("–" if u[s] is None else f"{u[s]:.0%}" for s in servers)
        lines.append(
            f"| {r['name']} | {r['unit']} | " + " | ".join(cell(s) for s in servers) + " | "
            + "".join(f"{_fmt(r['advantage'].get(b), 'ratio')} | " for b in bases)
            + f"{by} | {cpu} | {util} |")
    table = latency.markdown(rows, servers)
    if table:
        lines.append(table)
    compared = [r for r in rows if "records_vs_openssl" in r]
    if compared:
        lines += ["", "The proxy's record layer (proxy) vs OpenSSL's (proxy_openssl, `tls_ktls off`), "
                  "same run; ratios > 1 favour the proxy's record layer:", "",
                  "| row | unit | proxy | proxy_openssl | memory ratio | throughput ratio | CPU/op ratio |",
                  "|---|---|---|---|---|---|---|"]
        for r in compared:
            v = r["records_vs_openssl"]
            lines.append(f"| {r['name']} | {r['unit']} | {_fmt(r['proxy'])} | {_fmt(r[OPENSSL_PROXY])} | "
                         f"{_fmt(v.get('memory'), 'ratio')} | {_fmt(v.get('throughput'), 'ratio')} | "
                         f"{_fmt(v.get('cpu_per_op'), 'ratio')} |")
    return "\n".join(lines)


def svg(rows, machine):
    """Horizontal bars: one per peer in the run (the proxy vs each) per row, log scale."""
    import math
    left, width, bar, gap, top = 230, 520, 11, 12, 58
    lo, hi = math.log10(0.25), math.log10(4.0)

    def x(v):
        v = min(max(v, 0.25), 4.0)
        return left + (math.log10(v) - lo) / (hi - lo) * width

    servers = present(rows)
    bases = [b for b in BASELINES if b in servers] or BASELINES[:2]
    height = top + len(rows) * (len(bases) * bar + gap) + 50
    colors = COLORS
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 70}" '
         f'height="{height}" font-family="sans-serif" font-size="12">',
         '<rect width="100%" height="100%" fill="white"/>',
         f'<text x="10" y="20" font-size="14" font-weight="bold">proxy advantage over each peer '
         f'(&gt;1 = proxy better; log scale)</text>',
         f'<text x="10" y="38" fill="#555">{machine.get("date", "")} · load avg at start '
         f'{machine.get("loadavg_start", "")} · {machine.get("mode", "")}</text>']
    for v in (0.25, 0.5, 1, 2, 4):
        xv = x(v)
        o.append(f'<line x1="{xv:.1f}" y1="{top - 6}" x2="{xv:.1f}" y2="{height - 40}" '
                 f'stroke="{"#000" if v == 1 else "#ddd"}" stroke-width="{2 if v == 1 else 1}"/>')
        o.append(f'<text x="{xv:.1f}" y="{height - 26}" text-anchor="middle">{v:g}</text>')
    y = top
    for r in rows:
        o.append(f'<text x="{left - 8}" y="{y + bar + 4}" text-anchor="end">{r["name"]}</text>')
        for b in bases:
            v = r["advantage"].get(b)
            if v is None:
                o.append(f'<text x="{x(1.0) + 4:.1f}" y="{y + bar - 2}" font-size="10" '
                         f'fill="#b00">n/a: no run without errors</text>')
            else:
                x0, x1 = sorted((x(1.0), x(v)))
                o.append(f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1):.1f}" '
                         f'height="{bar - 1}" fill="{colors[b]}"/>')
                o.append(f'<text x="{x(v) + (4 if v >= 1 else -4):.1f}" y="{y + bar - 2}" '
                         f'font-size="10" text-anchor="{"start" if v >= 1 else "end"}">'
                         f'{v:.2f}</text>')
            y += bar
        y += gap
    ly = height - 10
    for i, b in enumerate(bases):
        lx = left + 130 * i
        o.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colors[b]}"/>'
                 f'<text x="{lx + 14}" y="{ly}">vs {b}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def cmd_report(a):
    records = []
    with open(a.results) as f:
        for line in f:
            if line.strip():
                records.append(json.loads(line))
    machine = json.loads(a.machine)
    rows = aggregate(records)
    doc = {"machine": machine, "rows": rows,
           "failed_runs": [{k: r.get(k) for k in ("server", "row", "rep", "problems")}
                           for r in records if r.get("problems")]}
    with open(a.out_json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(a.out_svg, "w") as f:
        f.write(svg(rows, machine))
    print(markdown(rows))
    return 0


# --- syscalls (AB_SYSCALLS=1) -----------------------------------------------------

def read_syscall_counts(path):
    """`perf stat -x,` output: {syscall name: count}; `all` for raw_syscalls."""
    counts = {}
    with open(path) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) < 3 or not parts[0].isdigit():
                continue
            event = parts[2]
            name = "all" if event.startswith("raw_syscalls") else event.split("sys_enter_")[-1]
            counts[name] = int(parts[0])
    return counts


def cmd_syscalls(a):
    """Syscalls per request for every run that has a count file, median per row/server."""
    per = {}
    with open(a.results) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            path = os.path.join(a.dir, f"syscalls-{r['server']}-{r['row']}-{r['rep']}.csv")
            if not r.get("ops") or r.get("problems") or not os.path.exists(path):
                continue
            counts = read_syscall_counts(path)
            per.setdefault((r["row"], r["server"]), []).append(
                {k: v / r["ops"] for k, v in counts.items()})
    names = ["all", "read", "recvfrom", "write", "writev", "sendto", "sendmsg", "sendfile64",
             "epoll_wait", "epoll_ctl", "setsockopt", "accept4", "close", "openat",
             "newfstatat", "fstat", "futex"]
    seen = [n for n in names if any(n in run for runs in per.values() for run in runs)]
    print("Syscalls per request (median of the runs; `all` counts every syscall):")
    print()
    print("| row | server | " + " | ".join(seen) + " |")
    print("|---|---|" + "---|" * len(seen))
    for (row, server), runs in sorted(per.items()):
        cells = [f"{_median([run.get(n, 0.0) for run in runs]):.2f}" for n in seen]
        print(f"| {row} | {server} | " + " | ".join(cells) + " |")
    return 0


# --- machine ------------------------------------------------------------------

def cmd_machine(a):
    def sh(*c):
        try:
            return subprocess.run(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    cpu = None
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1048576:.1f} GiB"
    m = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu, "cores": os.cpu_count(), "memory": mem,
        "kernel": platform.release(), "os": sh("sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"),
        "nginx": (sh("nginx", "-v") or "").replace("nginx version: ", ""),
        "openssl": sh("openssl", "version"),
        "git": sh("git", "-C", a.root, "describe", "--always", "--dirty"),
        "loadavg_start": a.load,
        "mode": a.mode,
        "runs_per_row": a.runs,
        "command": a.command,
        "placement": a.placement,
        "client": a.client,
    }
    print(json.dumps(m))
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="sub", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--pid", type=int, required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--meta", required=True)
    m.add_argument("cmd", nargs=argparse.REMAINDER)
    r = sub.add_parser("report")
    r.add_argument("--results", required=True)
    r.add_argument("--machine", required=True)
    r.add_argument("--out-json", required=True)
    r.add_argument("--out-svg", required=True)
    pr = sub.add_parser("probe")
    for k in ("addr", "host", "path"):
        pr.add_argument("--" + k, required=True)
    pr.add_argument("--body", type=int, required=True)
    pr.add_argument("--min-age", type=int)
    sc = sub.add_parser("syscalls")
    sc.add_argument("--results", required=True)
    sc.add_argument("--dir", required=True)
    lr = sub.add_parser("latency-rate")
    lr.add_argument("--results", required=True)
    lr.add_argument("--row", required=True)
    c = sub.add_parser("cpu")
    c.add_argument("pid", type=int)
    mc = sub.add_parser("machine")
    for k in ("load", "mode", "command", "placement", "client", "root"):
        mc.add_argument("--" + k, default="")
    mc.add_argument("--runs", type=int, default=0)
    a = ap.parse_args()
    if a.sub == "measure":
        return cmd_measure(a)
    if a.sub == "report":
        return cmd_report(a)
    if a.sub == "probe":
        return cmd_probe(a)
    if a.sub == "syscalls":
        return cmd_syscalls(a)
    if a.sub == "latency-rate":
        found = latency.rate_for(a.results, a.row)
        if found is None:
            return 1
        print(f"{found[0]} {found[1]}")
        return 0
    if a.sub == "cpu":
        print(f"{tree_cpu_secs(a.pid):.2f}")
        return 0
    return cmd_machine(a)


if __name__ == "__main__":
    sys.exit(main())
