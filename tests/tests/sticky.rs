//! Issue 20 through the real binary: the sticky cookie (issued, verified, stripped before
//! the origin sees it; forged, moved and expired cookies refused), `cookie enforce` (302 to
//! the same URI, then a block after `max_misses` misses on one connection within a second)
//! and the JavaScript challenge (too early, too late and in the window, with a client that
//! reads the page, waits and sets the cookie; a real headless Chromium when installed; curl
//! never passes). HTTP/1.1 clients and HTTP/2 (h2c) clients alike. Sticky sessions: sticky_sessions.rs.

mod sticky_common;

use std::process::Command;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::rawclient::{get_with, Outcome, RawClient};
use e2e::{curl, free_port, Proc, TempDir};
use sticky_common::{Req, Site};

/// An origin that answers with the Cookie field it received (`-` when none).
fn cookie_echo() -> Origin {
    Origin::start(|r| Response::ok(format!("cookie={}", r.header("cookie").unwrap_or("-"))))
}

fn group(origin: &Origin) -> String {
    format!("srv_group default {{ server {}; }}", origin.addr())
}

/// Attack: a forged MAC, and the real cookie `value` from another browser, are not valid: a
/// fresh cookie is issued and neither reaches the origin.
fn forged_and_moved_cookies_are_replaced(site: &Site, value: &str, h2: bool) {
    let tag = if h2 { "h2" } else { "h1" };
    let mut forged = value.to_string();
    let last = if forged.ends_with('0') { "1" } else { "0" };
    forged.replace_range(79.., last);
    for (cookie, ua) in [
        (format!("__tfw={forged}"), None),
        (format!("__tfw={value}"), Some("OtherBrowser/1.0")),
    ] {
        let got = site.get(
            "/",
            Req {
                cookie: Some(&cookie),
                h2,
                user_agent: ua,
                ..Req::default()
            },
        );
        assert_eq!(got.status, 200, "{tag}");
        assert_eq!(got.body, "cookie=-", "{tag}");
        let fresh = got
            .sticky_value()
            .unwrap_or_else(|| panic!("{tag} {got:?}"));
        assert_ne!(fresh, forged, "{tag}");
    }
}

#[test]
fn the_cookie_is_issued_once_verified_and_never_reaches_the_origin() {
    let origin = cookie_echo();
    let site = Site::start(
        "sticky-issue",
        &group(&origin),
        "sticky { cookie; secret \"s3cret\"; }",
    );
    for h2 in [false, true] {
        let tag = if h2 { "h2" } else { "h1" };
        // No cookie: forwarded, and the response sets one; other cookies reach the origin.
        let first = site.get(
            "/",
            Req {
                cookie: Some("a=1; b=2"),
                h2,
                ..Req::default()
            },
        );
        assert_eq!(first.status, 200, "{tag} {first:?}\n{}", site.logs());
        assert_eq!(first.body, "cookie=a=1; b=2", "{tag}");
        let value = first
            .sticky_value()
            .unwrap_or_else(|| panic!("{tag} {first:?}"));
        assert_eq!(value.len(), 80, "{tag} {value}");
        assert!(
            first.header("set-cookie").unwrap_or("").contains("Path=/"),
            "{tag} {first:?}"
        );
        // No sess_lifetime, no Max-Age in cookie_options: Tempesta's unlimited lifetime
        // (UINT_MAX seconds) as Max-Age, so the cookie outlives the browser session.
        assert!(
            first
                .header("set-cookie")
                .unwrap_or("")
                .ends_with("; Max-Age=4294967295"),
            "{tag} {first:?}"
        );
        // With it: not issued again; stripped, the others byte for byte.
        let jar = format!("a=1;  __tfw={value}; b=\"x y\"");
        let again = site.get(
            "/",
            Req {
                cookie: Some(&jar),
                h2,
                ..Req::default()
            },
        );
        assert_eq!(again.status, 200, "{tag}");
        assert_eq!(again.header("set-cookie"), None, "{tag} {again:?}");
        assert_eq!(again.body, "cookie=a=1; b=\"x y\"", "{tag}");
        // Only ours: the origin gets no Cookie field at all.
        let only = format!("__tfw={value}");
        let alone = site.get(
            "/",
            Req {
                cookie: Some(&only),
                h2,
                ..Req::default()
            },
        );
        assert_eq!(alone.body, "cookie=-", "{tag}");
        assert_eq!(alone.header("set-cookie"), None, "{tag}");
        forged_and_moved_cookies_are_replaced(&site, &value, h2);
    }
    // Six responses set a cookie (each protocol: the first, the forged, the moved one).
    assert_eq!(site.metric("ktls_proxy_sticky_cookies_issued_total"), 6);
    assert_eq!(site.metric("ktls_proxy_sticky_misses_total"), 0);
}

/// Statuses of four requests without a cookie on one keep-alive connection from 127.0.0.2,
/// the fourth after `pause` (0 for no answer: the connection was dropped).
fn misses_on_one_connection(site: &Site, pause: Duration) -> Vec<u16> {
    let src = "127.0.0.2".parse().expect("address");
    let mut c = RawClient::connect_from(src, site.http).expect("connect");
    let req = get_with("/", &site.http.to_string(), "Accept: text/html\r\n");
    let mut statuses = Vec::new();
    for i in 0..4 {
        if i == 3 {
            std::thread::sleep(pause);
        }
        match c.request(&req, Duration::from_secs(5)) {
            Outcome::Response(r) => statuses.push(r.status),
            _ => {
                statuses.push(0);
                break;
            }
        }
    }
    statuses
}

#[test]
fn enforce_redirects_to_the_same_uri_then_blocks_after_max_misses() {
    let origin = cookie_echo();
    let site = Site::start(
        "sticky-enforce",
        &group(&origin),
        "sticky { cookie enforce max_misses=3; secret \"k\"; sess_lifetime 1; }",
    );
    let me = Req {
        from: Some("127.0.0.2"),
        ..Req::default()
    };
    let r = site.get("/a/b?x=1&y=2", me);
    assert_eq!(r.status, 302, "{r:?}\n{}", site.logs());
    // Absolute, as Tempesta writes it: the scheme, the Host as sent, the URI.
    let location = format!("http://{}/a/b?x=1&y=2", site.http);
    assert_eq!(r.header("location"), Some(location.as_str()));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let value = r.sticky_value().expect("302 sets the cookie");
    assert!(r.header("set-cookie").unwrap_or("").contains("Max-Age=1"));
    assert_eq!(origin.total_requests(), 0, "a 302 never reaches the origin");
    // The cookie the 302 set lets the request through, without the cookie.
    let cookie = format!("__tfw={value}; keep=1");
    let ok = site.get(
        "/a/b?x=1&y=2",
        Req {
            cookie: Some(&cookie),
            ..me
        },
    );
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(ok.body, "cookie=keep=1");
    // Attack: replay after sess_lifetime (1 s): a miss, another 302.
    std::thread::sleep(Duration::from_millis(2100));
    let expired = site.get(
        "/",
        Req {
            cookie: Some(&cookie),
            ..me
        },
    );
    assert_eq!(expired.status, 302, "{expired:?}");
    // HTTP/2 from the same client: the third miss, still a 302 with the cookie.
    let h2 = site.get("/h2", Req { h2: true, ..me });
    assert_eq!(h2.status, 302, "{h2:?}");
    let location = format!("http://{}/h2", site.h2c);
    assert_eq!(h2.header("location"), Some(location.as_str()));
    assert!(h2.sticky_value().is_some(), "{h2:?}");
    // Each of those was another connection: Tempesta counts misses per connection within
    // one second, so none was blocked. On one connection, the fourth miss within a second
    // is over max_misses=3: blocked (block_action attack drop: no answer).
    assert_eq!(
        misses_on_one_connection(&site, Duration::ZERO),
        [302, 302, 302, 0]
    );
    // The same address on a new connection starts afresh (the previous binary counted per
    // address and without a time window: blocked here), and misses more than a second
    // apart do not add up.
    assert_eq!(
        misses_on_one_connection(&site, Duration::from_millis(1200)),
        [302, 302, 302, 302],
        "{}",
        site.logs()
    );
    assert_eq!(origin.total_requests(), 1);
    assert_eq!(site.metric("ktls_proxy_sticky_misses_total"), 11);
    assert_eq!(site.metric("ktls_proxy_sticky_redirects_total"), 10);
    assert_eq!(site.metric("ktls_proxy_sticky_blocks_total"), 1);
    assert_eq!(
        site.metric("ktls_proxy_blocks_total{limit=\"sticky_max_misses\"}"),
        1
    );
}

/// The cookie string and the wait a challenge page carries.
fn read_challenge(page: &str) -> (String, Duration) {
    let cookie = page
        .split("document.cookie = \"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_else(|| panic!("no cookie in the page:\n{page}"));
    let ms: u64 = page
        .split("}, ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no delay in the page:\n{page}"));
    // What `document.cookie = ...` sends back: the pair before the attributes.
    let pair = cookie.split(';').next().unwrap_or("").to_string();
    (pair, Duration::from_millis(ms))
}

const CHALLENGE: &str = "sticky { cookie enforce max_misses=20; secret \"k\"; \
                         js_challenge resp_code=503 delay_min=1000 delay_range=1500; }";

/// A Tempesta js_challenge template has no `${COOKIE}`: its script only waits and reloads,
/// the cookie comes with the 503 in Set-Cookie (http_sess.c tfw_http_sticky_build_redirect
/// puts it in the challenge response). Such a template loads and its page is served with
/// the cookie, which passes once the wait is over.
#[test]
fn a_template_without_the_cookie_placeholder_gets_the_cookie_in_set_cookie() {
    let origin = cookie_echo();
    let dir = e2e::TempDir::new("sticky-js-template");
    let template = dir.join("js_challenge.html");
    std::fs::write(
        &template,
        "<html><script>setTimeout(function(){location.reload()}, ${DELAY_MS});</script></html>",
    )
    .expect("write template");
    let top = format!(
        "sticky {{ cookie enforce max_misses=20; secret \"k\"; \
         js_challenge resp_code=503 delay_min=1000 delay_range=1500 {}; }}",
        template.display()
    );
    let site = Site::start("sticky-js-tpl", &group(&origin), &top);
    let page = site.get("/", Req::default());
    assert_eq!(page.status, 503, "{page:?}\n{}", site.logs());
    assert!(page.body.contains("location.reload()"), "{}", page.body);
    let value = page
        .sticky_value()
        .unwrap_or_else(|| panic!("no sticky Set-Cookie: {page:?}"));
    std::thread::sleep(Duration::from_millis(1375));
    let jar = format!("__tfw={value}");
    let passed = site.get(
        "/in",
        Req {
            cookie: Some(&jar),
            ..Req::default()
        },
    );
    assert_eq!(passed.status, 200, "{passed:?}\n{}", site.logs());
}

/// Requests a browser would not run a challenge for (a GET whose Accept does not name
/// text/html, a POST) get 403 instead of the page, and no miss is counted: Tempesta's
/// tfw_http_sticky_redirect_applied returns before frang_sticky_cookie_handler counts, and
/// the request not served from the cache gets 403 (TFW_HTTP_B_JS_NOT_SUPPORTED).
#[test]
fn requests_that_cannot_run_the_challenge_get_403_and_count_no_miss() {
    let origin = cookie_echo();
    let top = "sticky { cookie enforce max_misses=1; secret \"k\"; \
               js_challenge resp_code=503 delay_min=1000 delay_range=1500; }";
    let site = Site::start("sticky-js-403", &group(&origin), top);
    for _ in 0..3 {
        let image = site.get(
            "/logo.png",
            Req {
                accept: Some("image/*,*/*"),
                ..Req::default()
            },
        );
        assert_eq!(image.status, 403, "{image:?}\n{}", site.logs());
        let url = format!("http://{}/form", site.http);
        let (_, out, _) = e2e::curl(
            &[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-X",
                "POST",
                "-H",
                "Accept: text/html",
                "-d",
                "x=1",
                &url,
            ],
            10,
        );
        assert_eq!(out.trim(), "403", "POST");
    }
    // Six refusals and no block: the first challengeable request gets the page.
    let page = site.get("/", Req::default());
    assert_eq!(page.status, 503, "{page:?}\n{}", site.logs());
}

/// The final status curl gets keeping cookies and following redirects: it never gets past
/// the challenge page.
fn curl_with_a_cookie_jar(site: &Site) -> String {
    let dir = TempDir::new("sticky-jar");
    let jar = dir.join("jar");
    let jar = jar.to_str().unwrap_or("jar");
    let (_, out, _) = curl(
        &[
            "-L",
            "-H",
            "Accept: text/html",
            "-c",
            jar,
            "-b",
            jar,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://{}/curl", site.http),
        ],
        10,
    );
    out
}

#[test]
fn the_challenge_counts_cookies_too_early_or_too_late_and_passes_one_in_time() {
    let origin = cookie_echo();
    let site = Site::start("sticky-js", &group(&origin), CHALLENGE);
    let page = site.get("/", Req::default());
    assert_eq!(page.status, 503, "{page:?}\n{}", site.logs());
    assert!(page
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/html"));
    let (cookie, wait) = read_challenge(&page.body);
    // The challenge carries the cookie in Set-Cookie too, as Tempesta's does.
    let set = page.header("set-cookie").unwrap_or("");
    assert_eq!(set.split(';').next(), Some(cookie.as_str()), "{page:?}");
    // page_delay: delay_min + a quarter of delay_range.
    assert_eq!(wait, Duration::from_millis(1375));
    // Too early: a client replaying the cookie at once gets the challenge again.
    let early = site.get(
        "/",
        Req {
            cookie: Some(&cookie),
            ..Req::default()
        },
    );
    assert_eq!(early.status, 503, "{early:?}");
    // In the window: a client that waits as the page says passes, and stays passed.
    let (cookie, wait) = read_challenge(&early.body);
    let issued = Instant::now();
    std::thread::sleep(wait);
    let jar = format!("{cookie}; app=7");
    let passed = site.get(
        "/in",
        Req {
            cookie: Some(&jar),
            ..Req::default()
        },
    );
    assert_eq!(passed.status, 200, "{passed:?}\n{}", site.logs());
    assert_eq!(passed.body, "cookie=app=7");
    assert!(issued.elapsed() < Duration::from_millis(2500));
    std::thread::sleep(Duration::from_millis(1300));
    let later = site.get(
        "/later",
        Req {
            cookie: Some(&jar),
            h2: true,
            ..Req::default()
        },
    );
    assert_eq!(
        later.status, 200,
        "a passed cookie is not timed again: {later:?}"
    );
    // Too late: presented after delay_min + delay_range.
    let page = site.get("/", Req::default());
    let (cookie, _) = read_challenge(&page.body);
    std::thread::sleep(Duration::from_millis(2700));
    let late = site.get(
        "/",
        Req {
            cookie: Some(&cookie),
            h2: true,
            ..Req::default()
        },
    );
    assert_eq!(late.status, 503, "{late:?}");
    assert!(
        late.body.contains("document.cookie"),
        "h2 gets the page too"
    );
    assert_eq!(curl_with_a_cookie_jar(&site), "503");
    assert_eq!(origin.hits("/curl"), 0);
    assert_eq!(origin.total_requests(), 2, "only the two passed requests");
    assert_eq!(site.metric("ktls_proxy_sticky_challenges_total"), 5);
}

/// Chromium, when installed (`KTLS_PROXY_REQUIRE_CHROMIUM=1` makes its absence a failure):
/// it runs the challenge's script, waits, reloads with the cookie and reaches the origin.
#[test]
fn a_real_browser_passes_the_challenge() {
    let Some(chromium) = e2e::chromium("the challenge") else {
        return;
    };
    let origin = Origin::start(|_| {
        Response::ok("<html><head><title>origin reached</title></head><body>hello</body></html>")
            .header("Content-Type", "text/html")
    });
    let site = Site::start("sticky-chromium", &group(&origin), CHALLENGE);
    let profile = TempDir::new("sticky-chromium-profile");
    let devtools = free_port();
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        &format!("--remote-debugging-port={devtools}"),
        &format!("--user-data-dir={}", profile.path().display()),
        &format!("http://{}/app", site.http),
    ]);
    let browser = Proc::spawn("chromium", cmd, profile.path());
    // The page's title, read from the DevTools target list, tells where the tab is.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut titles = String::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        let (_, list, _) = curl(&[&format!("http://127.0.0.1:{devtools}/json/list")], 2);
        titles = list;
        if titles.contains("origin reached") {
            break;
        }
    }
    assert!(
        titles.contains("origin reached"),
        "the browser did not pass the challenge:\n{titles}\n{}\n{}",
        browser.logs(),
        site.logs()
    );
    let reached = origin.requests();
    assert!(reached.iter().any(|r| r.path() == "/app"), "{reached:?}");
    assert!(
        reached
            .iter()
            .all(|r| !r.header("cookie").unwrap_or("").contains("__tfw")),
        "the cookie is stripped: {reached:?}"
    );
    assert!(site.metric("ktls_proxy_sticky_challenges_total") >= 1);
}
