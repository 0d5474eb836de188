//! What some scenarios put the server in: a network namespace joined to the host by a veth
//! pair with a small MTU, and a memory cgroup (v1) with a limit. Both are created by the
//! scenario and deleted when their guard drops, on every exit path (a panic included).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn serial() -> u32 {
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A network namespace with a veth pair to the host: the host side `host_ip`, the namespace
/// side `ns_ip`, both with the MTU given.
pub struct NetNs {
    pub name: String,
    pub host_ip: Ipv4Addr,
    pub ns_ip: Ipv4Addr,
    host_if: String,
}

impl NetNs {
    /// Creates it (root only: `ip netns`). A /30 of 10.238.0.0/16 picked by pid and serial,
    /// routed nowhere else.
    pub fn create(mtu: u32) -> Result<NetNs, String> {
        let n = serial();
        let tag = (std::process::id() % 1000) * 16 + n % 16;
        let name = format!("ktlsf-{}-{n}", std::process::id());
        let (host_if, ns_if) = (format!("kf{tag}h"), format!("kf{tag}n"));
        let (hi, lo) = ((tag / 64) as u8, ((tag % 64) * 4) as u8);
        let host_ip = Ipv4Addr::new(10, 238, hi, lo + 1);
        let ns_ip = Ipv4Addr::new(10, 238, hi, lo + 2);
        run(&["ip", "netns", "add", &name])?;
        // From here the guard deletes what was made, whatever fails next.
        let ns = NetNs {
            name,
            host_ip,
            ns_ip,
            host_if,
        };
        let (mtu, name) = (mtu.to_string(), ns.name.clone());
        let steps: [&[&str]; 8] = [
            &[
                "ip",
                "link",
                "add",
                &ns.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &ns_if,
            ],
            &["ip", "link", "set", &ns_if, "netns", &name],
            &["ip", "link", "set", &ns.host_if, "mtu", &mtu, "up"],
            &[
                "ip",
                "addr",
                "add",
                &format!("{host_ip}/30"),
                "dev",
                &ns.host_if,
            ],
            &["ip", "-n", &name, "link", "set", &ns_if, "mtu", &mtu, "up"],
            &[
                "ip",
                "-n",
                &name,
                "addr",
                "add",
                &format!("{ns_ip}/30"),
                "dev",
                &ns_if,
            ],
            &["ip", "-n", &name, "link", "set", "lo", "up"],
            &["true"],
        ];
        for step in steps {
            run(step)?;
        }
        Ok(ns)
    }

    /// The prefix that runs a command inside the namespace.
    pub fn exec_prefix(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.name]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// Whether the kernel has netem (packet loss); this one may not.
    pub fn netem_loss(&self, percent: u32) -> Result<(), String> {
        run(&[
            "tc",
            "qdisc",
            "add",
            "dev",
            &self.host_if,
            "root",
            "netem",
            "loss",
            &format!("{percent}%"),
        ])
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.host_if]);
        if let Err(e) = run(&["ip", "netns", "del", &self.name]) {
            eprintln!("netns cleanup: {e}");
        }
    }
}

const MEMCG_ROOT: &str = "/sys/fs/cgroup/memory";

/// A memory cgroup (v1) of its own.
pub struct MemCgroup {
    pub path: PathBuf,
}

impl MemCgroup {
    pub fn create() -> Result<MemCgroup, String> {
        let path = PathBuf::from(MEMCG_ROOT).join(format!(
            "ktls-faults-{}-{}",
            std::process::id(),
            serial()
        ));
        std::fs::create_dir(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        let cg = MemCgroup { path };
        if !cg.path.join("memory.limit_in_bytes").exists() {
            return Err(format!("{}: no memory.limit_in_bytes", cg.path.display()));
        }
        Ok(cg)
    }

    /// The prefix that starts a command inside the cgroup (the shell joins it, then execs).
    pub fn exec_prefix(&self) -> Vec<String> {
        let procs = self.path.join("cgroup.procs");
        vec![
            "sh".into(),
            "-c".into(),
            format!("echo $$ > {} && exec \"$@\"", procs.display()),
            "sh".into(),
        ]
    }

    fn read(&self, file: &str) -> u64 {
        std::fs::read_to_string(self.path.join(file))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn set_limit(&self, bytes: u64) -> Result<(), String> {
        std::fs::write(self.path.join("memory.limit_in_bytes"), bytes.to_string())
            .map_err(|e| format!("memory.limit_in_bytes: {e}"))
    }

    pub fn usage(&self) -> u64 {
        self.read("memory.usage_in_bytes")
    }

    pub fn max_usage(&self) -> u64 {
        self.read("memory.max_usage_in_bytes")
    }

    /// Times the limit was hit.
    pub fn failcnt(&self) -> u64 {
        self.read("memory.failcnt")
    }

    /// Processes the OOM killer killed in it (`oom_kill` of memory.oom_control).
    pub fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.path.join("memory.oom_control"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for MemCgroup {
    /// The server is stopped before (its guard is declared after this one); a cgroup with a
    /// task left cannot be removed, so a few tries.
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!("memcg cleanup: {} still busy", self.path.display());
    }
}
