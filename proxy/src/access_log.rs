//! Access log lines (`access_log on` and the newer forms): to stderr for `dmesg`/`on`, appended
//! to a file for the `access_log_file` extension. One write per line.

use std::fs::OpenOptions;
use std::io::Write;

use config::{AccessLog, AccessLogDestination};

pub fn write(config: &AccessLog, line: &str) {
    for dest in &config.destinations {
        match dest {
            AccessLogDestination::Dmesg => {
                let _ = std::io::stdout()
                    .lock()
                    .write_all(format!("{line}\n").as_bytes());
            }
            AccessLogDestination::File(path) => {
                // Opened per line: simple, safe across reloads and log rotation; access logs
                // are off in benchmarks, as in the reference configuration.
                if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
                    let _ = f.write_all(format!("{line}\n").as_bytes());
                }
            }
            AccessLogDestination::Mmap => {}
        }
    }
}
