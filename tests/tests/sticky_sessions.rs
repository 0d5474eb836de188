//! Sticky sessions through the real binary, over origin processes that answer with their
//! own port (tests/py/sticky_origin.py): a session's first request is scheduled and pinned,
//! the rest follow it over HTTP/1.1 and HTTP/2; a dead server's sessions move with a log
//! line under `allow_failover` and get 502 without; `learn name=C` pins on the backend's
//! own cookie.

mod sticky_common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use e2e::{free_port, wait_for_port, workspace_root, Proc, TempDir};
use sticky_common::{Got, Req, Site};

/// Origin processes (tests/py/sticky_origin.py), each answering `server PORT`.
struct Backends {
    ports: Vec<u16>,
    procs: Vec<Option<Proc>>,
    _dir: TempDir,
}

impl Backends {
    fn start(n: usize) -> Backends {
        let dir = TempDir::new("sticky-origins");
        let script = workspace_root().join("tests/py/sticky_origin.py");
        let mut ports = Vec::new();
        let mut procs = Vec::new();
        for _ in 0..n {
            let port = free_port();
            let mut cmd = Command::new("python3");
            cmd.arg(&script).arg(port.to_string());
            procs.push(Some(Proc::spawn("origin", cmd, dir.path())));
            ports.push(port);
        }
        for &port in &ports {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            assert!(
                wait_for_port(addr, Duration::from_secs(10)),
                "origin {port}"
            );
        }
        Backends {
            ports,
            procs,
            _dir: dir,
        }
    }

    fn group(&self, extra: &str) -> String {
        let servers: String = self
            .ports
            .iter()
            .map(|p| format!("server 127.0.0.1:{p}; "))
            .collect();
        format!("srv_group default {{ {servers}{extra} }}")
    }

    /// Kills the server answering on `port`.
    fn kill(&mut self, port: u16) {
        let i = self
            .ports
            .iter()
            .position(|&p| p == port)
            .expect("a port of ours");
        if let Some(mut p) = self.procs[i].take() {
            p.signal(libc::SIGKILL);
            p.wait_exit(Duration::from_secs(5));
        }
    }
}

fn server_of(got: &Got) -> u16 {
    got.body
        .trim()
        .strip_prefix("server ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not an origin answer: {got:?}"))
}

#[test]
fn sessions_stay_on_their_server_and_fail_over_when_it_dies() {
    let mut backends = Backends::start(3);
    let site = Site::start(
        "sticky-sessions",
        &backends.group("sticky_sessions allow_failover;"),
        "sticky { cookie; secret \"k\"; }",
    );
    // Without a session the scheduler spreads requests.
    let spread: std::collections::HashSet<u16> = (0..6)
        .map(|_| server_of(&site.get("/", Req::default())))
        .collect();
    assert!(spread.len() >= 2, "{spread:?}");
    // The first request of a session is scheduled and pinned; the rest follow it, h1 and h2.
    let first = site.get("/", Req::default());
    let pinned = server_of(&first);
    let cookie = format!("__tfw={}", first.sticky_value().expect("a cookie"));
    for i in 0..8 {
        let got = site.get(
            "/",
            Req {
                cookie: Some(&cookie),
                h2: i % 2 == 1,
                ..Req::default()
            },
        );
        assert_eq!(server_of(&got), pinned, "request {i}: {got:?}");
        assert_eq!(got.header("x-seen-cookie"), Some("-"), "stripped");
    }
    // Its server dies: the session moves, with a log line, and stays on the new server.
    backends.kill(pinned);
    let moved = site.get(
        "/",
        Req {
            cookie: Some(&cookie),
            ..Req::default()
        },
    );
    assert_eq!(moved.status, 200, "{moved:?}\n{}", site.logs());
    let new_home = server_of(&moved);
    assert_ne!(new_home, pinned);
    for h2 in [false, true] {
        let got = site.get(
            "/",
            Req {
                cookie: Some(&cookie),
                h2,
                ..Req::default()
            },
        );
        assert_eq!(server_of(&got), new_home, "{got:?}");
    }
    assert!(
        site.logs().contains("sticky session moved"),
        "{}",
        site.logs()
    );
    assert!(site.metric("ktls_proxy_sticky_sessions_failed_over_total") >= 1);
    assert!(site.metric("ktls_proxy_sticky_sessions_pinned_total") >= 7);
}

#[test]
fn without_failover_a_dead_servers_sessions_get_502() {
    let mut backends = Backends::start(2);
    let site = Site::start(
        "sticky-nofailover",
        &backends.group(""),
        "sticky { cookie; secret \"k\"; sticky_sessions; }",
    );
    let first = site.get("/", Req::default());
    let pinned = server_of(&first);
    let cookie = format!("__tfw={}", first.sticky_value().expect("a cookie"));
    backends.kill(pinned);
    for h2 in [false, true] {
        let got = site.get(
            "/",
            Req {
                cookie: Some(&cookie),
                h2,
                ..Req::default()
            },
        );
        assert_eq!(got.status, 502, "{got:?}\n{}", site.logs());
    }
    // A new session goes to the live server.
    let fresh = site.get("/", Req::default());
    assert_eq!(fresh.status, 200, "{fresh:?}");
    assert_ne!(server_of(&fresh), pinned);
    assert!(site.metric("ktls_proxy_sticky_sessions_server_down_total") >= 2);
}

#[test]
fn a_learned_session_follows_the_server_that_set_it() {
    let backends = Backends::start(3);
    let site = Site::start(
        "sticky-learn",
        &backends.group("sticky_sessions; learn name=sid;"),
        "",
    );
    for h2 in [false, true] {
        let login = site.get(
            "/login",
            Req {
                h2,
                ..Req::default()
            },
        );
        let home = server_of(&login);
        let set = login
            .header("set-cookie")
            .expect("the backend's cookie")
            .to_string();
        let sid = set.split(';').next().unwrap_or("").to_string();
        assert!(sid.starts_with(&format!("sid=srv-{home}-")), "{sid}");
        for _ in 0..5 {
            let got = site.get(
                "/page",
                Req {
                    cookie: Some(&sid),
                    h2,
                    ..Req::default()
                },
            );
            assert_eq!(server_of(&got), home, "{got:?}");
            // The learned cookie is the backend's own: it is forwarded.
            assert_eq!(got.header("x-seen-cookie"), Some(sid.as_str()));
        }
    }
}
