//! Servers named by DNS names and the `resolver` (extensions, docs/PROXY.md "Servers by
//! name"): what loads, the model it gives, and what is refused where.

use std::path::Path;
use std::time::Duration;

use config::{parse_str, Config, Resolver, ServerName};

fn load(text: &str) -> Config {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(l) => l.config,
        Err(d) => panic!("refused:\n{text}\n{d}"),
    }
}

fn refused(text: &str) -> String {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(_) => panic!("loaded, but should be refused:\n{text}"),
        Err(d) => d.to_string(),
    }
}

#[test]
fn a_server_by_name_keeps_its_name_port_and_options() {
    let c = load("srv_group g { server Origin.Example:8080 conns_n=4 weight=7 backup; server 127.0.0.1; }\nvhost v { proxy_pass g; }\n");
    let g = c.server_group("g").expect("group g");
    let s = &g.servers[0];
    assert_eq!(
        s.name,
        Some(ServerName {
            host: "origin.example".into(),
            port: 8080,
            resolve: false,
            service: None,
            at: "t.conf:1:15".into(),
        })
    );
    assert_eq!((s.conns_n, s.weight, s.backup), (4, 7, true));
    assert_eq!(
        s.addr,
        "0.0.0.0:8080".parse().unwrap(),
        "until the loader resolves it"
    );
    assert_eq!(g.servers[1].name, None);
    // The default port is 80, as for addresses.
    let c = load("server backend;\n");
    let name = c.server_groups[0].servers[0].name.clone().expect("named");
    assert_eq!((name.host.as_str(), name.port), ("backend", 80));
}

#[test]
fn resolver_and_resolve() {
    let c = load("resolver 127.0.0.1:5353 [::1] valid=30 timeout=2;\nserver origin resolve;\n");
    assert_eq!(
        c.resolver,
        Some(Resolver {
            servers: vec![
                "127.0.0.1:5353".parse().unwrap(),
                "[::1]:53".parse().unwrap()
            ],
            valid: Some(Duration::from_secs(30)),
            timeout: Duration::from_secs(2),
        })
    );
    assert!(c.server_groups[0].servers[0]
        .name
        .as_ref()
        .is_some_and(|n| n.resolve));
    // Order does not matter: the check runs once everything is read.
    load(
        "srv_group g { server origin resolve; }\nresolver 127.0.0.1;\nvhost v { proxy_pass g; }\n",
    );
    assert_eq!(
        load("resolver 127.0.0.1;\n").resolver.map(|r| r.valid),
        Some(None)
    );
}

#[test]
fn refusals_say_where_and_what_to_do() {
    for (text, at, what) in [
        (
            "server origin resolve;\n",
            "t.conf:1:15",
            "`resolve` needs a `resolver`",
        ),
        (
            "resolver 127.0.0.1;\nserver 127.0.0.1 resolve;\n",
            "t.conf:2:18",
            "`resolve` is for a server given by name",
        ),
        (
            "server bad_name;\n",
            "t.conf:1:8",
            "neither an address nor a host name",
        ),
        (
            "server origin:0;\n",
            "t.conf:1:8",
            "neither an address nor a host name",
        ),
        (
            "server origin;\nserver ORIGIN:80;\n",
            "t.conf:2:8",
            "server origin:80 is listed twice",
        ),
        ("resolver;\n", "t.conf:1:1", "needs a DNS server"),
        (
            "resolver dns.example;\n",
            "t.conf:1:10",
            "is not an address",
        ),
        ("resolver 53;\n", "t.conf:1:10", "not just a port"),
        (
            "resolver 127.0.0.1 timeout=0;\n",
            "t.conf:1:28",
            "out of range",
        ),
        (
            "resolver 127.0.0.1;\nresolver 127.0.0.2;\n",
            "t.conf:2:1",
            "duplicate `resolver`",
        ),
        (
            "srv_group g { resolver 127.0.0.1; server origin; }\n",
            "t.conf:1:15",
            "resolver",
        ),
    ] {
        let report = refused(text);
        assert!(
            report.contains(at) && report.contains(what),
            "{text}: expected `{what}` at {at}, got:\n{report}"
        );
    }
}
