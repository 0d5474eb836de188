#!/usr/bin/env python3
"""Helpers for benches/h2flood/run.sh (Python 3 standard library only).

    h2fstat.py pair --meta JSON --base OUT --base-log LOG --flood OUT --flood-log LOG
                    --attack JSON --out FILE
        One attack against one server: the legitimate h2load run without the flood (OUT,
        its --log-file LOG) and during it, and http-perf --h2-flood's JSON report. Appends
        one JSON line to FILE and prints a summary line on stderr. Exit 3 when a report is
        missing or unusable.

    h2fstat.py report --results FILE --machine JSON --out-json F --out-md F
        The table (attack x server): server RSS growth, legitimate req/s and p99 during
        the flood relative to without it, how the flooding connections ended; the targets
        (RSS growth <= 16 MiB, legitimate throughput >= 80 %, both at least as good as
        nginx). Writes F (JSON) and F (Markdown) and prints the Markdown.
"""
import argparse
import json
import re
import sys

RSS_TARGET = 16 * 1024 * 1024
THROUGHPUT_TARGET = 0.80
SERVERS = ["proxy", "nginx"]


def parse_h2load(path):
    """req/s, succeeded, failed and errored of h2load's text report."""
    with open(path, errors="replace") as f:
        text = f.read()

    def num(pattern):
        m = re.search(pattern, text)
        if not m:
            raise ValueError(f"{path}: h2load report without {pattern!r}")
        return float(m.group(1))

    return {
        "req_per_sec": num(r"finished in [\d.]+m?s, ([\d.]+) req/s"),
        "succeeded": int(num(r"(\d+) succeeded")),
        "failed": int(num(r"(\d+) failed")),
        "errored": int(num(r"(\d+) errored")),
        "non_2xx": int(num(r"status codes: \d+ 2xx, (\d+) 3xx") + num(r"(\d+) 4xx")
                       + num(r"(\d+) 5xx")),
    }


def p99_ms(log):
    """The 99th percentile of h2load's per-request times (--log-file: start, status, us)."""
    times = []
    with open(log, errors="replace") as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3 and parts[2].strip().isdigit():
                times.append(int(parts[2]))
    if not times:
        return None
    times.sort()
    return times[min(len(times) - 1, int(len(times) * 0.99))] / 1000.0


def legit(out, log):
    r = parse_h2load(out)
    r["p99_ms"] = p99_ms(log)
    return r


def cmd_pair(a):
    meta = json.loads(a.meta)
    try:
        base = legit(a.base, a.base_log)
        flood = legit(a.flood, a.flood_log)
        with open(a.attack) as f:
            attack = json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError) as e:
        print(f"h2flood: {meta['server']} {meta['attack_kind']}: unusable report: {e}", file=sys.stderr)
        return 3
    mem = attack.get("server_memory") or {}
    rec = dict(meta)
    rec.update({
        "baseline": base,
        "flood": flood,
        "attack": {k: v for k, v in attack.items() if k != "server_memory"},
        "rss_start_bytes": mem.get("start_bytes"),
        "rss_peak_bytes": mem.get("peak_bytes"),
        "rss_growth_bytes": mem.get("growth_bytes"),
        "server_vanished": mem.get("vanished", False),
        # The server's share of its core during the flood: near 1, the server was the
        # bottleneck; well below, the clients' core (shared by h2load and the flooder) was.
        "server_cpu_util": (mem["cpu_secs"] / mem["wall_secs"]
                            if mem.get("wall_secs") else None),
        "rss_samples": mem.get("samples", [])[::5],
        "throughput_ratio": (flood["req_per_sec"] / base["req_per_sec"]
                             if base["req_per_sec"] else None),
        "p99_ratio": (flood["p99_ms"] / base["p99_ms"]
                      if flood["p99_ms"] and base["p99_ms"] else None),
    })
    with open(a.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    g = rec["rss_growth_bytes"]
    tr = rec["throughput_ratio"]
    print(f"h2flood: {meta['server']:5} {meta['attack_kind']:14} rss +{(g or 0) / 1048576:.1f} MiB, "
          f"legit {base['req_per_sec']:.0f} -> {flood['req_per_sec']:.0f} req/s "
          f"({(tr or 0) * 100:.0f} %), p99 {base['p99_ms']} -> {flood['p99_ms']} ms, "
          f"flooder: {attack.get('closed')} closed, GOAWAY {attack.get('goaways')}",
          file=sys.stderr)
    return 0


def fmt_mib(b):
    return "-" if b is None else f"{b / 1048576:.1f} MiB"


def fmt_pct(r):
    return "-" if r is None else f"{r * 100:.0f} %"


def ended(att):
    """How the flooding connections ended, in a few words."""
    goaways = ", ".join(f"{k} x{v}" for k, v in sorted(att.get("goaways", {}).items()))
    closed = att.get("closed", 0)
    parts = [f"{closed} closed"]
    med = (att.get("closed_ms") or {}).get("median")
    if med is not None:
        parts.append(f"median {med} ms")
    if goaways:
        parts.append(f"GOAWAY {goaways}")
    rst = att.get("resets") or {}
    if rst:
        parts.append("RST " + ", ".join(f"{k} x{v}" for k, v in sorted(rst.items())))
    statuses = att.get("responses") or {}
    if statuses:
        parts.append("status " + ", ".join(f"{k} x{v}" for k, v in sorted(statuses.items())))
    return "; ".join(parts)


def verdicts(by):
    """Per attack: which targets the proxy reached (None when a server is missing)."""
    out = {}
    for attack, servers in by.items():
        p, n = servers.get("proxy"), servers.get("nginx")
        if not p:
            continue
        pg, pt = p["rss_growth_bytes"], p["throughput_ratio"]
        v = {
            "rss_le_16mib": pg is not None and pg <= RSS_TARGET,
            "throughput_ge_80pct": pt is not None and pt >= THROUGHPUT_TARGET,
        }
        if n:
            ng, nt = n["rss_growth_bytes"], n["throughput_ratio"]
            v["rss_le_nginx"] = pg is not None and ng is not None and pg <= max(ng, 1 << 20)
            v["throughput_ge_nginx"] = (pt is not None and nt is not None
                                        and pt >= nt - 0.05)
        out[attack] = v
    return out


def cmd_report(a):
    recs = []
    with open(a.results) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    by = {}
    for r in recs:
        by.setdefault(r["attack_kind"], {})[r["server"]] = r
    v = verdicts(by)
    lines = [
        "| attack | server | RSS growth | legit req/s: base → flood | ratio | p99 ms: base → flood | server CPU | flooding connections |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for attack, servers in by.items():
        for s in SERVERS:
            r = servers.get(s)
            if not r:
                continue
            b, fl = r["baseline"], r["flood"]
            lines.append(
                f"| {attack} | {s} | {fmt_mib(r['rss_growth_bytes'])} | "
                f"{b['req_per_sec']:.0f} → {fl['req_per_sec']:.0f} | {fmt_pct(r['throughput_ratio'])} | "
                f"{b['p99_ms']} → {fl['p99_ms']} | {fmt_pct(r.get('server_cpu_util'))} | "
                f"{ended(r['attack'])} |")
    lines.append("")
    lines.append("| attack | proxy RSS ≤ 16 MiB | proxy legit ≥ 80 % | RSS ≤ nginx's | legit ≥ nginx's |")
    lines.append("|---|---|---|---|---|")
    mark = {True: "yes", False: "**no**", None: "-"}
    for attack, t in v.items():
        lines.append(f"| {attack} | {mark[t['rss_le_16mib']]} | {mark[t['throughput_ge_80pct']]} | "
                     f"{mark[t.get('rss_le_nginx')]} | {mark[t.get('throughput_ge_nginx')]} |")
    md = "\n".join(lines) + "\n"
    machine = json.loads(a.machine)
    with open(a.out_json, "w") as f:
        json.dump({"machine": machine, "targets": v, "results": recs}, f, indent=1)
        f.write("\n")
    with open(a.out_md, "w") as f:
        f.write(f"Machine: {machine.get('cpu')}, {machine.get('cores')} cores, load average "
                f"{machine.get('loadavg_start')} at the start, {machine.get('loadavg_end')} at "
                f"the end; {machine.get('command')}\n\n")
        f.write(md)
    print(md, end="")
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="sub", required=True)
    p = sub.add_parser("pair")
    for k in ("meta", "base", "base-log", "flood", "flood-log", "attack", "out"):
        p.add_argument("--" + k, required=True)
    r = sub.add_parser("report")
    for k in ("results", "machine", "out-json", "out-md"):
        r.add_argument("--" + k, required=True)
    a = ap.parse_args()
    return cmd_pair(a) if a.sub == "pair" else cmd_report(a)


if __name__ == "__main__":
    sys.exit(main())
