//! What a server process costs, read from /proc: CPU seconds and resident memory of a
//! process and all its descendants (nginx and `proxy` with `worker_processes` both fork).
//!
//! On a 2-core machine the load generator is often the bottleneck, so servers are compared
//! by the CPU they spend per operation, not only by operations per second.

use std::fs;
use std::io;

/// Every live process in the tree rooted at `root`, root first.
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Ok(stat) = read_stat(pid) {
                parents.push((pid, stat.ppid));
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree
}

/// The fields of /proc/PID/stat this module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub ppid: u32,
    /// User plus system time, in clock ticks.
    pub cpu_ticks: u64,
}

/// Parses /proc/PID/stat. The command name (field 2) may contain spaces and parentheses, so
/// the remaining fields are counted from the last `)`.
pub fn read_stat(pid: u32) -> io::Result<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/PID/stat"))
}

fn parse_stat(text: &str) -> Option<Stat> {
    let after_name = &text[text.rfind(')')? + 1..];
    // Fields after the name start at field 3 (state); ppid is field 4, utime 14, stime 15.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Stat {
        ppid,
        cpu_ticks: utime + stime,
    })
}

/// /proc reports times in USER_HZ ticks, which the kernel ABI fixes at 100 per second.
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU seconds (user + system) spent so far by `root` and its live descendants.
pub fn cpu_seconds(root: u32) -> io::Result<f64> {
    let tree = process_tree(root);
    let mut ticks = read_stat(root)?.cpu_ticks;
    for pid in tree.iter().skip(1) {
        ticks += read_stat(*pid).map(|s| s.cpu_ticks).unwrap_or(0);
    }
    Ok(ticks as f64 / TICKS_PER_SECOND)
}

/// Resident plus swapped memory, in bytes, of `root` and its live descendants.
pub fn memory_bytes(root: u32) -> io::Result<u64> {
    let tree = process_tree(root);
    let mut total = rss_and_swap(root)?;
    for pid in tree.iter().skip(1) {
        total += rss_and_swap(*pid).unwrap_or(0);
    }
    Ok(total)
}

fn rss_and_swap(pid: u32) -> io::Result<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(parse_status_kib(&text, "VmRSS:") * 1024 + parse_status_kib(&text, "VmSwap:") * 1024)
}

fn parse_status_kib(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_name() {
        let line = "1234 (a (b) c) S 99 1 1 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                ppid: 99,
                cpu_ticks: 300
            })
        );
    }

    #[test]
    fn own_process_is_measured() {
        let me = std::process::id();
        assert!(memory_bytes(me).expect("own status") > 0);
        // Burn CPU until the kernel has charged at least one 10 ms tick (bounded).
        let started = std::time::Instant::now();
        let mut x = 0u64;
        let mut charged = 0.0;
        while charged == 0.0 && started.elapsed() < std::time::Duration::from_secs(5) {
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            charged = cpu_seconds(me).expect("own stat");
        }
        assert!(charged > 0.0, "no CPU time charged after 5 s of work ({x})");
        assert_eq!(process_tree(me).first(), Some(&me));
    }
}
