//! Behaviour Tempesta FW has and the proxy matches (issue 35): `proxy_pass ... backup=`,
//! `*_hdr_set NAME;` removing a field, the cache's defaults under `cache_fulfill`, PURGE
//! without `cache_purge`, health monitors' CRC32, and `block_action`'s custom pages and
//! `http_resp_code_block`. Each case is written from Tempesta's documented or tested
//! behaviour and runs the real binary.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use e2e::free_port;
use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::rawclient::{get, Outcome, RawClient, RawResponse};

const T: Duration = Duration::from_secs(5);

/// Sends `request` on a new connection and returns the response, or panics with the logs.
fn answer(addr: SocketAddr, request: &[u8], proxy: &Proxy) -> RawResponse {
    let mut c = RawClient::connect(addr).expect("connect");
    match c.request(request, T) {
        Outcome::Response(r) => r,
        other => panic!("expected a response, got {other}\n{}", proxy.proc.logs()),
    }
}

fn body_text(r: &RawResponse) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// `proxy_pass main backup=spare`: while no server of `main` accepts connections the
/// requests are answered by `spare`; once `main`'s server listens again they go back to it.
#[test]
fn backup_group_answers_while_the_main_group_is_down_and_main_takes_over_again() {
    let setup = Setup::new("parity-backup");
    let main_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let spare = Origin::start(|_| Response::ok("spare"));
    let text = format!(
        "listen {http};\n\
         srv_group main {{ server {main_addr}; }}\n\
         srv_group spare {{ server {spare}; }}\n\
         vhost site {{ proxy_pass main backup=spare; }}\n\
         http_chain {{ -> site; }}\n",
        http = setup.http,
        spare = spare.addr(),
    );
    let http = setup.http;
    let proxy = setup.start(&text);

    // Nobody listens on main's port: every request (on new connections, so both workers
    // see it) is the backup's, first ones included.
    for i in 0..6 {
        let r = answer(http, &get(&format!("/down{i}"), "site"), &proxy);
        assert_eq!(
            (r.status, body_text(&r).as_str()),
            (200, "spare"),
            "request {i}"
        );
    }
    assert_eq!(spare.total_requests(), 6);

    // Main comes back: within its probe backoff, requests are main's again.
    let main = Origin::start_at(main_addr, |_| Response::ok("main"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut consecutive = 0;
    while consecutive < 6 {
        assert!(
            Instant::now() < deadline,
            "main never took over again ({} of its requests)\n{}",
            main.total_requests(),
            proxy.proc.logs()
        );
        let r = answer(http, &get("/up", "site"), &proxy);
        assert_eq!(r.status, 200);
        if body_text(&r) == "main" {
            consecutive += 1;
        } else {
            consecutive = 0;
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
