//! Issue 36 item 6 (part) through the real binary: a warning a peer can trigger at will is
//! written at most 10 times a second; the rest are counted, and the count is written once
//! that second is over, so no line is lost without trace and no flood fills the disk.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::origin::{Origin, Response};
use e2e::proxy::Setup;
use e2e::raw_exchange;

const REQUESTS: usize = 300;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// (lines of the blocked-request warning, the counts of the suppression lines) in `logs`.
fn written_and_suppressed(logs: &str) -> (usize, usize) {
    let written = logs.matches("http_chain blocked").count();
    let suppressed = logs
        .lines()
        .filter(|l| l.contains("more lines of the warning at") && l.contains("chain.rs"))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<usize>().ok())
        .sum();
    (written, suppressed)
}

#[test]
fn a_flood_of_one_warning_writes_ten_lines_a_second_and_counts_the_rest() {
    let origin = Origin::start(|_| Response::ok("x"));
    let setup = Setup::new("log-rate");
    let http = setup.http;
    let conf = setup
        .config(origin.addr(), "", "block_action attack reply;")
        .replace(
            "http_chain { -> site; }",
            "http_chain { uri == \"/blocked*\" -> block; -> site; }",
        );
    let proxy = setup.start(&conf);
    let first = now_secs();
    for n in 0..REQUESTS {
        let req =
            format!("GET /blocked?{n} HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(http, req.as_bytes(), Duration::from_secs(5)).unwrap_or_default();
        assert!(
            answer.starts_with(b"HTTP/1.1 403"),
            "request {n} answered 403"
        );
    }
    let last = now_secs();
    // Every warning is accounted for once the reporter has run (just after each second).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut written, mut suppressed) = (0, 0);
    while Instant::now() < deadline {
        (written, suppressed) = written_and_suppressed(&proxy.proc.stderr());
        if written + suppressed >= REQUESTS {
            eprintln!(
                "written {written}, suppressed {suppressed} over {} s",
                now_secs() - first
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let seconds = (last - first + 1) as usize;
    assert!(
        written <= 10 * seconds,
        "{written} lines in {seconds} second(s) of the clock\n{}",
        proxy.proc.stderr()
    );
    assert_eq!(
        written + suppressed,
        REQUESTS,
        "written {written}, suppressed {suppressed}\n{}",
        proxy.proc.stderr()
    );
}
