//! Frang's request-level limits end to end (rates, lengths, methods, Host, content types,
//! response codes): each limit just under (served) and just over (blocked: 403 with
//! `block_action attack reply`, or the connection dropped). Connection-level limits are in
//! frang_conn.rs.

use std::time::Instant;

use e2e::rawclient::{get, get_with, Outcome, RawClient};

mod frang_common;

use frang_common::*;

#[test]
fn request_rate_on_one_keep_alive_connection() {
    let f = start("frang-rr-ka", "request_rate 5;", REPLY);
    let mut c = f.client(ip(0, 1, 1));
    let started = Instant::now();
    for i in 1..=5 {
        f.expect(
            c.request(&get(&format!("/r{i}"), HOST), T),
            200,
            &format!("request {i}"),
        );
    }
    let outcome = c.request(&get("/r6", HOST), T);
    let elapsed = started.elapsed();
    assert_eq!(
        outcome.status(),
        Some(403),
        "6th request within {elapsed:?} (rate 5/s): {outcome}\n{}",
        f.proxy.proc.logs()
    );
    assert!(c.wait_closed(T).is_dropped());
    assert_eq!(f.origin.total_requests(), 5);
    // Another client is not affected.
    f.served(ip(0, 1, 2), &closing_get("/other"), "another address");
}

#[test]
fn request_rate_across_connections() {
    let f = start("frang-rr-conns", "request_rate 5;", REPLY);
    let src = ip(0, 1, 3);
    let started = Instant::now();
    for i in 1..=5 {
        f.served(
            src,
            &closing_get(&format!("/c{i}")),
            &format!("connection {i}"),
        );
    }
    let mut c = f.client(src);
    let outcome = c.request(&closing_get("/c6"), T);
    let what = format!("6th connection within {:?}", started.elapsed());
    f.expect_blocked(&mut c, outcome, &what);
    assert_eq!(f.origin.total_requests(), 5);
}

#[test]
fn request_rate_with_attack_drop_resets_without_a_response() {
    let f = start(
        "frang-rr-drop",
        "request_rate 3;",
        "block_action attack drop;",
    );
    let mut c = f.client(ip(0, 1, 4));
    for i in 1..=3 {
        f.expect(c.request(&get("/d", HOST), T), 200, &format!("request {i}"));
    }
    let outcome = c.request(&get("/d", HOST), T);
    f.expect_dropped(outcome, "4th request with block_action attack drop");
    assert_eq!(f.origin.total_requests(), 3);
}

#[test]
fn request_burst_on_one_connection_and_across_connections() {
    let f = start("frang-rb", "request_burst 3;", REPLY);
    // Pipelined on one keep-alive connection.
    burst_attempts(3, |src| {
        let mut c = f.client(src);
        let mut all = Vec::new();
        for i in 0..4 {
            all.extend_from_slice(&get(&format!("/p{i}"), HOST));
        }
        c.send(&all).expect("send");
        let mut passed = 0;
        for _ in 0..4 {
            match c.read_response(T) {
                Outcome::Response(r) if r.status == 200 => passed += 1,
                Outcome::Response(r) if r.status == 403 => break,
                other => panic!("pipelined burst: {other}\n{}", f.proxy.proc.logs()),
            }
        }
        passed
    });
    // One request per connection, the connections opened together.
    burst_attempts(3, |src| {
        let mut clients: Vec<RawClient> = (0..4)
            .map(|_| f.client(ip(0, 8, src.octets()[3])))
            .collect();
        for c in &mut clients {
            c.send(&closing_get("/b")).expect("send");
        }
        let statuses: Vec<Option<u16>> = clients
            .iter_mut()
            .map(|c| c.read_response(T).status())
            .collect();
        assert!(
            statuses.iter().all(|s| matches!(s, Some(200 | 403))),
            "{statuses:?}"
        );
        statuses.iter().filter(|s| **s == Some(200)).count()
    });
}

/// A proxy with `limits`, a stats endpoint and an origin answering 200 with no body.
#[test]
fn http_uri_len() {
    let f = start("frang-uri", "http_uri_len 20;\nip_block 5;", REPLY);
    let at_limit = format!("/{}", "a".repeat(19));
    let over = format!("/{}", "a".repeat(20));
    f.served(ip(0, 7, 1), &closing_get(&at_limit), "URI of 20 bytes");
    f.blocked_and_banned(ip(0, 7, 2), &closing_get(&over), "URI of 21 bytes");
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_hdr_len() {
    let f = start("frang-hdr-len", "http_hdr_len 30;\nip_block 5;", REPLY);
    // "X-Long: " is 8 bytes: a 22-byte value makes a 30-byte field.
    let at_limit = format!("X-Long: {}\r\n", "v".repeat(22));
    let over = format!("X-Long: {}\r\n", "v".repeat(23));
    f.served(
        ip(0, 7, 3),
        &get_with("/h", HOST, &at_limit),
        "30-byte field",
    );
    f.blocked_and_banned(ip(0, 7, 4), &get_with("/h", HOST, &over), "31-byte field");
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_header_cnt() {
    let f = start("frang-hdr-cnt", "http_header_cnt 5;\nip_block 5;", REPLY);
    // Host plus four.
    let four = "A: 1\r\nB: 2\r\nC: 3\r\nConnection: close\r\n";
    f.served(ip(0, 7, 5), &get_with("/c", HOST, four), "5 fields");
    f.blocked_and_banned(
        ip(0, 7, 6),
        &get_with("/c", HOST, &format!("D: 4\r\n{four}")),
        "6 fields",
    );
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_body_len_content_length() {
    let f = start("frang-body", "http_body_len 10;\nip_block 5;", REPLY);
    let ct = "Content-Type: text/plain\r\n";
    let r = f.served(ip(0, 7, 7), &post("/p", ct, "0123456789"), "10-byte body");
    assert_eq!(r.header("x-got"), Some("/p:10"));
    f.blocked_and_banned(ip(0, 7, 8), &post("/p", ct, "0123456789a"), "11-byte body");
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_body_len_chunked() {
    // Chunked: the length is known only as the body arrives.
    let f = start(
        "frang-body-chunked",
        "http_body_len 10;\nip_block 5;",
        REPLY,
    );
    let chunked = "POST /c HTTP/1.1\r\nHost: site.test\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let ok = format!("{chunked}5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n");
    let r = f.served(ip(0, 7, 9), ok.as_bytes(), "10 bytes chunked");
    assert_eq!(r.header("x-got"), Some("/c:10"));
    let over = format!("{chunked}5\r\n01234\r\n6\r\n56789a\r\n0\r\n\r\n");
    f.blocked_and_banned(ip(0, 7, 10), over.as_bytes(), "11 bytes chunked");
    assert_eq!(f.origin.total_requests(), 1);
}

#[test]
fn http_methods() {
    let f = start("frang-methods", "http_methods get head;", REPLY);
    f.served(ip(0, 7, 11), &closing_get("/m"), "GET");
    let head = format!("HEAD /m HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
    f.served(ip(0, 7, 11), head.as_bytes(), "HEAD");
    f.blocked(
        ip(0, 7, 12),
        &post("/m", "Content-Type: text/plain\r\n", "x"),
        "POST",
    );
    let delete = format!("DELETE /m HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    f.blocked(ip(0, 7, 13), delete.as_bytes(), "DELETE");
    assert_eq!(f.origin.total_requests(), 2);
}

#[test]
fn http_ct_required_and_ct_vals() {
    let f = start("frang-ct-req", "http_ct_required true;", REPLY);
    f.blocked(
        ip(0, 7, 14),
        &post("/p", "", "x"),
        "POST without Content-Type",
    );
    f.served(
        ip(0, 7, 15),
        &post("/p", "Content-Type: text/plain\r\n", "x"),
        "with",
    );
    f.served(ip(0, 7, 15), &closing_get("/g"), "GET needs none");
    assert_eq!(f.origin.total_requests(), 2);

    let f = start(
        "frang-ct-vals",
        "http_ct_vals \"text/plain\" \"application/json\";",
        REPLY,
    );
    for ct in [
        "text/plain",
        "application/json; charset=utf-8",
        "Application/JSON",
    ] {
        f.served(
            ip(0, 7, 16),
            &post("/p", &format!("Content-Type: {ct}\r\n"), "x"),
            ct,
        );
    }
    for ct in ["text/html", "application/xml"] {
        f.blocked(
            ip(0, 7, 17),
            &post("/p", &format!("Content-Type: {ct}\r\n"), "x"),
            ct,
        );
    }
    f.blocked(
        ip(0, 7, 18),
        &post("/p", "", "x"),
        "POST without Content-Type",
    );
    assert_eq!(f.origin.total_requests(), 3);
}

#[test]
fn http_strict_host_checking() {
    let f = start("frang-host", "", REPLY);
    let src = ip(0, 7, 20);
    let abs = |uri_host: &str, host: &str| {
        format!("GET http://{uri_host}/a HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
    };
    f.served(src, abs("site.test", "site.test").as_bytes(), "matching");
    f.served(
        src,
        abs("SITE.test", "site.TEST").as_bytes(),
        "matching, other case",
    );
    f.blocked(src, abs("other.test", "site.test").as_bytes(), "mismatch");
    f.blocked(
        src,
        abs("site.test:81", "site.test").as_bytes(),
        "port mismatch",
    );
    let ip_host = b"GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    f.blocked(src, ip_host, "IP address as Host");
    assert_eq!(f.origin.total_requests(), 2);

    let f = start("frang-host-off", "http_strict_host_checking false;", REPLY);
    f.served(
        ip(0, 7, 21),
        abs("other.test", "site.test").as_bytes(),
        "mismatch allowed",
    );
}

#[test]
fn http_method_override_allowed() {
    let f = start("frang-override", "", REPLY);
    let req = |method: &str| {
        get_with(
            "/o",
            HOST,
            &format!("X-HTTP-Method-Override: {method}\r\nConnection: close\r\n"),
        )
    };
    f.blocked(ip(0, 7, 22), &req("HEAD"), "override by default");
    let f = start(
        "frang-override-on",
        "http_method_override_allowed true;",
        REPLY,
    );
    f.served(ip(0, 7, 23), &req("HEAD"), "override allowed");
    f.blocked(
        ip(0, 7, 24),
        &req("DELETE"),
        "override to a method not allowed",
    );
    // Two override fields: frang checks the preferred one (GET), an origin may obey the
    // other (DELETE).
    let two = get_with(
        "/o",
        HOST,
        "X-HTTP-Method-Override: GET\r\nX-HTTP-Method: DELETE\r\nConnection: close\r\n",
    );
    f.blocked(
        ip(0, 7, 25),
        &two,
        "override fields naming different methods",
    );
    assert_eq!(f.origin.total_requests(), 1);
}

// ---------------------------------------------------------------------------------------
// Responses and ip_block
// ---------------------------------------------------------------------------------------

#[test]
fn http_resp_code_block_blocks_after_too_many_404s() {
    let f = start(
        "frang-resp",
        "http_resp_code_block 404 403 3 5;\nip_block 5;",
        REPLY,
    );
    let src = ip(0, 8, 1);
    let mut c = f.client(src);
    for i in 1..=3 {
        f.expect(
            c.request(&get(&format!("/missing{i}"), HOST), T),
            404,
            &format!("404 #{i}"),
        );
    }
    // The 4th never goes out: as in Tempesta, 403 replaces it, the connection closes and
    // the address is blocked.
    f.expect(
        c.request(&get("/missing4", HOST), T),
        403,
        "404 #4 replaced",
    );
    let after = c.wait_closed(T);
    assert!(after.is_dropped(), "open after the 4th 404: {after}");
    f.expect_dropped(f.once(src, &closing_get("/ok")), "blocked address");
    f.served(ip(0, 8, 2), &closing_get("/ok"), "another address");
    assert_eq!(f.origin.total_requests(), 5);
}
