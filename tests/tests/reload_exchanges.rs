//! A reload (SIGHUP) while exchanges wait in a server group's queue or are at a server: the
//! queued ones keep their place in the group of the same name (answered promptly, not 504
//! after `server_forward_timeout`), and a request retried after the reload goes to its own
//! group as the new configuration numbers it, never to whatever group took its old place.
//! Where the group is gone, the answer is 502 at once. Never a panic.
//!
//! One worker thread and `conns_n=1` make the queueing deterministic: one request holds the
//! group's only connection and the others wait behind it.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use e2e::proxy::{Proxy, Setup};
use e2e::{curl, free_port, raw_exchange, write_file};

/// How long a request waits for a connection before the proxy answers 504: long enough that
/// a prompt answer and a timed-out one cannot be confused.
const FORWARD_TIMEOUT_S: u64 = 6;

/// An origin that answers every request with its one-letter name, except `/slow` (after
/// 700 ms) and, on an origin started with `hangs`, the first `/hang` (never: it holds the
/// request until `release`, then closes the connection without a response, as a server that
/// restarted does).
struct Origin {
    addr: SocketAddr,
    hung: Arc<AtomicUsize>,
    release: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Origin {
    fn start(name: char, hangs: bool) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        // An origin that does not hang counts as having hung already.
        let hung = Arc::new(AtomicUsize::new(usize::from(!hangs)));
        let release = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let flags = (hung.clone(), release.clone(), stop.clone());
        let accept = thread::spawn(move || {
            let (hung, release, stop) = flags;
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (hung, release) = (hung.clone(), release.clone());
                        thread::spawn(move || serve(conn, name, &hung, &release));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Origin {
            addr,
            hung,
            release,
            stop,
            accept: Some(accept),
        }
    }

    /// Waits until a `/hang` request arrived (up to 5 s) at this origin, started with `hangs`.
    fn wait_hung(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.hung.load(Ordering::Relaxed) > 0 {
                return true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.release.store(true, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// One origin connection: requests without bodies, answered in order.
fn serve(conn: TcpStream, name: char, hung: &AtomicUsize, release: &AtomicBool) {
    conn.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut writer = conn;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
        }
        let path = request_line.split(' ').nth(1).unwrap_or("");
        // Only the first `/hang` hangs: a retry of it is answered.
        if path.starts_with("/hang") && hung.fetch_add(1, Ordering::Relaxed) == 0 {
            let deadline = Instant::now() + Duration::from_secs(15);
            while !release.load(Ordering::Relaxed) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
            return; // closes the connection: no response
        }
        if path.starts_with("/slow") {
            thread::sleep(Duration::from_millis(700));
        }
        let response = format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{name}");
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// The proxy's configuration: `groups` (each `(name, origin)`, in this order, `conns_n=1`),
/// the vhost proxying to group `pass`.
fn config(setup: &Setup, stats: SocketAddr, groups: &[(&str, &Origin)], pass: &str) -> String {
    let groups: String = groups
        .iter()
        .map(|(name, origin)| {
            format!(
                "srv_group {name} {{ server {} conns_n=1; server_queue_size 10; \
                 server_forward_timeout {FORWARD_TIMEOUT_S}; }}\n",
                origin.addr
            )
        })
        .collect();
    format!(
        "listen {http};\nworker_threads 1;\nstats_listen {stats};\n{groups}\
         vhost site {{ proxy_pass {pass}; }}\nhttp_chain {{ -> site; }}\n",
        http = setup.http,
    )
}

/// A GET on its own client connection, in a thread: the response and how long it took.
fn spawn_get(http: SocketAddr, path: &str) -> JoinHandle<(String, Duration)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n");
    thread::spawn(move || {
        let sent = Instant::now();
        let response =
            raw_exchange(http, request.as_bytes(), Duration::from_secs(12)).unwrap_or_default();
        (
            String::from_utf8_lossy(&response).into_owned(),
            sent.elapsed(),
        )
    })
}

fn reload(proxy: &mut Proxy, text: &str) {
    write_file(&proxy.config, text);
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        proxy
            .proc
            .wait_for_output("reloaded", Duration::from_secs(10)),
        "{}",
        proxy.proc.logs()
    );
}

fn assert_no_panic(stats: SocketAddr) {
    let (_, metrics, _) = curl(&[&format!("http://{stats}/metrics")], 5);
    assert!(metrics.contains("ktls_proxy_panics_total 0"), "{metrics}");
}

/// Waits for every request; panics with all of them if one is not `want` (a status line
/// prefix and a body) within `within`.
fn expect_all(gets: Vec<JoinHandle<(String, Duration)>>, want: (&str, &str), within: Duration) {
    let results: Vec<(String, Duration)> = gets.into_iter().map(|g| g.join().unwrap()).collect();
    for (response, took) in &results {
        let ok = response.starts_with(want.0) && response.ends_with(want.1) && *took < within;
        assert!(ok, "want {want:?} within {within:?}, got {results:#?}");
    }
}

#[test]
fn queued_requests_keep_their_place_across_a_reload_that_keeps_their_group() {
    let a = Origin::start('A', false);
    let setup = Setup::new("reload-queue-kept");
    let (http, stats) = (setup.http, SocketAddr::from(([127, 0, 0, 1], free_port())));
    let text = config(&setup, stats, &[("app", &a)], "app");
    let mut proxy = setup.start(&text);
    // One request holds the only connection for 700 ms, two more wait in the queue.
    let gets: Vec<_> = (0..3)
        .map(|i| spawn_get(http, &format!("/slow{i}")))
        .collect();
    thread::sleep(Duration::from_millis(200));
    reload(&mut proxy, &format!("{text}# reloaded\n"));
    // Before the fix the queued two lost their place and got 504 after the forward timeout.
    expect_all(gets, ("HTTP/1.1 200 ", "A"), Duration::from_secs(4));
    assert_no_panic(stats);
    drop(a);
}

#[test]
fn a_retry_after_a_reload_that_reorders_groups_stays_in_its_group() {
    let (o, a) = (Origin::start('O', false), Origin::start('A', true));
    let setup = Setup::new("reload-retry-reordered");
    let (http, stats) = (setup.http, SocketAddr::from(([127, 0, 0, 1], free_port())));
    let before = config(&setup, stats, &[("other", &o), ("app", &a)], "app");
    let after = config(&setup, stats, &[("app", &a), ("other", &o)], "app");
    let mut proxy = setup.start(&before);
    // A pooled (reused) connection to A, so that losing it before a response is retried.
    expect_all(
        vec![spawn_get(http, "/warm")],
        ("HTTP/1.1 200 ", "A"),
        Duration::from_secs(5),
    );
    let hang = spawn_get(http, "/hang");
    assert!(a.wait_hung(), "{}", proxy.proc.logs());
    let queued: Vec<_> = (0..2).map(|i| spawn_get(http, &format!("/q{i}"))).collect();
    thread::sleep(Duration::from_millis(200));
    // `app` moves from index 1 to 0; index 1 is now `other`.
    reload(&mut proxy, &after);
    a.release.store(true, Ordering::Relaxed);
    // The retried request is answered by `app`'s server (before the fix: by O, of the group
    // that took its old index), the queued ones promptly by `app`'s server.
    expect_all(vec![hang], ("HTTP/1.1 200 ", "A"), Duration::from_secs(4));
    expect_all(queued, ("HTTP/1.1 200 ", "A"), Duration::from_secs(4));
    assert_no_panic(stats);
    drop((o, a));
}

#[test]
fn requests_of_a_group_a_reload_removes_are_answered_502_at_once() {
    let (o, a) = (Origin::start('O', false), Origin::start('A', true));
    let setup = Setup::new("reload-group-removed");
    let (http, stats) = (setup.http, SocketAddr::from(([127, 0, 0, 1], free_port())));
    let before = config(&setup, stats, &[("app", &a)], "app");
    // `app` is gone; `other` takes its index 0 and the vhost.
    let after = config(&setup, stats, &[("other", &o)], "other");
    let mut proxy = setup.start(&before);
    expect_all(
        vec![spawn_get(http, "/warm")],
        ("HTTP/1.1 200 ", "A"),
        Duration::from_secs(5),
    );
    let hang = spawn_get(http, "/hang");
    assert!(a.wait_hung(), "{}", proxy.proc.logs());
    let queued: Vec<_> = (0..2).map(|i| spawn_get(http, &format!("/q{i}"))).collect();
    thread::sleep(Duration::from_millis(200));
    reload(&mut proxy, &after);
    // Queued for a group that no longer exists: 502 at once, not 504 after the timeout.
    expect_all(queued, ("HTTP/1.1 502 ", ""), Duration::from_secs(3));
    a.release.store(true, Ordering::Relaxed);
    // The request in flight lost its connection; its group is gone, so the retry has nowhere
    // to go: 502 (before the fix: sent to O, of another group, under the old index).
    expect_all(vec![hang], ("HTTP/1.1 502 ", ""), Duration::from_secs(4));
    // New requests go to the new configuration's group.
    expect_all(
        vec![spawn_get(http, "/new")],
        ("HTTP/1.1 200 ", "O"),
        Duration::from_secs(5),
    );
    assert_no_panic(stats);
}
