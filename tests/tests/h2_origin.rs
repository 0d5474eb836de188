//! HTTP/2 to origins (`server_proto h2`, issue 34). The worker speaks HTTP/1.1 to servers
//! only: until it speaks HTTP/2, a configuration asking for it is refused at start (and `-t`)
//! and at reload (the previous configuration stays in force) with a message naming the group,
//! rather than accepted and served as HTTP/1.1.

use std::time::Duration;

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::{output_text, proxy_cmd, rawclient, write_file, TempDir};

#[test]
fn server_proto_h2_is_refused_until_the_worker_speaks_it() {
    let dir = TempDir::new("h2-origin-refused");
    let conf = dir.join("proxy.conf");
    write_file(
        &conf,
        "listen 127.0.0.1:9;\nsrv_group up { server 127.0.0.1:9; server_proto h2; }\n\
         vhost a { proxy_pass up; }\n",
    );
    let out = proxy_cmd(&conf, &["-t"]);
    let text = output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("srv_group `up`") && text.contains("`server_proto h2` is not implemented"),
        "{text}"
    );
    // `http1` (the default, written out) is accepted.
    write_file(
        &conf,
        "listen 127.0.0.1:9;\nsrv_group up { server 127.0.0.1:9; server_proto http1; }\n\
         vhost a { proxy_pass up; }\n",
    );
    let out = proxy_cmd(&conf, &["-t"]);
    assert!(out.status.success(), "{}", output_text(&out));
}

#[test]
fn a_reload_to_server_proto_h2_is_refused_and_the_old_configuration_serves() {
    let origin = Origin::start(|_| Response::ok("from the origin"));
    let setup = Setup::new("h2-origin-reload");
    let http = setup.http;
    let conf = setup.config(origin.addr(), "", "");
    let mut proxy = setup.start(&conf);
    let close_get = rawclient::get_with("/", "site.test", "Connection: close\r\n");
    let get = || {
        let raw = e2e::raw_exchange(http, &close_get, Duration::from_secs(5)).unwrap_or_default();
        String::from_utf8_lossy(&raw).into_owned()
    };
    assert!(get().starts_with("HTTP/1.1 200"), "{}", proxy.proc.logs());
    let h2 = conf.replace(
        "srv_group default {",
        "srv_group default { server_proto h2;",
    );
    assert_ne!(h2, conf);
    write_file(&proxy.config, &h2);
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        proxy.proc.wait_for_output(
            "`server_proto h2` is not implemented",
            Duration::from_secs(10)
        ),
        "no refusal\n{}",
        proxy.proc.logs()
    );
    assert!(proxy
        .proc
        .logs()
        .contains("still serving the previous configuration"));
    let after = get();
    assert!(
        after.starts_with("HTTP/1.1 200"),
        "{after}\n{}",
        proxy.proc.logs()
    );
    assert!(after.ends_with("from the origin"), "{after}");
}
