//! HTTP/2 to origins (`server_proto h2`, issue 34). The worker speaks HTTP/1.1 to servers
//! only: until it speaks HTTP/2, a configuration asking for it is refused at start (and `-t`)
//! with a message naming the group, rather than accepted and served as HTTP/1.1.

use e2e::{output_text, proxy_cmd, write_file, TempDir};

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
