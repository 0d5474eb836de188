//! An idle HTTP/2 connection must be closed by its keep-alive timeout, and waiting for that
//! must cost its worker nothing. Before issue 30 the h2 timer measured the time left until
//! the idle deadline from one instant and added it to an earlier one: the entry came due
//! before the deadline, re-armed itself early again, and the firing loop (which held its
//! `now` fixed) never ended. The worker spun at 100 %, its memory grew ~50 MiB/s, and every
//! other client of that worker, plain HTTP/1.1 included, went unanswered.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use e2e::origin::{Origin, Response};
use e2e::proxy::{Proxy, Setup};
use e2e::{free_port, metric_sum, raw_exchange, wait_for_port};

use e2e::h2frames::{frame, ACK, GOAWAY, PREFACE, SETTINGS};

struct Site {
    proxy: Proxy,
    http: SocketAddr,
    h2c: SocketAddr,
    stats: SocketAddr,
}

/// One worker (the one every connection shares) and a 2 s keep-alive timeout.
fn start(origin: &Origin, tag: &str) -> Site {
    let setup = Setup::new(tag);
    let http = setup.http;
    let addr = || SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (h2c, stats) = (addr(), addr());
    let conf = setup.config(
        origin.addr(),
        "",
        &format!(
            "listen {h2c} proto=h2c;\nstats_listen {stats};\n\
             worker_threads 1;\nkeepalive_timeout 2;\n"
        ),
    );
    let proxy = setup.start(&conf);
    for a in [h2c, stats] {
        assert!(wait_for_port(a, Duration::from_secs(10)), "{a} listens");
    }
    Site {
        proxy,
        http,
        h2c,
        stats,
    }
}

/// What an idle connection saw: whether a GOAWAY came, and when the proxy closed it
/// (counted from the connect), if it did within `patience`.
struct IdleEnd {
    goaway: bool,
    closed_after: Option<Duration>,
}

/// Opens an h2c connection, exchanges SETTINGS both ways (acking the proxy's), then sends
/// nothing more and reads until the proxy closes or `patience` passes.
fn idle_h2(addr: SocketAddr, patience: Duration) -> IdleEnd {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connect h2c");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    s.write_all(&hello).expect("send preface");
    let (mut buf, mut acked, mut goaway) = (Vec::new(), false, false);
    let mut chunk = [0u8; 4096];
    while start.elapsed() < patience {
        match s.read(&mut chunk) {
            Ok(0) => {
                return IdleEnd {
                    goaway,
                    closed_after: Some(start.elapsed()),
                }
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return IdleEnd {
                    goaway,
                    closed_after: Some(start.elapsed()),
                }
            }
            Err(_) => continue,
        }
        while buf.len() >= 9 {
            let len =
                (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let (kind, flags) = (buf[3], buf[4]);
            if kind == SETTINGS && flags & ACK == 0 && !acked {
                s.write_all(&frame(SETTINGS, ACK, 0, &[])).expect("ack");
                acked = true;
            }
            goaway |= kind == GOAWAY;
            buf.drain(..9 + len);
        }
    }
    IdleEnd {
        goaway,
        closed_after: None,
    }
}

fn get_over_http1(addr: SocketAddr) -> String {
    let reply = raw_exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
        Duration::from_secs(3),
    )
    .expect("HTTP/1.1 exchange");
    String::from_utf8_lossy(&reply).into_owned()
}

#[test]
fn an_idle_h2_connection_gets_goaway_after_the_keepalive_timeout() {
    let origin = Origin::start(|_| Response::ok("ok"));
    let site = start(&origin, "h2-idle");
    let h2c = site.h2c;
    let idle = thread::spawn(move || idle_h2(h2c, Duration::from_secs(8)));
    // Past the idle deadline: the one worker must still answer another client.
    thread::sleep(Duration::from_secs(3));
    let answer = get_over_http1(site.http);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "HTTP/1.1 went unanswered while an h2 connection idled: {answer:?}\n{}",
        site.proxy.proc.logs()
    );
    let end = idle.join().expect("idle client");
    // The idle deadline, the keep-alive deadline of the HTTP/1.1 client and the origin
    // connection's: a few entries, not one per loop pass.
    let fired = metric_sum(site.stats, "ktls_proxy_timers_fired_total");
    assert!(
        fired < 100,
        "{fired} timer entries fired for two clients in 8 s: a timer re-arms into the past"
    );
    let closed = end.closed_after.unwrap_or_else(|| {
        panic!(
            "the idle h2 connection was not closed within 8 s (keepalive_timeout 2)\n{}",
            site.proxy.proc.logs()
        )
    });
    assert!(end.goaway, "closed after {closed:?} without a GOAWAY");
    assert!(
        closed >= Duration::from_millis(1900),
        "closed after {closed:?}, before the 2 s keep-alive timeout"
    );
}

#[test]
fn two_hundred_idle_h2_connections_close_while_http1_is_answered() {
    let origin = Origin::start(|_| Response::ok("ok"));
    let site = start(&origin, "h2-idle-soak");
    let pid = site.proxy.proc.pid();
    // The proxy's resident size once it has started and served one request.
    assert!(get_over_http1(site.http).starts_with("HTTP/1.1 200"));
    let before = e2e::rss_kib(pid).0 * 1024;
    let h2c = site.h2c;
    let idlers: Vec<_> = (0..200)
        .map(|_| thread::spawn(move || idle_h2(h2c, Duration::from_secs(10))))
        .collect();
    // Across the idle deadline and after it: every request of the plain client answered.
    let soak = Instant::now();
    let mut max_rss = before;
    while soak.elapsed() < Duration::from_secs(5) {
        let answer = get_over_http1(site.http);
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "HTTP/1.1 unanswered {:?} into the soak: {answer:?}",
            soak.elapsed()
        );
        max_rss = max_rss.max(e2e::rss_kib(pid).0 * 1024);
        thread::sleep(Duration::from_millis(100));
    }
    let ends: Vec<IdleEnd> = idlers
        .into_iter()
        .map(|t| t.join().expect("idle client"))
        .collect();
    let open = ends.iter().filter(|e| e.closed_after.is_none()).count();
    let silent = ends.iter().filter(|e| !e.goaway).count();
    assert!(
        open == 0 && silent == 0,
        "of 200 idle h2 connections {open} were not closed and {silent} got no GOAWAY"
    );
    let growth = max_rss.saturating_sub(before);
    assert!(
        growth < 16 * 1024 * 1024,
        "the proxy grew {growth} bytes while 200 h2 connections idled"
    );
}
