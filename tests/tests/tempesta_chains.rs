//! Tempesta parity, round 2 (issue 35): `http_chain` rules as Tempesta reads them, from its
//! source (fw/http_match.c) and its functional tests (tempesta-test
//! tests/http_rules/test_http_tables.py), through the real binary.

use std::net::SocketAddr;
use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get_with, Outcome, RawClient};

const T: Duration = Duration::from_secs(5);

/// Three vhosts `vh1`, `vh2`, `vh5`, each with an origin answering its own name, and
/// `chain` as the main chain; `block_action attack reply` so a block is a visible 403.
fn three_vhosts(tag: &str, chain: &str) -> (Proxy, SocketAddr, Vec<Origin>) {
    let origins: Vec<Origin> = ["vh1", "vh2", "vh5"]
        .into_iter()
        .map(|name| Origin::start(move |_| Response::ok(name)))
        .collect();
    let setup = Setup::new(tag);
    let text = format!(
        "listen {http};\nblock_action attack reply;\n\
         frang_limits {{ http_strict_host_checking false; }}\n\
         srv_group g1 {{ server {a}; }}\nsrv_group g2 {{ server {b}; }}\n\
         srv_group g5 {{ server {c}; }}\n\
         vhost vh1 {{ proxy_pass g1; }}\nvhost vh2 {{ proxy_pass g2; }}\n\
         vhost vh5 {{ proxy_pass g5; }}\n{chain}\n",
        http = setup.http,
        a = origins[0].addr(),
        b = origins[1].addr(),
        c = origins[2].addr(),
    );
    let http = setup.http;
    (setup.start(&text), http, origins)
}

/// The vhost that answered `extra` (header lines), or the status when no vhost did.
fn routed(http: SocketAddr, extra: &str, proxy: &Proxy) -> Result<String, u16> {
    let mut c = RawClient::connect(http).expect("connect");
    match c.request(&get_with("/baz/index.html", "site", extra), T) {
        Outcome::Response(r) if r.status == 200 => Ok(String::from_utf8_lossy(&r.body).into()),
        Outcome::Response(r) => Err(r.status),
        other => panic!("{extra:?}: {other}\n{}", proxy.proc.logs()),
    }
}

/// Cookie-name wildcards: `cookie "*suffix"` and `cookie "prefix*"` match any cookie whose
/// name ends or begins so, `cookie "NAME" == "*"` any value of that cookie; rules are tried
/// in order (tempesta-test HttpTablesTestMultipleCookies, its seven cases).
#[test]
fn cookie_names_match_with_wildcards() {
    let chain = "http_chain {\n\
         cookie \"tempesta_good\" == \"*\" -> vh2;\n\
         cookie \"tempesta\" == \"good\" -> vh1;\n\
         cookie \"tempesta_bad\" == \"*\" -> block;\n\
         cookie \"tempesta\" == \"bad\" -> block;\n\
         cookie \"*good_suffix\" == \"g*\" -> vh2;\n\
         cookie \"good_prefix*\" == \"g*\" -> vh2;\n\
         -> vh5;\n}";
    let (proxy, http, _origins) = three_vhosts("chains-cookies", chain);
    let cases: [(&str, Result<&str, u16>); 7] = [
        ("rule1=action1; rule2=action2; tempesta=good", Ok("vh1")),
        (
            "rule1=action1; tempesta_bad=test; tempesta_good=test",
            Ok("vh2"),
        ),
        ("rule1=action1; tempesta_bad=test; rule2=action2", Err(403)),
        ("rule1=action1; tempesta=bad; rule2=action2", Err(403)),
        (
            "tempesta=action1; tempesta=test; tempesta=action2",
            Ok("vh5"),
        ),
        (
            "aaa_good_suffix_1=ggg; bbb_good_suffix=gaction; ccc_good_suffix=action1",
            Ok("vh2"),
        ),
        (
            "good_prefix_1=ggg; 1_good_prefix=gaction; good_prefix=gaction2",
            Ok("vh2"),
        ),
    ];
    for (cookies, expected) in cases {
        let got = routed(http, &format!("Cookie: {cookies}\r\n"), &proxy);
        assert_eq!(
            got.as_deref().map_err(|s| *s),
            expected,
            "Cookie: {cookies}"
        );
    }
}

/// Spaces around a `hdr` name and a `hdr` value pattern are not part of them (Tempesta's
/// find_spaces in tfw_http_arg_adjust; tempesta-test TestHttpTablesPatternTrimming).
#[test]
fn spaces_around_hdr_patterns_are_trimmed() {
    let chain = "http_chain {\n\
         hdr \"  raw_hdr1\" == \" hdr_value_1 \" -> vh1;\n\
         hdr \"  r  \" == \" v \" -> vh2;\n\
         -> block;\n}";
    let (proxy, http, _origins) = three_vhosts("chains-trim", chain);
    assert_eq!(
        routed(http, "raw_hdr1: hdr_value_1\r\n", &proxy),
        Ok("vh1".into())
    );
    assert_eq!(routed(http, "r: v\r\n", &proxy), Ok("vh2".into()));
    assert_eq!(routed(http, "other: v\r\n", &proxy), Err(403));
}
