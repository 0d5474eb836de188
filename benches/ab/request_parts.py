#!/usr/bin/env python3
"""Groups a server's per-function instruction counts into the parts of a request's path.

    request_parts.py check REPORT.json
    request_parts.py h2load OUTPUT.txt REPORT.json
    request_parts.py row SERVER ROW PROFILE SYS.csv SYS.json UTICKS STICKS HZ DETAIL

`check`: exits 1 unless an http-perf JSON report has requests and no errors.
`h2load`: writes h2load's summary as such a report (requests, errors, non-2xx/3xx), then
checks it as `check` does.
`row`: prints one Markdown row of benches/ab/request_cost.sh's table. PROFILE is the
callgrind profile of a steady-state window (self cost per function is summed); the requests
in it are the calls of the server's once-per-request function (MARKERS), which callgrind
counts exactly (it matches the client's request count, plus the requests in flight). SYS.csv
the `perf stat -x,` count of raw_syscalls:sys_enter and SYS.json the client's report of that
run, UTICKS/STICKS the server's user/system CPU ticks during it (HZ per second). DETAIL
receives the largest functions of every part, so that what lands in "other" is visible.

A function belongs to the first part whose rule matches its object or its name (Rust
names are demangled by callgrind, so the crate and module are in them; nginx's functions
are named by module). The parts, for the proxy / for nginx:
  crypto        libcrypto (AES-GCM, GHASH, ChaCha20-Poly1305, the EVP layer around them)
  record layer  ktls::record (framing, nonces, AEAD calls) / libssl (SSL_read, SSL_write)
  HTTP parse    http1:: and the proxy's request reading / ngx_http_parse_*, request set-up
  lookup        cache:: and the router / ngx_http_static, open file cache, locations
  response      the proxy's response composition and outbox / header and write filters
  bookkeeping   metrics, timers, frang limits, access log, Date / ngx timers, log phase
  event loop    mio, the worker's loop and connection table / ngx_epoll, event handlers
  alloc         malloc/free (glibc) and Rust's alloc:: wrappers / ngx_palloc, ngx_pfree
  copies        memcpy/memmove/memset
  libc other    the rest of libc and ld.so (syscall wrappers, strlen, ...)
  other         everything left (listed in DETAIL)
"""

import json
import re
import sys

PARTS = [
    "crypto", "record layer", "HTTP parse", "lookup", "response", "bookkeeping",
    "event loop", "alloc", "copies", "libc other", "other",
]

# (part, object regex or None, function regex or None): first match wins.
RULES = [
    ("crypto", r"libcrypto", None),
    ("record layer", r"libssl", None),
    # Only OpenSSL calls strcmp on a request's path (OSSL_PARAM look-ups by name when a
    # cipher context is set up: checked with the profiles' call edges).
    ("crypto", r"libc[.-]", r"strcmp"),
    ("copies", r"libc[.-]|ld-linux", r"mem(cpy|move|set)|__memcpy|__memmove|__memset"),
    ("alloc", r"libc[.-]", r"malloc|free|realloc|calloc|memalign|_int_|tcache|arena|unlink_chunk|malloc_consolidate|sysmalloc|systrim|alloc_perturb"),
    ("libc other", r"libc[.-]|ld-linux|libpthread|libm[.-]|vdso", None),
    # The proxy (Rust, demangled by callgrind). Chain::try_fold is http1's header look-up by
    # name (its only caller on this path, by the call edges).
    ("record layer", None, r"ktls::|openssl::cipher|openssl::symm"),
    ("bookkeeping", None, r"proxy::metrics|proxy::timers|proxy::frang|proxy::access_log|proxy::date|cache::metrics|proxy::worker::(limits|handshake_deadline)|BinaryHeap|std::time::|Timespec|clock_gettime"),
    ("response", None, r"http1::(response|write|status)|proxy::outbox|proxy::worker::(response|finish|exchange|stored_reply)|proxy::buf|core::fmt|std::io::default_write_fmt|Formatter|cache::entry::Entry::write_age"),
    ("HTTP parse", None, r"http1::|httparse::|Chain<A,B> as core::iter::traits::iterator::Iterator>::try_fold|proxy::worker::(request|h1|codec)|core::str::converts::from_utf8|eq_ignore_ascii_case"),
    ("lookup", None, r"cache::|sip::Hasher|proxy::router|proxy::server_name|proxy::worker::(route|caching|fill)"),
    ("event loop", None, r"mio::|proxy::worker::(mod|client|lifecycle|queue)|proxy::worker::Worker|proxy::transport|proxy::socket|epoll|std::io::error"),
    ("alloc", None, r"alloc::alloc|__rust_alloc|__rust_dealloc|__rust_realloc|__rdl_|alloc::raw_vec|RawVec|mimalloc|mi_|drop_in_place"),
    ("copies", None, r"copy_from_slice|extend_from_slice|spec_extend"),
    # nginx (C; the Debian binary is stripped of its static functions, which land in
    # "other" as addresses: only its exported functions have names).
    ("record layer", None, r"^ngx_ssl_(write|recv|send_chain|read)"),
    ("HTTP parse", None, r"ngx_http_parse|ngx_http_process_request|ngx_http_read_request|ngx_http_wait_request|ngx_http_alloc_large|ngx_http_process_(host|connection|user_agent|header)|ngx_http_validate_host|ngx_hash_find|ngx_http_init_headers|ngx_strlow|ngx_hash_key"),
    ("lookup", None, r"ngx_http_static|ngx_open_cached_file|ngx_open_file|ngx_http_core_find|ngx_http_map_uri|ngx_http_find_location|ngx_http_core_(find_config|rewrite|post_rewrite|access|try_files|content)|ngx_http_index|ngx_http_core_generic|ngx_http_set_exten|ngx_file_info|ngx_filename_cmp"),
    ("response", None, r"ngx_http_(header_filter|write_filter|send_header|output_filter|top_header|chunked|range|gzip|postpone|copy|ssi|charset|sub|addition|userid|headers_filter|not_modified|trailers|v2)|ngx_output_chain|ngx_chain|ngx_http_send|ngx_linux_sendfile|ngx_http_finalize|ngx_http_set_keepalive|ngx_http_terminate|ngx_http_free_request|ngx_http_close|ngx_http_run_posted|ngx_http_request_handler|ngx_http_handler|ngx_http_core_run_phases|ngx_http_discard|ngx_http_set_etag|ngx_http_weak_etag|ngx_http_add_header|ngx_http_complex|ngx_http_variable|ngx_sprintf|ngx_vslprintf|ngx_cpymem|ngx_http_time|ngx_http_post_action|ngx_http_log_request"),
    ("bookkeeping", None, r"ngx_event_(add|del)_timer|ngx_rbtree|ngx_event_expire|ngx_event_find_timer|ngx_time_update|ngx_http_log|ngx_gmtime|ngx_event_no_timers|ngx_http_update_location"),
    ("event loop", None, r"ngx_epoll|ngx_process_events|ngx_event_process_posted|ngx_handle_(read|write)_event|ngx_worker_process_cycle|ngx_single_process_cycle|ngx_event_|ngx_unix_(recv|send)|ngx_reusable_connection|ngx_recv|ngx_send"),
    ("alloc", None, r"ngx_palloc|ngx_pnalloc|ngx_pcalloc|ngx_pfree|ngx_create_pool|ngx_destroy_pool|ngx_reset_pool|ngx_alloc|ngx_calloc|ngx_free|ngx_memalign|ngx_array_|ngx_list_"),
]
COMPILED = [
    (part, re.compile(o) if o else None, re.compile(f) if f else None) for part, o, f in RULES
]


def classify(function, obj):
    for part, o, f in COMPILED:
        if o and not o.search(obj):
            continue
        if f and not f.search(function):
            continue
        return part
    return "other"


def self_costs(path):
    """(function, object, Ir) per function of a callgrind profile (self cost only), and the
    number of calls of each function.

    The format (valgrind docs, "Callgrind Format Specification"): `ob=`/`fn=` name the
    object and function of the cost lines that follow (`fi=`/`fe=` only change the source
    file of inlined code, the function stays), a `calls=` line is followed by one cost line
    that is the call's inclusive cost (skipped: every instruction counts once), and names
    may be compressed: the first use is `(id) name`, later uses `(id)`.
    """
    names = {"ob": {}, "fn": {}}
    costs = {}
    calls = {}
    obj, function, callee = "???", "???", "???"
    skip_next_cost = False

    def resolve(kind, value):
        value = value.strip()
        if value.startswith("("):
            ident, _, name = value.partition(")")
            name = name.strip()
            if name:
                names[kind][ident] = name
            return names[kind].get(ident, "???")
        return value

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            head = line[:1]
            if head.isdigit() or head in "+-*":
                if skip_next_cost:
                    skip_next_cost = False
                    continue
                fields = line.split()
                if len(fields) >= 2:
                    costs[(function, obj)] = costs.get((function, obj), 0) + int(fields[1])
            elif line.startswith("ob="):
                obj = resolve("ob", line[3:])
            elif line.startswith("fn="):
                function = resolve("fn", line[3:])
            elif line.startswith("cob="):
                resolve("ob", line[4:])
            elif line.startswith("cfn="):
                callee = resolve("fn", line[4:])
            elif line.startswith("calls="):
                skip_next_cost = True
                count = int(line[6:].split()[0])
                calls[callee] = calls.get(callee, 0) + count
    return [(fn, ob, cost) for (fn, ob), cost in costs.items()], calls


# A function each server calls exactly once per request (checked against the client's
# counts): the request count of a profiled window.
# An HTTP/1 request is parsed (http1::request::finish), an HTTP/2 one built from its header
# block (RequestBuilder::finish; a proxy before issue 31 rendered it and parsed it with the
# former): each request calls exactly one of them.
MARKERS = [
    "http1::request::finish",
    "http1::assemble::RequestBuilder::finish",
    "ngx_http_process_request",
]


def clean(report):
    e = report.get("errors", {})
    return report.get("requests", 0) > 0 and not any(e.values()) and not report.get("non_2xx_3xx")


def row(argv):
    server, row_name, profile, sys_csv, sys_json, uticks, sticks, hz, detail = argv
    costs, calls = self_costs(profile)
    requests = sum(calls.get(m, 0) for m in MARKERS)
    if requests <= 0:
        sys.exit(f"request_parts: no request in the profile of {server} {row_name}")
    parts = {p: 0 for p in PARTS}
    members = {p: [] for p in PARTS}
    for function, obj, cost in costs:
        part = classify(function, obj)
        parts[part] += cost
        members[part].append((cost, function, obj))
    total = sum(parts.values())
    syscalls = None
    for line in open(sys_csv):
        fields = line.strip().split(",")
        if len(fields) > 2 and fields[2].endswith("sys_enter") and fields[0].isdigit():
            syscalls = int(fields[0])
    sys_requests = json.load(open(sys_json))["requests"]
    cpu_us = (int(uticks) + int(sticks)) / int(hz) * 1e6 / sys_requests
    user_us = int(uticks) / int(hz) * 1e6 / sys_requests
    with open(detail, "w") as out:
        print(f"{server} {row_name}: {requests} requests, {total / requests:.0f} Ir/request", file=out)
        for part in PARTS:
            print(f"\n## {part}: {parts[part] / requests:.0f} Ir/request", file=out)
            for cost, function, obj in sorted(members[part], reverse=True)[:25]:
                print(f"{cost / requests:10.0f}  {function}  [{obj.rsplit('/', 1)[-1]}]", file=out)
    k = lambda v: f"{v / requests:,.0f}"
    sc = f"{syscalls / sys_requests:.2f}" if syscalls is not None else "?"
    print(f"| {server} | {row_name} | **{k(total)}** | " + " | ".join(k(parts[p]) for p in PARTS)
          + f" | {sc} | {user_us:.1f} + {cpu_us - user_us:.1f} |")


def h2load_report(text):
    """h2load's summary lines as the fields of an http-perf report that `clean` reads."""
    done = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, "
                     r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    if not done or not codes:
        return {"requests": 0}
    failed, errored, timeout = (int(done.group(i)) for i in (4, 5, 6))
    return {
        "requests": int(done.group(2)),
        "errors": {"failed": failed, "errored": errored, "timeout": timeout},
        "non_2xx_3xx": int(codes.group(3)) + int(codes.group(4)),
    }


def main():
    if sys.argv[1] == "check":
        sys.exit(0 if clean(json.load(open(sys.argv[2]))) else 1)
    if sys.argv[1] == "h2load":
        report = h2load_report(open(sys.argv[2]).read())
        json.dump(report, open(sys.argv[3], "w"))
        sys.exit(0 if clean(report) else 1)
    row(sys.argv[2:])


if __name__ == "__main__":
    main()
