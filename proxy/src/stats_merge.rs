//! The statistics of every worker process in one scrape.
//!
//! With `worker_processes K`, each process has its own counters. The first one serves
//! `stats_listen`; every other one answers on a Unix socket (in the supervisor's private
//! directory, `runtime_dir`, named after its own index) with its rendered
//! Prometheus text. On a scrape the first process asks each of them in turn, within one
//! bounded budget ([`PEER_BUDGET`] in all: a process that died, is restarting or hangs
//! costs the scrape that much at most and is reported missing), and sums what it got.
//!
//! Summing: every sample with the same name and labels is added up (all the proxy's
//! metrics are counters or additive gauges: connections open, cache bytes, tracked
//! clients). Samples labelled by worker thread (`worker="N"`) are not summed, since thread
//! N of one process is not thread N of another: they get a `process="P"` label. The
//! scrape's own `ktls_proxy_stats_processes{state="answered"|"missing"}` says how many
//! processes the totals cover.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::runtime_dir;
use crate::worker::Shared;

/// The time one scrape may spend asking the other processes, all of them together.
pub const PEER_BUDGET: Duration = Duration::from_millis(1500);

/// Most bytes read from one process (its text is a few KiB).
const PEER_TEXT_MAX: u64 = 4 << 20;

/// A worker process other than the first: answers the first one's requests with this
/// process's text. Failing to bind only costs the scrape this process's share (reported as
/// missing), so it is logged, not fatal.
pub fn serve_peer(index: u32, shared: Arc<Shared>) {
    let Some(dir) = runtime_dir::of_supervisor() else {
        crate::warn!(
            "worker process {index}: no directory from the supervisor (${}); its counters will be missing from scrapes",
            runtime_dir::RUNTIME_DIR_ENV
        );
        return;
    };
    let path = runtime_dir::stats_socket(&dir, index);
    let listener = match UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            crate::warn!(
                "worker process {index}: cannot bind {} for the statistics: {e}; its counters will be missing from scrapes",
                path.display()
            );
            return;
        }
    };
    let spawned = thread::Builder::new()
        .name("stats-peer".into())
        .spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let _ = stream.set_write_timeout(Some(PEER_BUDGET));
                let _ = stream.write_all(crate::stats::metrics(&shared).as_bytes());
            }
        });
    if let Err(e) = spawned {
        crate::warn!("worker process {index}: cannot start the statistics thread: {e}");
    }
}

/// The first process's scrape: its own text summed with every other process's.
pub fn all_processes(own: String, processes: u32) -> String {
    if processes <= 1 {
        return own;
    }
    let dir = runtime_dir::of_supervisor();
    let deadline = Instant::now() + PEER_BUDGET;
    let mut texts = vec![(0, own)];
    let mut missing = 0u32;
    for index in 1..processes {
        let path = dir.as_deref().map(|d| runtime_dir::stats_socket(d, index));
        match path.and_then(|p| ask(&p, deadline)) {
            Some(text) => texts.push((index, text)),
            None => missing += 1,
        }
    }
    let answered = processes - missing;
    let mut merged = merge(&texts);
    let _ = write!(
        merged,
        "# HELP ktls_proxy_stats_processes Worker processes whose counters this scrape sums.\n\
         # TYPE ktls_proxy_stats_processes gauge\n\
         ktls_proxy_stats_processes{{state=\"answered\"}} {answered}\n\
         ktls_proxy_stats_processes{{state=\"missing\"}} {missing}\n"
    );
    merged
}

/// One process's text, if it answers before `deadline`.
fn ask(path: &std::path::Path, deadline: Instant) -> Option<String> {
    deadline.checked_duration_since(Instant::now())?;
    // A Unix socket's connect does not block on a live listener (the backlog takes it) and
    // fails at once on a dead one; the read is what is bounded.
    let stream = UnixStream::connect(path).ok()?;
    let mut text = String::new();
    let mut limited = stream.take(PEER_TEXT_MAX);
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        limited.get_ref().set_read_timeout(Some(left)).ok()?;
        let mut chunk = [0u8; 16 * 1024];
        match limited.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => text.push_str(&String::from_utf8_lossy(&chunk[..n])),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(text)
}

/// A metric family: its comment lines and its samples (key: name and labels), in order.
#[derive(Default)]
struct Family {
    comments: Vec<String>,
    samples: Vec<(String, f64)>,
    index: HashMap<String, usize>,
}

/// Sums the texts of several processes (`(process index, text)`), family by family.
pub fn merge(texts: &[(u32, String)]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut families: HashMap<String, Family> = HashMap::new();
    for (process, text) in texts {
        for line in text.lines() {
            let Some((name, entry)) = parse_line(line, *process) else {
                continue;
            };
            let family = families.entry(name.clone()).or_insert_with(|| {
                order.push(name);
                Family::default()
            });
            match entry {
                Entry::Comment(c) => {
                    if !family.comments.contains(&c) {
                        family.comments.push(c);
                    }
                }
                Entry::Sample(key, value) => match family.index.get(&key) {
                    Some(&i) => family.samples[i].1 += value,
                    None => {
                        family.index.insert(key.clone(), family.samples.len());
                        family.samples.push((key, value));
                    }
                },
            }
        }
    }
    let mut out = String::with_capacity(texts.first().map_or(0, |t| t.1.len()) + 1024);
    for name in &order {
        let Some(family) = families.get(name) else {
            continue;
        };
        for c in &family.comments {
            let _ = writeln!(out, "{c}");
        }
        for (key, value) in &family.samples {
            let _ = writeln!(out, "{key} {}", number(*value));
        }
    }
    out
}

enum Entry {
    Comment(String),
    /// Name with labels (relabelled by process when per worker thread), and the value.
    Sample(String, f64),
}

/// A line's family name and what it holds; `None` for blank or unreadable lines.
fn parse_line(line: &str, process: u32) -> Option<(String, Entry)> {
    let line = line.trim_end();
    if let Some(rest) = line.strip_prefix('#') {
        let mut words = rest.split_whitespace();
        let _kind = words.next()?;
        let name = words.next()?.to_string();
        return Some((name, Entry::Comment(line.to_string())));
    }
    let (key, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let name = key.split('{').next()?.to_string();
    if name.is_empty() {
        return None;
    }
    let key = if key.contains("{worker=\"") || key.contains(",worker=\"") {
        key.replacen('{', &format!("{{process=\"{process}\","), 1)
    } else {
        key.to_string()
    };
    Some((name, Entry::Sample(key, value)))
}

/// Integers as integers (every counter), anything else as Rust prints an `f64`.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P0: &str = "# HELP a_total A.\n# TYPE a_total counter\na_total{reason=\"x\"} 3\na_total{reason=\"y\"} 1\n\
                      # HELP w_total W.\n# TYPE w_total counter\nw_total{worker=\"0\"} 5\n";
    const P1: &str = "# HELP a_total A.\n# TYPE a_total counter\na_total{reason=\"x\"} 4\na_total{reason=\"z\"} 2\n\
                      # HELP w_total W.\n# TYPE w_total counter\nw_total{worker=\"0\"} 7\n";

    #[test]
    fn samples_sum_by_name_and_labels_and_families_stay_together() {
        let merged = merge(&[(0, P0.to_string()), (1, P1.to_string())]);
        let expected = "# HELP a_total A.\n# TYPE a_total counter\n\
                        a_total{reason=\"x\"} 7\na_total{reason=\"y\"} 1\na_total{reason=\"z\"} 2\n\
                        # HELP w_total W.\n# TYPE w_total counter\n\
                        w_total{process=\"0\",worker=\"0\"} 5\nw_total{process=\"1\",worker=\"0\"} 7\n";
        assert_eq!(merged, expected);
    }

    #[test]
    fn unlabelled_gauges_and_odd_lines() {
        let merged = merge(&[
            (0, "g 1.5\nbroken\n\n".to_string()),
            (1, "g 2\ng_other 3\n".to_string()),
        ]);
        assert_eq!(merged, "g 3.5\ng_other 3\n");
    }

    #[test]
    fn a_missing_process_costs_at_most_the_budget_and_is_reported() {
        // No process answers at these paths: the scrape returns at once with the own text
        // and says two are missing.
        let started = Instant::now();
        let text = all_processes("a_total 1\n".to_string(), 3);
        assert!(started.elapsed() < PEER_BUDGET + Duration::from_millis(500));
        assert!(text.contains("a_total 1\n"), "{text}");
        assert!(
            text.contains("ktls_proxy_stats_processes{state=\"missing\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn a_hanging_process_is_cut_at_the_budget() {
        let dir = std::env::temp_dir().join(format!("stats-merge-test-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("hang");
        let _ = std::fs::remove_file(&path);
        // Listening, never answering: the connect succeeds (backlog), the read must time out.
        let _listener = UnixListener::bind(&path).unwrap();
        let started = Instant::now();
        let got = ask(&path, Instant::now() + Duration::from_millis(300));
        assert!(got.is_none());
        assert!(started.elapsed() < Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
