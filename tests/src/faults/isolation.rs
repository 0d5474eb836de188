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
    ns_if: String,
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
            ns_if: ns_if.clone(),
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

    /// Drops `percent` % of the packets, at random, each way through the namespace's side of
    /// the veth (everything the server sends and receives: clients and origin). This kernel
    /// has no netem (`tc qdisc ... netem`: "Specified qdisc kind is unknown"), so nftables
    /// does it (`numgen random mod 100 < N drop`, counted), or iptables' statistic match when
    /// there is no `nft`. The rules live in the namespace and go with it.
    pub fn drop_share(&self, percent: u32) -> Result<LossRules, String> {
        let rules = format!(
            "table inet {LOSS_TABLE} {{\n\
             chain input {{ type filter hook input priority 0; policy accept;\n\
             iifname \"{dev}\" numgen random mod 100 < {percent} counter drop\n}}\n\
             chain output {{ type filter hook output priority 0; policy accept;\n\
             oifname \"{dev}\" numgen random mod 100 < {percent} counter drop\n}}\n}}\n",
            dev = self.ns_if
        );
        let nft = self.exec(&["nft", "-f", "-"], Some(&rules));
        let Err(nft_err) = nft else {
            return Ok(LossRules::Nft);
        };
        let probability = format!("{:.4}", f64::from(percent) / 100.0);
        let mut iptables = Ok(());
        for (chain, dir) in [("INPUT", "-i"), ("OUTPUT", "-o")] {
            let args = [
                "iptables",
                "-A",
                chain,
                dir,
                &self.ns_if,
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &probability,
                "-j",
                "DROP",
            ];
            iptables = iptables.and_then(|()| self.exec(&args, None));
        }
        match iptables {
            Ok(()) => Ok(LossRules::Iptables),
            Err(ipt_err) => Err(format!("{nft_err}; and {ipt_err}")),
        }
    }

    /// The packets the loss rules dropped so far, (into, out of) the namespace; nftables only.
    pub fn dropped(&self) -> Option<(u64, u64)> {
        let listed = Command::new("ip")
            .args([
                "netns", "exec", &self.name, "nft", "list", "table", "inet", LOSS_TABLE,
            ])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&listed.stdout);
        let mut counts = text.lines().filter_map(|l| {
            let after = l.split("counter packets ").nth(1)?;
            after.split_whitespace().next()?.parse::<u64>().ok()
        });
        Some((counts.next()?, counts.next()?))
    }

    /// Removes the loss rules (the end of the run samples the server without them).
    pub fn stop_loss(&self, rules: LossRules) -> Result<(), String> {
        match rules {
            LossRules::Nft => self.exec(&["nft", "delete", "table", "inet", LOSS_TABLE], None),
            LossRules::Iptables => {
                self.exec(&["iptables", "-F", "INPUT"], None)?;
                self.exec(&["iptables", "-F", "OUTPUT"], None)
            }
        }
    }

    /// Runs `args` inside the namespace, `stdin` written to it.
    fn exec(&self, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
        use std::io::Write;
        let what = args.join(" ");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("{what}: {e}"))?;
        if let Some(mut input) = child.stdin.take() {
            let _ = input.write_all(stdin.unwrap_or("").as_bytes());
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// The table of the loss rules in a namespace.
const LOSS_TABLE: &str = "ktlsf_loss";

/// Which tool put the loss rules in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossRules {
    Nft,
    Iptables,
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
