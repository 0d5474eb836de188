//! Shared by the frang end-to-end suites (frang.rs, frang_conn.rs).
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get_with, Outcome, RawClient, RawResponse};

pub const T: Duration = Duration::from_secs(5);
pub const HOST: &str = "site.test";

pub struct Frang {
    pub origin: Origin,
    pub proxy: Proxy,
    pub http: SocketAddr,
    pub https: SocketAddr,
}

/// A proxy with `frang_limits { limits }` at top level and `extra` directives (by default
/// `block_action attack reply;`), in front of an origin that answers 200 with `X-Got: PATH:BODY
/// LENGTH`, or 404 for paths starting with /missing. Responses have no body, so the origin
/// writes each in one piece and no Nagle/delayed-ACK stall stretches the rate tests.
pub fn start(tag: &str, limits: &str, extra: &str) -> Frang {
    let origin = Origin::start(|r| {
        if r.path().starts_with("/missing") {
            Response::ok(Vec::new()).status(404)
        } else {
            Response::ok(Vec::new()).header("X-Got", &format!("{}:{}", r.path(), r.body.len()))
        }
    });
    let setup = Setup::new(tag);
    let conf = setup.config(
        origin.addr(),
        "",
        &format!("frang_limits {{\n{limits}\n}}\n{extra}\n"),
    );
    let (http, https) = (setup.http, setup.https);
    let proxy = setup.start(&conf);
    Frang {
        origin,
        proxy,
        http,
        https,
    }
}

pub const REPLY: &str = "block_action attack reply;";

pub fn ip(a: u8, b: u8, c: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, a, b, c)
}

impl Frang {
    pub fn client(&self, src: Ipv4Addr) -> RawClient {
        RawClient::connect_from(src, self.http).expect("connect")
    }

    /// One request on a new connection from `src`.
    pub fn once(&self, src: Ipv4Addr, request: &[u8]) -> Outcome {
        match RawClient::connect_from(src, self.http) {
            Ok(mut c) => c.request(request, T),
            Err(e) => Outcome::Error(format!("connect: {e}")),
        }
    }

    pub fn expect(&self, outcome: Outcome, status: u16, what: &str) -> RawResponse {
        match outcome {
            Outcome::Response(r) if r.status == status => r,
            other => panic!(
                "{what}: expected {status}, got {other}\n{}",
                self.proxy.proc.logs()
            ),
        }
    }

    pub fn expect_dropped(&self, outcome: Outcome, what: &str) {
        assert!(
            matches!(outcome, Outcome::Closed | Outcome::Reset),
            "{what}: expected the connection dropped without a response, got {outcome}\n{}",
            self.proxy.proc.logs()
        );
    }

    /// Expects a 403 and then the connection closed.
    pub fn expect_blocked(&self, c: &mut RawClient, outcome: Outcome, what: &str) {
        self.expect(outcome, 403, what);
        let after = c.wait_closed(T);
        assert!(after.is_dropped(), "{what}: open after the 403: {after}");
    }

    /// Sends `request` from a new connection and expects 403 then close.
    pub fn blocked(&self, src: Ipv4Addr, request: &[u8], what: &str) {
        let mut c = self.client(src);
        let outcome = c.request(request, T);
        self.expect_blocked(&mut c, outcome, what);
    }

    /// As [`Frang::blocked`], for a proxy with `ip_block`: then a new connection from `src`
    /// is refused.
    pub fn blocked_and_banned(&self, src: Ipv4Addr, request: &[u8], what: &str) {
        self.blocked(src, request, what);
        let outcome = self.once(src, &closing_get("/after"));
        self.expect_dropped(outcome, &format!("{what}: a new connection under ip_block"));
    }

    /// Sends `request` from a new connection and expects 200.
    pub fn served(&self, src: Ipv4Addr, request: &[u8], what: &str) -> RawResponse {
        self.expect(self.once(src, request), 200, what)
    }
}

pub fn closing_get(path: &str) -> Vec<u8> {
    get_with(path, HOST, "Connection: close\r\n")
}

// ---------------------------------------------------------------------------------------
// Request rates
// ---------------------------------------------------------------------------------------

/// A burst counts within one eighth of a second, whose boundaries the test cannot see: a
/// burst of `limit + 1` quick events is blocked unless it straddles a boundary, in which case
/// all pass and the attempt is repeated from a fresh address. `attempt` returns how many
/// events passed before the first refusal.
pub fn burst_attempts(limit: usize, mut attempt: impl FnMut(Ipv4Addr) -> usize) {
    let mut results = Vec::new();
    for n in 0..4u8 {
        let passed = attempt(ip(0, 9, 10 + n));
        assert!(
            passed == limit || passed == limit + 1,
            "burst limit {limit}: {passed} of {} passed (attempts so far: {results:?})",
            limit + 1
        );
        results.push(passed);
        if passed == limit {
            return;
        }
    }
    panic!("burst limit {limit} never applied: {results:?}");
}

pub fn post(path: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {HOST}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
