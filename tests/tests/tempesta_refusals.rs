//! Tempesta parity, round 2 (issue 35; issue 36 item 4): what a refused request gets, how it
//! is counted and logged. Each case is written from Tempesta's source (fw/http.c, fw/http_tbl.c,
//! fw/http_limits.c) and its functional tests, and runs the real binary.

use std::net::SocketAddr;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get, Outcome, RawClient};
use e2e::{curl, free_port};

const T: Duration = Duration::from_secs(5);

/// The value of the sample `name` (with its labels) in the proxy's /metrics, 0 if absent.
fn metric(stats: SocketAddr, name: &str) -> u64 {
    let (_, text, _) = curl(&[&format!("http://{stats}/metrics")], 10);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

/// A proxy with vhost `site` (to `origin`), `extra` at top level and `chains` as its
/// http_chain blocks; returns it with its HTTP and stats addresses.
fn start(tag: &str, origin: &Origin, extra: &str, chains: &str) -> (Proxy, SocketAddr, SocketAddr) {
    let setup = Setup::new(tag);
    let stats = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let text = format!(
        "listen {http};\nstats_listen {stats};\n{extra}\n\
         srv_group default {{ server {origin}; }}\n\
         vhost site {{ proxy_pass default; }}\n{chains}\n",
        http = setup.http,
        origin = origin.addr(),
    );
    let http = setup.http;
    (setup.start(&text), http, stats)
}

/// A request no rule routes (an empty main chain, an empty chain jumped to, a chain whose
/// rules all miss) gets 403 on its connection, which stays open for the next request,
/// whatever `block_action attack` says: Tempesta leaves `req->vhost` NULL
/// (tfw_http_tbl_scan) and answers through tfw_http_send_err_resp, never through the block
/// path (tempesta-test http_rules/test_http_tables.py, the EmptyMainChain, EmptyChain and
/// MixedChain cases, expect 403 under `attack drop` and `reply` alike). Counted as
/// `blocks_total{limit="no_vhost"}`, logged with the address and the Host.
#[test]
fn a_request_no_rule_routes_gets_403_and_keeps_its_connection() {
    let origin = Origin::start(|_| Response::ok("site"));
    let chains = [
        ("empty-main", "http_chain {}"),
        (
            "empty-chain",
            "http_chain chain1 {}\nhttp_chain { host == \"tempesta-tech.com\" -> chain1; }",
        ),
        (
            "mixed",
            "http_chain chain1 { uri == \"/static*\" -> site; }\n\
             http_chain { host == \"tempesta-tech.com\" -> chain1; }",
        ),
    ];
    for (name, chain) in chains {
        for action in [
            "",
            "block_action attack drop;",
            "block_action attack reply;",
        ] {
            let (proxy, http, stats) = start(&format!("refusal-{name}"), &origin, action, chain);
            let mut c = RawClient::connect(http).expect("connect");
            for n in 0..2 {
                match c.request(&get("/", "tempesta-tech.com"), T) {
                    Outcome::Response(r) => assert_eq!(r.status, 403, "{name} {action:?} #{n}"),
                    other => panic!(
                        "{name} {action:?} request {n}: {other}\n{}",
                        proxy.proc.logs()
                    ),
                }
            }
            let counted = metric(stats, "ktls_proxy_blocks_total{limit=\"no_vhost\"}");
            assert_eq!(counted, 2, "{name} {action:?}");
            let logs = proxy.proc.logs();
            assert!(
                logs.contains("no http_chain rule for 127.0.0.1 host \"tempesta-tech.com\""),
                "{name} {action:?}: {logs}"
            );
        }
    }
    assert_eq!(origin.total_requests(), 0, "{:?}", origin.requests());
}

/// `-> block` is an attack (tfw_http_tbl_action returns -1, tfw_http_req_parse_block): under
/// the default `block_action attack drop` the connection ends with no answer; counted as
/// `blocks_total{limit="http_chain"}` and logged with the Host. `block_action error nolog`
/// silences the no-rule warning (tfw_http_send_err_resp checks TFW_BLK_ERR_NOLOG) but
/// still answers 403.
#[test]
fn a_block_rule_drops_and_error_nolog_silences_the_no_rule_warning() {
    let origin = Origin::start(|_| Response::ok("site"));
    let chain = "http_chain { uri == \"/admin*\" -> block; host == \"site\" -> site; }";
    let (proxy, http, stats) = start(
        "refusal-block",
        &origin,
        "block_action error reply nolog;",
        chain,
    );
    let mut c = RawClient::connect(http).expect("connect");
    let out = c.request(&get("/admin", "site"), T);
    assert!(out.is_dropped(), "-> block: {out}\n{}", proxy.proc.logs());
    assert_eq!(
        metric(stats, "ktls_proxy_blocks_total{limit=\"http_chain\"}"),
        1
    );
    let mut c = RawClient::connect(http).expect("connect");
    let out = c.request(&get("/", "other.test"), T);
    assert_eq!(out.status(), Some(403), "no rule: {out}");
    let logs = proxy.proc.logs();
    assert!(
        logs.contains("http_chain blocked 127.0.0.1 host \"site\" \"/admin\""),
        "{logs}"
    );
    assert!(!logs.contains("no http_chain rule"), "{logs}");
    assert_eq!(origin.total_requests(), 0);
}

/// The per-worker samples of `metric` (`name{worker="N"} value`).
fn per_worker(stats: SocketAddr, metric: &str) -> Vec<u64> {
    let (_, text, _) = curl(&[&format!("http://{stats}/metrics")], 10);
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{worker=")))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect()
}

/// `ip_block`: a violation on one connection resets every open connection of that address,
/// on every worker, and leaves another address's connections alone (tempesta-test
/// frang/test_ip_block.py FrangIpBlockMsg: the other same-address clients are reset, the
/// client of another address still served).
#[test]
fn ip_block_resets_the_blocked_addresss_open_connections_on_every_worker() {
    let origin = Origin::start(|_| Response::ok("site"));
    let (mut proxy, http, stats) = start(
        "refusal-ipblock",
        &origin,
        "frang_limits { http_strict_host_checking true; ip_block 30; }",
        "http_chain { -> site; }",
    );
    block_resets_every_worker(&proxy, http, stats, 53);
    // After a reload (a new frang, counting blocks from 0 again) the workers still wake each
    // other. Before, the count of the old configuration's blocks stood in the way: the other
    // worker saw the block only at its next event, and its connections stayed open.
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        proxy.proc.wait_for_output("reloaded", T),
        "{}",
        proxy.proc.logs()
    );
    block_resets_every_worker(&proxy, http, stats, 55);
}

/// Eight connections from 127.0.0.`host`, on both workers, and one from the next address:
/// a violation on the first resets the other seven and leaves the bystander served.
fn block_resets_every_worker(proxy: &Proxy, http: SocketAddr, stats: SocketAddr, host: u8) {
    let blocked = std::net::Ipv4Addr::new(127, 0, 0, host);
    let other = std::net::Ipv4Addr::new(127, 0, 0, host + 1);
    let before = per_worker(stats, "ktls_proxy_connections_accepted_total");
    let mut same: Vec<RawClient> = (0..8)
        .map(|_| RawClient::connect_from(blocked, http).expect("connect"))
        .collect();
    let mut bystander = RawClient::connect_from(other, http).expect("connect");
    for c in same.iter_mut().chain([&mut bystander]) {
        assert_eq!(c.request(&get("/", "site"), T).status(), Some(200));
    }
    let accepted = per_worker(stats, "ktls_proxy_connections_accepted_total");
    assert!(
        accepted.len() == 2
            && accepted
                .iter()
                .zip(before.iter().chain([0, 0].iter()))
                .all(|(&n, &b)| n > b),
        "the connections did not reach both workers: {before:?} -> {accepted:?}"
    );
    // An IP literal in Host violates strict host checking: this address is blocked.
    let out = same[0].request(&get("/", "127.0.0.1"), T);
    assert!(out.is_dropped(), "the violation: {out}");
    for (n, c) in same.iter_mut().enumerate().skip(1) {
        let after = c.wait_closed(T);
        assert!(
            matches!(after, Outcome::Reset),
            "connection {n} of the blocked address {blocked}: {after}\n{}",
            proxy.proc.logs()
        );
    }
    assert_eq!(
        bystander.request(&get("/", "site"), T).status(),
        Some(200),
        "another address"
    );
}

/// A safe method overridden to an unsafe one is refused with 400 (Tempesta's
/// tfw_http_req_process after frang, "unsafe method override", through the block path:
/// tempesta-test frang/test_http_method_override_allowed.py test_unsafe_override_* expect
/// 400 for GET with each of the three override fields naming POST); unsafe to safe is served.
#[test]
fn a_get_overridden_to_post_gets_400() {
    let origin = Origin::start(|_| Response::ok("site"));
    let (proxy, http, _) = start(
        "refusal-override",
        &origin,
        "frang_limits { http_method_override_allowed true; http_methods post put get; }\n\
         block_action attack reply;",
        "http_chain { -> site; }",
    );
    for field in [
        "X-HTTP-Method-Override",
        "X-HTTP-Method",
        "X-Method-Override",
    ] {
        let mut c = RawClient::connect(http).expect("connect");
        let req = format!("GET / HTTP/1.1\r\nHost: site\r\n{field}: POST\r\n\r\n");
        let out = c.request(req.as_bytes(), T);
        assert_eq!(
            out.status(),
            Some(400),
            "{field}: {out}\n{}",
            proxy.proc.logs()
        );
    }
    assert_eq!(origin.total_requests(), 0);
    let mut c = RawClient::connect(http).expect("connect");
    let req = "POST / HTTP/1.1\r\nHost: site\r\nX-HTTP-Method-Override: PUT\r\n\
               Content-Length: 0\r\n\r\n";
    let out = c.request(req.as_bytes(), T);
    assert_eq!(out.status(), Some(200), "POST as PUT: {out}");
}

fn frang_methods(methods: &str) -> String {
    format!(
        "frang_limits {{ http_methods {methods}; http_ct_required true; }}\n\
         block_action attack reply;"
    )
}

fn ask(http: SocketAddr, req: &str) -> Outcome {
    let mut c = RawClient::connect(http).expect("connect");
    c.request(req.as_bytes(), T)
}

/// `http_methods ... unknown;` loads (Tempesta's frang_http_methods_enum has `unknown`, the
/// bit of every method outside its list) and lets such methods through, CONNECT included,
/// which then gets the proxy's 501 (it does not tunnel).
#[test]
fn http_methods_unknown_lets_other_methods_through() {
    let origin = Origin::start(|r| Response::ok(r.method.clone()));
    let (proxy, http, _) = start(
        "refusal-unknown",
        &origin,
        &frang_methods("get post unknown"),
        "http_chain { -> site; }",
    );
    let brew = ask(http, "BREW / HTTP/1.1\r\nHost: site\r\n\r\n");
    assert_eq!(
        brew.status(),
        Some(200),
        "BREW: {brew}\n{}",
        proxy.proc.logs()
    );
    let put = ask(
        http,
        "PUT / HTTP/1.1\r\nHost: site\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(
        put.status(),
        Some(403),
        "PUT is known and not listed: {put}"
    );
    let connect = ask(http, "CONNECT site:443 HTTP/1.1\r\nHost: site:443\r\n\r\n");
    assert_eq!(
        connect.status(),
        Some(501),
        "CONNECT with unknown: {connect}"
    );
}

/// CONNECT is outside Tempesta's method list: frang's http_methods refuses it first (403 per
/// block_action attack), not the proxy's 501. An empty `Content-Type:` is a Content-Type
/// for `http_ct_required` (TFW_STR_EMPTY is false for it; tempesta-test
/// frang/test_http_ct_required.py test_content_type_set_ok serves it).
#[test]
fn connect_is_frangs_403_and_an_empty_content_type_is_present() {
    let origin = Origin::start(|r| Response::ok(r.method.clone()));
    let (proxy, http, _) = start(
        "refusal-connect",
        &origin,
        &frang_methods("get post"),
        "http_chain { -> site; }",
    );
    let connect = ask(http, "CONNECT site:443 HTTP/1.1\r\nHost: site:443\r\n\r\n");
    assert_eq!(
        connect.status(),
        Some(403),
        "CONNECT: {connect}\n{}",
        proxy.proc.logs()
    );
    let post = ask(
        http,
        "POST / HTTP/1.1\r\nHost: site\r\nContent-Type:\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(
        post.status(),
        Some(200),
        "POST with an empty Content-Type: {post}"
    );
    let bare = ask(
        http,
        "POST / HTTP/1.1\r\nHost: site\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(
        bare.status(),
        Some(403),
        "POST without Content-Type: {bare}"
    );
}
