//! One scenario run's figures and the expectation they are checked against.

use serde_json::{json, Value};

use super::driver::Counts;
use super::server::Sample;
use super::soak_report::SoakFigures;

/// What a run must show, written down before it runs.
#[derive(Clone, Debug)]
pub struct Expect {
    /// The statuses a client may get (e.g. 200 and 502 while the origin is down).
    pub statuses: Vec<u16>,
    /// Responses that may be cut: those the origin had begun when it died.
    pub max_cut: u64,
    /// Every response the origin wrote whole reaches a client as a 200.
    pub origin_answers_delivered: bool,
    /// Growth of the server's RSS from the baseline to the end that is tolerated (KiB).
    pub rss_slack_kib: u64,
    /// Growth of its open descriptors tolerated (0: back to the baseline exactly).
    pub fd_slack: u64,
}

impl Expect {
    pub fn statuses(statuses: &[u16]) -> Expect {
        Expect {
            statuses: statuses.to_vec(),
            max_cut: 0,
            origin_answers_delivered: true,
            rss_slack_kib: RSS_SLACK_KIB,
            fd_slack: 0,
        }
    }
}

/// The RSS growth a run may leave: the allocator keeps freed memory for reuse rather than
/// returning it, so the end is rarely the baseline to the page; what a leak of a buffer per
/// request or per connection would add over thousands of requests is well above this.
pub const RSS_SLACK_KIB: u64 = 16 * 1024;

/// The figures of one run.
#[derive(Clone, Debug)]
pub struct Report {
    pub scenario: &'static str,
    pub server: &'static str,
    pub secs: u64,
    pub h1: Counts,
    pub h2: Counts,
    /// Responses the origin wrote whole during the measured load.
    pub origin_completed: u64,
    pub before: Sample,
    pub after: Sample,
    /// Signs of a crash: a process gone, a panic or a signal in the logs.
    pub crashes: Vec<String>,
    /// What else the run found (a facility missing, counts of a phase).
    pub notes: Vec<String>,
    pub expect: Expect,
    /// The soak's windows and criteria (None for the fault scenarios).
    pub soak: Option<SoakFigures>,
}

impl Report {
    /// Where the run differs from its expectation (empty: it passed).
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (proto, c) in [("h1", &self.h1), ("h2", &self.h2)] {
            if c.sent == 0 {
                v.push(format!("{proto}: no request was sent"));
            }
            for (status, n) in &c.answered {
                if !self.expect.statuses.contains(status) {
                    v.push(format!("{proto}: {n} answered {status}"));
                }
            }
            if c.lost_timeout > 0 {
                v.push(format!(
                    "{proto}: {} unanswered within the timeout (hang)",
                    c.lost_timeout
                ));
            }
            if c.lost_closed > 0 {
                v.push(format!(
                    "{proto}: {} lost (connection ended, no response)",
                    c.lost_closed
                ));
            }
        }
        let cut = self.h1.cut + self.h2.cut;
        if cut > self.expect.max_cut {
            v.push(format!(
                "{cut} responses cut, at most {} expected",
                self.expect.max_cut
            ));
        }
        let delivered = self.h1.status(200) + self.h2.status(200);
        if self.expect.origin_answers_delivered && delivered < self.origin_completed {
            v.push(format!(
                "the origin answered {} whole, the clients got {delivered} 200s",
                self.origin_completed
            ));
        }
        if self.after.rss_kib > self.before.rss_kib + self.expect.rss_slack_kib {
            v.push(format!(
                "RSS {} -> {} KiB (slack {})",
                self.before.rss_kib, self.after.rss_kib, self.expect.rss_slack_kib
            ));
        }
        if self.after.fds > self.before.fds + self.expect.fd_slack {
            v.push(format!(
                "descriptors {} -> {} (slack {})",
                self.before.fds, self.after.fds, self.expect.fd_slack
            ));
        }
        v.extend(self.crashes.iter().map(|c| format!("crash: {c}")));
        if let Some(soak) = &self.soak {
            v.extend(soak.violations(self));
        }
        v
    }

    pub fn to_json(&self) -> Value {
        let counts = |c: &Counts| {
            json!({
                "sent": c.sent,
                "answered": c.answered.iter().map(|(s, n)| (s.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
                "cut": c.cut,
                "lost": c.lost(),
                "lost_closed": c.lost_closed,
                "lost_timeout": c.lost_timeout,
                "not_sent": c.not_sent,
                "retried": c.retried,
            })
        };
        let soak = self.soak.as_ref().map_or(Value::Null, |s| s.to_json(self));
        json!({
            "soak": soak,
            "scenario": self.scenario,
            "server": self.server,
            "secs": self.secs,
            "h1": counts(&self.h1),
            "h2": counts(&self.h2),
            "origin_completed": self.origin_completed,
            "rss_kib": [self.before.rss_kib, self.after.rss_kib],
            "fds": [self.before.fds, self.after.fds],
            "crashes": self.crashes,
            "notes": self.notes,
            "violations": self.violations(),
        })
    }

    /// One line of the table: scenario, server, sent, answered by status, cut, lost, not
    /// sent, retried, RSS and descriptors before -> after, crashes, verdict.
    pub fn row(&self) -> String {
        let mut all = self.h1.clone();
        let h2 = &self.h2;
        all.sent += h2.sent;
        for (s, n) in &h2.answered {
            *all.answered.entry(*s).or_insert(0) += n;
        }
        let statuses: Vec<String> = all
            .answered
            .iter()
            .map(|(s, n)| format!("{s}:{n}"))
            .collect();
        let verdict = if self.violations().is_empty() {
            "ok"
        } else {
            "FAIL"
        };
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} -> {} | {} -> {} | {} | {} |",
            self.scenario,
            self.server,
            all.sent,
            statuses.join(" "),
            self.h1.cut + h2.cut,
            self.h1.lost() + h2.lost(),
            self.h1.not_sent + h2.not_sent,
            self.h1.retried + h2.retried,
            self.before.rss_kib / 1024,
            self.after.rss_kib / 1024,
            self.before.fds,
            self.after.fds,
            self.crashes.len(),
            verdict,
        )
    }

    /// Everything, for a failing test's message.
    pub fn describe(&self) -> String {
        format!(
            "{} on {}: {:?}\nh1 {:?}\nh2 {:?}\norigin completed {}\nbefore {:?} after {:?}\nnotes {:?}",
            self.scenario,
            self.server,
            self.violations(),
            self.h1,
            self.h2,
            self.origin_completed,
            self.before,
            self.after,
            self.notes
        )
    }
}

/// The table's head.
pub const TABLE_HEAD: &str = "| scenario | server | sent | answered (status:count) | cut | lost | not sent | retried | RSS MiB | fds | crashes | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|---|";
