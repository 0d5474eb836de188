//! Issue 37: the key file watcher (the thread named `ticket-keys`) runs only while the
//! configuration in force names a `tls_tickets keys=FILE`: not at all without one, started
//! by a reload that names one (and then sees the file rotate), gone within a poll or two
//! after a reload that removes it, and started again by the next that names one.

use std::time::{Duration, Instant};

use e2e::origin::Origin;
use e2e::proxy::Setup;

/// The watcher polls every 2 s; it stops at the first poll after the reload.
const STOPPED_WITHIN: Duration = Duration::from_secs(6);

/// The proxy's threads named `ticket-keys`.
fn watchers(pid: u32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "ticket-keys")
        })
        .count()
}

fn wait_watchers(pid: u32, want: usize, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if watchers(pid) == want {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A key file of one 80-byte key whose name is 16 times `name`.
fn write_key_file(path: &std::path::Path, name: u8) {
    let mut key = [0u8; 80];
    openssl::rand::rand_bytes(&mut key).unwrap();
    key[..16].fill(name);
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, format!("{}\n", openssl::base64::encode_block(&key))).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn the_key_file_watcher_runs_only_while_a_key_file_is_named() {
    let origin = Origin::fixed(b"ok");
    let setup = Setup::new("ticket-watcher");
    let keys = setup.dir.join("ring.keys");
    write_key_file(&keys, b'a');
    let plain = setup.config(origin.addr(), "", "");
    let with_keys = plain.replace(
        "proxy_pass default; }",
        &format!(
            "proxy_pass default; tls_tickets keys={}; }}",
            keys.display()
        ),
    );
    let mut proxy = setup.start(&plain);
    let pid = proxy.proc.pid();
    let mut reloads = 0;
    let mut reload = |text: &str, proxy: &mut e2e::proxy::Proxy| {
        std::fs::write(&proxy.config, text).unwrap();
        proxy.proc.signal(libc::SIGHUP);
        reloads += 1;
        let deadline = Instant::now() + Duration::from_secs(10);
        while proxy.proc.stderr().matches("reloaded").count() < reloads {
            assert!(
                Instant::now() < deadline,
                "no reload\n{}",
                proxy.proc.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert_eq!(watchers(pid), 0, "a watcher without a key file");

    reload(&with_keys, &mut proxy);
    assert!(
        wait_watchers(pid, 1, Duration::from_secs(2)),
        "no watcher after the reload"
    );
    write_key_file(&keys, b'b');
    assert!(
        proxy
            .proc
            .wait_for_output("key(s) in force", Duration::from_secs(10)),
        "the rotation was not seen\n{}",
        proxy.proc.logs()
    );

    reload(&plain, &mut proxy);
    assert!(
        wait_watchers(pid, 0, STOPPED_WITHIN),
        "the watcher outlived its key file"
    );
    reload(&with_keys, &mut proxy);
    assert!(
        wait_watchers(pid, 1, Duration::from_secs(2)),
        "no watcher after the second reload naming the file"
    );
}
