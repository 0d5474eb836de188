//! The fleet's sticky sharing through a node's life (issue 37, docs/FLEET.md, "Sticky
//! cookies, sessions and challenge passes"): a reload, a pin in use republished after half
//! its lifetime, a node started while Redis had lost the cookie key, and a node that fell
//! behind the sticky stream's cap. A real `redis-server` and two or three proxies.

mod fleet_common;
mod fleet_sticky_common;
mod sticky_common;

use std::net::SocketAddr;
use std::thread::sleep;
use std::time::{Duration, Instant};

use fleet_common::{Redis, FLEET_WAIT, SYNC_MS};
use fleet_sticky_common::{
    logs, node, nodes, redis_cli, stream_len, wait_joined, with_cookie, Backends, Session,
};
use sticky_common::{Req, Site};

const TURNS: Duration = Duration::from_millis(3 * SYNC_MS);

/// How many times `site` logged a reload.
fn reloads(site: &Site) -> usize {
    site.logs().matches("reloaded ").count()
}

/// Sessions made through `site`, one after another, for `period`.
fn sessions_for(site: &Site, tag: &str, period: Duration) -> Vec<Session> {
    let until = Instant::now() + period;
    let mut made = Vec::new();
    while Instant::now() < until {
        made.push(Session::pin(site, &format!("{tag}-{}", made.len())));
    }
    made
}

fn sessions(site: &Site, tag: &str, count: usize) -> Vec<Session> {
    (0..count)
        .map(|i| Session::pin(site, &format!("{tag}-{i}")))
        .collect()
}

/// Every session of `list` goes to its server through `site`.
fn all_home(site: &Site, list: &[Session], what: &str, sites: &[Site]) {
    for s in list.iter().rev() {
        assert_eq!(
            s.server_through(site),
            s.home,
            "{what}: {} went elsewhere\n{}",
            s.ua,
            logs(sites)
        );
    }
}

/// Before the fix, a reload lost the pins made on the node since its side thread's last
/// turn: the old session tables' outboxes were never read again. Sessions are made on node 0
/// without a pause while it is reloaded three times: every one of them is in the stream
/// (exactly one entry per session) and goes to its server through node 1; the pins node 1
/// made before and after the reloads go to their servers through node 0.
#[test]
fn pins_made_up_to_a_reload_reach_the_fleet_and_the_fleet_s_pins_outlive_it() {
    let redis = Redis::start();
    let backends = Backends::start(3);
    let sticky = "sticky { cookie; secret \"k\"; }";
    let group = backends.group("sticky_sessions;");
    let sites = nodes(2, "fleet-sticky-reload", redis.addr, &group, sticky);
    wait_joined(&sites, FLEET_WAIT);
    let before = sessions(&sites[1], "before", 6);
    let mut made = Vec::new();
    for r in 0..3 {
        made.extend(sessions_for(&sites[0], &format!("r{r}a"), TURNS));
        let done = reloads(&sites[0]);
        sites[0].proxy.proc.signal(libc::SIGHUP);
        made.extend(sessions_for(&sites[0], &format!("r{r}b"), TURNS));
        let deadline = Instant::now() + Duration::from_secs(10);
        while reloads(&sites[0]) == done {
            assert!(Instant::now() < deadline, "no reload\n{}", sites[0].logs());
            sleep(Duration::from_millis(20));
        }
    }
    let after = sessions(&sites[1], "after", 6);
    sleep(TURNS);
    let published = stream_len(redis.addr);
    let pinned = before.len() + made.len() + after.len();
    assert_eq!(
        published,
        pinned,
        "{} sessions made on node 0 across its reloads, {} on node 1: pins lost at a reload\n{}",
        made.len(),
        before.len() + after.len(),
        logs(&sites)
    );
    eprintln!(
        "{} sessions pinned on node 0 across 3 reloads, all published",
        made.len()
    );
    all_home(&sites[1], &made, "node 0's pin through node 1", &sites);
    all_home(
        &sites[0],
        &before,
        "node 1's pin through reloaded node 0",
        &sites,
    );
    all_home(
        &sites[0],
        &after,
        "node 1's later pin through node 0",
        &sites,
    );
}

/// A challenge passed on node 1 still holds on node 0 after node 0's reload (its new
/// runtime reads the stream again), past the challenge's window.
#[test]
fn a_challenge_passed_elsewhere_holds_after_a_reload() {
    let redis = Redis::start();
    let backends = Backends::start(1);
    let sticky = "sticky { cookie enforce; \
                  js_challenge resp_code=503 delay_min=1000 delay_range=1500; }";
    let sites = nodes(
        2,
        "fleet-pass-reload",
        redis.addr,
        &backends.group(""),
        sticky,
    );
    wait_joined(&sites, FLEET_WAIT);
    let issued = Instant::now();
    let challenge = sites[1].get("/", Req::default());
    assert_eq!(challenge.status, 503, "{challenge:?}");
    let cookie = format!("__tfw={}", challenge.sticky_value().expect("a cookie"));
    sleep(Duration::from_millis(1300).saturating_sub(issued.elapsed()));
    assert_eq!(sites[1].get("/", with_cookie(&cookie)).status, 200);
    let done = reloads(&sites[0]);
    sites[0].proxy.proc.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while reloads(&sites[0]) == done {
        assert!(Instant::now() < deadline, "no reload\n{}", sites[0].logs());
        sleep(Duration::from_millis(20));
    }
    // Past the window: only the pass can make node 0 accept it.
    sleep(Duration::from_millis(2500 + 3 * SYNC_MS).saturating_sub(issued.elapsed()));
    let got = sites[0].get("/", with_cookie(&cookie));
    assert_eq!(
        got.status,
        200,
        "node 0 forgot node 1's pass at its reload: {got:?}\n{}",
        logs(&sites)
    );
}

/// A pin in use is published again once half of `sess_lifetime` (12 s) passed since it was
/// last published, not on every request: Redis emptied (FLUSHALL) and a node started after
/// the pin learn it from node 0's next request past the half, and route it the same way.
#[test]
fn a_pin_in_use_is_published_again_after_half_its_lifetime() {
    let redis = Redis::start();
    let backends = Backends::start(3);
    let sticky = "sticky { cookie; secret \"k\"; sess_lifetime 12; }";
    let group = backends.group("sticky_sessions;");
    let first = node("fleet-republish-0", redis.addr, &group, sticky);
    wait_joined(std::slice::from_ref(&first), FLEET_WAIT);
    let pinned_at = Instant::now();
    let list = sessions(&first, "republish", 6);
    sleep(TURNS);
    assert_eq!(stream_len(redis.addr), 6, "{}", first.logs());
    assert_eq!(redis_cli(redis.addr, &["FLUSHALL"]), "OK");
    let late = node("fleet-republish-1", redis.addr, &group, sticky);
    let sites = [first, late];
    wait_joined(&sites[1..], FLEET_WAIT);
    // In use before half the lifetime: routed as pinned, nothing published.
    all_home(&sites[0], &list, "node 0, early", &sites);
    sleep(TURNS);
    assert!(
        pinned_at.elapsed() < Duration::from_millis(5500),
        "too slow a machine for the early step: {:?}",
        pinned_at.elapsed()
    );
    assert_eq!(stream_len(redis.addr), 0, "republished too early");
    // Past half the lifetime (published at most a turn after the pin): in use again on
    // node 0, so published again, and node 1 routes each session to its server.
    sleep(Duration::from_millis(7000).saturating_sub(pinned_at.elapsed()));
    all_home(&sites[0], &list, "node 0, late", &sites);
    sleep(TURNS);
    assert_eq!(stream_len(redis.addr), 6, "{}", logs(&sites));
    all_home(&sites[1], &list, "node 1, started after the pins", &sites);
    assert!(
        pinned_at.elapsed() < Duration::from_secs(12),
        "within the lifetime"
    );
}

/// A node that starts while Redis lost the key (FLUSHALL while the other node is stopped,
/// so it cannot write the key back) proposes a new one: the fleet has two keys. The older
/// node logs it; each node accepts only its own side's cookies; the key in Redis stays
/// the newer node's; a restart of the older node brings it to that key.
#[test]
fn a_node_started_while_redis_lost_the_key_splits_the_fleet_until_a_restart() {
    let redis = Redis::start();
    let backends = Backends::start(1);
    let group = backends.group("");
    let sticky = "sticky { cookie enforce; }";
    let old = node("fleet-split-old", redis.addr, &group, sticky);
    wait_joined(std::slice::from_ref(&old), FLEET_WAIT);
    let issue = |site: &Site| {
        let redirect = site.get("/", Req::default());
        assert_eq!(redirect.status, 302, "{redirect:?}");
        format!("__tfw={}", redirect.sticky_value().expect("a cookie"))
    };
    let before = issue(&old);
    let pid = old.proxy.proc.pid();
    e2e::send_signal(pid, libc::SIGSTOP);
    let first_key = redis_cli(redis.addr, &["GET", "ktls:sticky:key"]);
    assert_eq!(redis_cli(redis.addr, &["FLUSHALL"]), "OK");
    let new = node("fleet-split-new", redis.addr, &group, sticky);
    let sites = [old, new];
    wait_joined(&sites[1..], FLEET_WAIT);
    e2e::send_signal(pid, libc::SIGCONT);
    let warning = "Redis holds another sticky cookie key than this node's";
    let deadline = Instant::now() + FLEET_WAIT;
    while !sites[0].logs().contains(warning) {
        assert!(Instant::now() < deadline, "not logged\n{}", logs(&sites));
        sleep(Duration::from_millis(SYNC_MS));
    }
    assert!(!sites[1].logs().contains(warning), "{}", sites[1].logs());
    let second_key = redis_cli(redis.addr, &["GET", "ktls:sticky:key"]);
    assert_ne!(first_key, second_key, "two keys");
    let status = |site: &Site, cookie: &str| site.get("/", with_cookie(cookie)).status;
    let (old_side, new_side) = (issue(&sites[0]), issue(&sites[1]));
    for (what, cookie, on_old, on_new) in [
        ("issued before the split", &before, 200, 302),
        ("issued by the old node after it", &old_side, 200, 302),
        ("issued by the new node", &new_side, 302, 200),
    ] {
        assert_eq!(status(&sites[0], cookie), on_old, "{what}, on the old node");
        assert_eq!(status(&sites[1], cookie), on_new, "{what}, on the new node");
    }
    // Some turns later nothing converged: Redis keeps the newer key, each side its own.
    sleep(TURNS);
    assert_eq!(
        redis_cli(redis.addr, &["GET", "ktls:sticky:key"]),
        second_key
    );
    assert_eq!(status(&sites[0], &new_side), 302);
    // The old node restarted: it adopts Redis's key, the old side's cookies are gone.
    let [old, new] = sites;
    drop(old);
    let restarted = node("fleet-split-restarted", redis.addr, &group, sticky);
    let sites = [restarted, new];
    wait_joined(&sites[..1], FLEET_WAIT);
    assert_eq!(status(&sites[0], &new_side), 200, "{}", logs(&sites));
    assert_eq!(status(&sites[0], &old_side), 302);
    assert!(!sites[0].logs().contains(warning), "{}", sites[0].logs());
}

/// `count` challenge passes as another node publishes them, written straight into Redis by
/// `redis-cli --pipe` (the proxy's `MAXLEN ~ 65536`).
fn publish_passes_elsewhere(redis: SocketAddr, first: u32, count: u32) {
    let mut pipe = Vec::new();
    for i in first..first + count {
        let digest = format!("{i:064x}");
        let args = [
            "XADD",
            "ktls:sticky",
            "MAXLEN",
            "~",
            "65536",
            "*",
            "k",
            "pass",
            "d",
            &digest,
            "t",
            "0",
            "node",
            "elsewhere",
        ];
        pipe.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            pipe.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    let mut child = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "--pipe"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli --pipe");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(&pipe).expect("write the pipe");
    }
    let out = child.wait_with_output().expect("redis-cli --pipe");
    assert!(out.status.success(), "{out:?}");
}

/// `XINFO STREAM ktls:sticky`: (entries ever added, entries kept).
fn stream_counts(redis: SocketAddr) -> (u64, u64) {
    let text = redis_cli(redis, &["XINFO", "STREAM", "ktls:sticky"]);
    let lines: Vec<&str> = text.lines().collect();
    let field = |name: &str| {
        let at = lines.iter().position(|l| *l == name).expect(name);
        lines[at + 1].parse::<u64>().expect("a count")
    };
    (field("entries-added"), field("length"))
}

/// As `ktls_proxy_fleet_blocks_lost_total` for blocks: a node stopped while the fleet
/// publishes 70 000 passes (the stream keeps about 65 536) counts and logs exactly the
/// entries trimmed before it read them.
#[test]
fn sticky_entries_trimmed_before_a_node_read_them_are_counted_and_logged() {
    let redis = Redis::start();
    let backends = Backends::start(1);
    let sticky = "sticky { cookie; secret \"k\"; }";
    let site = node("fleet-sticky-lost", redis.addr, &backends.group(""), sticky);
    wait_joined(std::slice::from_ref(&site), FLEET_WAIT);
    // One entry the node reads: it then has a position in the stream.
    publish_passes_elsewhere(redis.addr, 1, 1);
    sleep(Duration::from_millis(10 * SYNC_MS));
    assert_eq!(site.metric("ktls_proxy_fleet_sticky_lost_total"), 0);
    let pid = site.proxy.proc.pid();
    e2e::send_signal(pid, libc::SIGSTOP);
    publish_passes_elsewhere(redis.addr, 2, 70_000);
    e2e::send_signal(pid, libc::SIGCONT);
    let (added, kept) = stream_counts(redis.addr);
    let lost = added - kept - 1;
    let deadline = Instant::now() + FLEET_WAIT;
    while site.metric("ktls_proxy_fleet_sticky_lost_total") == 0 {
        assert!(
            Instant::now() < deadline,
            "nothing counted lost ({added} added, {kept} kept)\n{}",
            site.logs()
        );
        sleep(Duration::from_millis(SYNC_MS / 2));
    }
    // Caught up (65 536 entries, 250 a read): counted once.
    sleep(Duration::from_millis(20 * SYNC_MS));
    assert_eq!(
        site.metric("ktls_proxy_fleet_sticky_lost_total"),
        lost,
        "{added} added, {kept} kept"
    );
    assert!(
        site.logs().contains(&format!(
            "cluster: {lost} sticky pin(s)/pass(es) were trimmed from ktls:sticky"
        )),
        "{}",
        site.logs()
    );
    eprintln!("{added} sticky entries added, {kept} kept, {lost} counted lost");
}
