"""The fixed-rate latency rows of benches/ab (run.sh --latency), for abstat.py.

Each row sends a constant rate, a share of nginx's measured maximum for the same kind of
request (over HTTP/3, which Debian's nginx 1.22 does not serve, Caddy's), and reports every server's p50 / p99 / p99.9 latency: http-perf --rate, which
counts each request's latency from the time it was due (coordinated omission corrected,
as wrk2 does) and paces its sends with a timerfd. The row's value is the p99, in µs.
"""
import json
import statistics

# row: (the throughput row whose reference maximum sets the rate, share of it, protocol)
ROWS = {
    "latency_keepalive_10b_at50": ("keepalive_10b_rps", 0.5, "http1"),
    "latency_keepalive_10b_at80": ("keepalive_10b_rps", 0.8, "http1"),
    "latency_h2_10b_at50": ("h2_10b_rps", 0.5, "h2"),
    "latency_h2_10b_at80": ("h2_10b_rps", 0.8, "h2"),
    "latency_h3_10b_at50": ("h3_10b_rps", 0.5, "h3"),
    "latency_h3_10b_at80": ("h3_10b_rps", 0.8, "h3"),
}
UNIT = "µs p99"
PERCENTILES = ("p50", "p99", "p99.9")
# The server whose maximum sets the rate (the first of these with a run in this run), by
# protocol: nginx, or for HTTP/3 Caddy (the peer; at a share of the proxy's maximum, several
# times Caddy's, Caddy could not keep up at all).
RATE_FROM = {"http1": ("nginx_static", "nginx_cache"), "h2": ("nginx_static", "nginx_cache"),
             "h3": ("caddy", "caddy_proxy")}
# Below this share of the rate asked for, a server did not keep up: its latencies cover
# only what it answered, and the cell says so.
KEPT_UP = 0.95


def check(meta, rep):
    """(value, notes) of a latency run: the p99 in µs, and whether the server kept up."""
    pct = rep["latency_us"]["percentiles"]
    value = pct.get("p99")
    notes = {p: pct.get(p) for p in PERCENTILES}
    target = rep.get("rate_target") or meta.get("rate") or 0
    notes["rate_target"] = target
    notes["rate_achieved"] = rep.get("requests_per_sec")
    notes["unfinished"] = rep.get("rate_unfinished")
    notes["kept_up"] = bool(target) and rep.get("requests_per_sec", 0) >= KEPT_UP * target
    return value, notes


def summarize(runs):
    """Per server: the median of each percentile over its runs, and the rates."""
    out = {}
    for server, rs in runs.items():
        if not rs:
            continue
        lat = [r.get("latency") or {} for r in rs]
        med = {p: statistics.median([x[p] for x in lat if x.get(p) is not None] or [0])
               for p in PERCENTILES}
        med["rate_target"] = lat[0].get("rate_target")
        med["rate_achieved"] = statistics.median([x.get("rate_achieved") or 0 for x in lat])
        med["kept_up"] = all(x.get("kept_up") for x in lat)
        out[server] = med
    return out


def rate_for(results, row):
    """The rate of a latency row: its share of the reference server's median maximum (ok runs
    of the base row in the results file); None if no reference has such a run yet."""
    base, share, protocol = ROWS[row]
    by = {}
    with open(results) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("row") == base and not r.get("problems") and r.get("value"):
                by.setdefault(r["server"], []).append(r["value"])
    for server in RATE_FROM[protocol]:
        if by.get(server):
            return max(1, int(statistics.median(by[server]) * share)), server
    return None


def markdown(rows, servers):
    """The latency table: p50 / p99 / p99.9 in µs per server and row."""
    lat = [r for r in rows if r["name"] in ROWS and r.get("latency")]
    if not lat:
        return ""
    lines = ["", "Latency at a fixed rate (µs, p50 / p99 / p99.9, from each request's intended "
             "send time; median of the runs; ⚠ = the server answered under "
             f"{KEPT_UP:.0%} of the rate asked):", "",
             "| row | rate (req/s) | " + " | ".join(servers) + " |",
             "|---|---|" + "---|" * len(servers)]
    for r in lat:
        target = next((v["rate_target"] for v in r["latency"].values() if v.get("rate_target")), None)
        cells = []
        for s in servers:
            v = r["latency"].get(s)
            if not v:
                cells.append("–")
                continue
            cell = " / ".join(f"{v[p]:,.0f}".replace(",", " ") for p in PERCENTILES)
            if not v["kept_up"]:
                cell += f" ⚠ {v['rate_achieved']:,.0f}/s".replace(",", " ")
            cells.append(cell)
        rate = "–" if target is None else f"{target:,.0f}".replace(",", " ")
        lines.append(f"| {r['name']} | {rate} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
