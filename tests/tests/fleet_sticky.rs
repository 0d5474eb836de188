//! Sticky cookies, JS-challenge passes and sticky sessions shared by a fleet through Redis
//! (issue 37, docs/FLEET.md): a cookie one node issued is valid on the others without a
//! `secret`, a challenge passed on one node is not asked again by another, a session pinned
//! on one node goes to the same server through the others after a sync interval; with Redis
//! away each node works alone, joins the fleet when Redis answers, and keeps the fleet's key
//! when Redis goes away again.

mod fleet_common;
mod fleet_sticky_common;
mod sticky_common;

use std::net::SocketAddr;
use std::thread::sleep;
use std::time::{Duration, Instant};

use e2e::{free_port, TempDir};
use fleet_common::{Redis, FLEET_WAIT, SYNC_MS};
use fleet_sticky_common::{logs, nodes, server_of, wait_joined, with_cookie, Backends};
use sticky_common::Req;

#[test]
fn a_cookie_and_a_challenge_passed_on_one_node_hold_on_the_others() {
    let redis = Redis::start();
    let backends = Backends::start(1);
    let sticky = "sticky { cookie enforce; \
                  js_challenge resp_code=503 delay_min=1000 delay_range=1500; }";
    let sites = nodes(
        3,
        "fleet-sticky-js",
        redis.addr,
        &backends.group(""),
        sticky,
    );
    wait_joined(&sites, FLEET_WAIT);
    let issued = Instant::now();
    let challenge = sites[0].get("/", Req::default());
    assert_eq!(challenge.status, 503, "{challenge:?}");
    let cookie = format!("__tfw={}", challenge.sticky_value().expect("a cookie"));
    // In the challenge's window, on another node: its key is the fleet's.
    sleep(Duration::from_millis(1300).saturating_sub(issued.elapsed()));
    let passed = sites[1].get("/", with_cookie(&cookie));
    assert_eq!(
        passed.status,
        200,
        "node 1 refused node 0's cookie in the window: {passed:?}\n{}",
        logs(&sites)
    );
    // Past the window, on a third node and the first: the pass made on node 1 holds.
    sleep(Duration::from_millis(2500 + 3 * SYNC_MS).saturating_sub(issued.elapsed()));
    for n in [2, 0] {
        let got = sites[n].get("/", with_cookie(&cookie));
        assert_eq!(
            got.status,
            200,
            "node {n} challenged again a cookie that passed on node 1: {got:?}\n{}",
            logs(&sites)
        );
    }
}

#[test]
fn a_session_pinned_on_one_node_goes_to_the_same_server_through_another() {
    let redis = Redis::start();
    let backends = Backends::start(3);
    // The same secret on both nodes: only the pins can make the second node agree.
    let sticky = "sticky { cookie; secret \"k\"; }";
    let group = backends.group("sticky_sessions;");
    let sites = nodes(2, "fleet-sticky-pin", redis.addr, &group, sticky);
    wait_joined(&sites, FLEET_WAIT);
    // Six sessions (six browsers: the cookie is bound to the User-Agent) pinned on node 0.
    let agents: Vec<String> = (0..6).map(|i| format!("browser-{i}")).collect();
    let mut sessions = Vec::new();
    for ua in &agents {
        let first = sites[0].get(
            "/",
            Req {
                user_agent: Some(ua),
                ..Req::default()
            },
        );
        let cookie = format!("__tfw={}", first.sticky_value().expect("a cookie"));
        sessions.push((ua, cookie, server_of(&first)));
    }
    let homes: std::collections::HashSet<u16> = sessions.iter().map(|s| s.2).collect();
    assert!(
        homes.len() >= 2,
        "the scheduler spread the sessions: {homes:?}"
    );
    sleep(Duration::from_millis(3 * SYNC_MS));
    // Node 1's scheduler is not where node 0's was: one session of its own first, and the
    // sessions in the reverse order.
    let own = sites[1].get("/", Req::default());
    assert_eq!(own.status, 200, "{own:?}");
    for (ua, cookie, home) in sessions.iter().rev() {
        for _ in 0..2 {
            let got = sites[1].get(
                "/",
                Req {
                    cookie: Some(cookie),
                    user_agent: Some(ua),
                    ..Req::default()
                },
            );
            assert_eq!(
                server_of(&got),
                *home,
                "{ua}'s session went elsewhere through node 1\n{}",
                logs(&sites)
            );
            assert_eq!(
                got.header("x-seen-cookie"),
                Some("-"),
                "the cookie is the proxy's"
            );
        }
    }
}

#[test]
fn a_session_the_backend_named_on_one_node_follows_its_server_through_another() {
    let redis = Redis::start();
    let backends = Backends::start(3);
    let group = backends.group("sticky_sessions; learn name=sid;");
    let sites = nodes(2, "fleet-sticky-learn", redis.addr, &group, "");
    wait_joined(&sites, FLEET_WAIT);
    // Six logins through node 0: each backend names the session it made (`sid=srv-PORT-N`).
    let logins: Vec<(String, u16)> = (0..6)
        .map(|_| {
            let login = sites[0].get("/login", Req::default());
            let set = login.header("set-cookie").expect("the backend's cookie");
            let sid = set.split(';').next().unwrap_or("").to_string();
            (sid, server_of(&login))
        })
        .collect();
    sleep(Duration::from_millis(3 * SYNC_MS));
    let own = sites[1].get("/", Req::default());
    assert_eq!(own.status, 200, "{own:?}");
    for (sid, home) in logins.iter().rev() {
        let got = sites[1].get("/page", with_cookie(sid));
        assert_eq!(
            server_of(&got),
            *home,
            "{sid} went elsewhere through node 1\n{}",
            logs(&sites)
        );
    }
}

#[test]
fn without_redis_each_node_works_alone_and_joins_when_redis_answers() {
    let backends = Backends::start(2);
    let redis_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let group = backends.group("sticky_sessions;");
    let sticky = "sticky { cookie enforce; }";
    let sites = nodes(2, "fleet-sticky-alone", redis_addr, &group, sticky);
    // No Redis: each node issues and accepts its own cookies and pins its own sessions.
    let mut local = Vec::new();
    for (n, site) in sites.iter().enumerate() {
        let redirect = site.get("/", Req::default());
        assert_eq!(
            redirect.status,
            302,
            "node {n}: {redirect:?}\n{}",
            site.logs()
        );
        let cookie = format!("__tfw={}", redirect.sticky_value().expect("a cookie"));
        let first = site.get("/", with_cookie(&cookie));
        assert_eq!(first.status, 200, "node {n}: {first:?}\n{}", site.logs());
        for _ in 0..3 {
            let again = site.get("/", with_cookie(&cookie));
            assert_eq!(server_of(&again), server_of(&first), "node {n}");
        }
        assert_eq!(site.metric("ktls_proxy_fleet_redis_up"), 0);
        local.push(cookie);
    }
    // Redis comes: the nodes agree a key; a cookie issued now is valid on both.
    let redis = Redis::start_at(TempDir::new("fleet-sticky-redis"), redis_addr);
    // The nodes retry with a backoff of up to 5 s.
    wait_joined(&sites, Duration::from_secs(12));
    let redirect = sites[0].get("/", Req::default());
    let cookie = format!("__tfw={}", redirect.sticky_value().expect("a cookie"));
    for (n, site) in sites.iter().enumerate() {
        let got = site.get("/", with_cookie(&cookie));
        assert_eq!(
            got.status,
            200,
            "node {n} refused a cookie node 0 issued after Redis came: {got:?}\n{}",
            logs(&sites)
        );
    }
    // The cookies a node issued alone stay valid on it.
    for (n, site) in sites.iter().enumerate() {
        let got = site.get("/", with_cookie(&local[n]));
        assert_eq!(got.status, 200, "node {n}'s own cookie: {got:?}");
    }
    // Redis killed: the nodes keep the key they adopted, and nobody gets an error.
    drop(redis);
    let redirect = sites[1].get("/", Req::default());
    let cookie = format!("__tfw={}", redirect.sticky_value().expect("a cookie"));
    for (n, site) in sites.iter().enumerate() {
        let got = site.get("/", with_cookie(&cookie));
        assert_eq!(
            got.status,
            200,
            "node {n} with Redis gone: {got:?}\n{}",
            logs(&sites)
        );
    }
}
