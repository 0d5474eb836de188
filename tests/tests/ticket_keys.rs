//! `tls_tickets keys=FILE` (issue 37, ticket key rings) through the real binary and the real
//! `openssl s_client`: nodes sharing a key file resume each other's sessions; a rotation
//! (a new first key, the old one second) keeps old tickets resuming while new ones are sealed
//! with the new key; the old key's removal ends its tickets; a bad file is refused at load
//! with its directive's position, and at run time leaves the keys in force.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::origin::Origin;
use e2e::proxy::{Proxy, Setup};
use e2e::{gen_cert, proxy_cmd, KeyKind};

const VERSIONS: [&str; 2] = ["-tls1_2", "-tls1_3"];

/// The watcher polls every 2 s: a rotation is in force well within this.
const ROTATION_SEEN: Duration = Duration::from_secs(10);

/// One key of 80 bytes whose 16-byte name is `name` (padded), the rest random.
fn key_line(name: &str) -> (String, [u8; 16]) {
    let (key, label) = key_bytes(name, 80);
    (openssl::base64::encode_block(&key), label)
}

/// A key of `len` bytes (80 or 48) named `name`, as bytes.
fn key_bytes(name: &str, len: usize) -> (Vec<u8>, [u8; 16]) {
    let mut key = vec![0u8; len];
    let mut label = [b'.'; 16];
    label[..name.len()].copy_from_slice(name.as_bytes());
    key[..16].copy_from_slice(&label);
    openssl::rand::rand_bytes(&mut key[16..]).expect("random key bytes");
    // Not ASCII, as a random key is (a binary key file must not read as text).
    key[16] |= 0x80;
    (key, label)
}

/// Writes `lines` as the key file the way a platform does it: a new file renamed over the
/// old one (`atomic`), or the old one rewritten in place.
fn write_keys(path: &Path, lines: &[&str], atomic: bool) {
    let text = format!(
        "# ticket keys, the sealing one first\n{}\n",
        lines.join("\n")
    );
    if atomic {
        let tmp = path.with_extension("new");
        std::fs::write(&tmp, text).expect("write new key file");
        std::fs::rename(&tmp, path).expect("rename key file");
    } else {
        std::fs::write(path, text).expect("rewrite key file");
    }
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Handshake {
    Resumed,
    Full,
}

/// One `openssl s_client` exchange (a GET, the proxy closes), bounded to 10 s; saves the
/// session (with its ticket) to `save`, offers the one in `offer`.
fn exchange(
    addr: SocketAddr,
    version: &str,
    sni: &str,
    save: Option<&Path>,
    offer: Option<&Path>,
) -> (Handshake, String) {
    let mut cmd = Command::new("openssl");
    cmd.args([
        "s_client",
        "-ign_eof",
        "-servername",
        sni,
        version,
        "-connect",
    ])
    .arg(addr.to_string());
    if let Some(path) = save {
        cmd.arg("-sess_out").arg(path);
    }
    if let Some(path) = offer {
        cmd.arg("-sess_in").arg(path);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start openssl s_client");
    let request = format!("GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(request.as_bytes());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if child.try_wait().ok().flatten().is_none() {
        e2e::send_signal(child.id(), libc::SIGKILL);
    }
    let out = child.wait_with_output().expect("s_client's output");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        report.contains("HTTP/1.1 200"),
        "{version} to {addr}: no response\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let handshake = match (report.contains("\nReused,"), report.contains("\nNew,")) {
        (true, false) => Handshake::Resumed,
        (false, true) => Handshake::Full,
        _ => panic!("cannot tell whether the session resumed:\n{report}"),
    };
    (handshake, report)
}

/// [`exchange`]'s handshake alone.
fn handshake(
    addr: SocketAddr,
    version: &str,
    sni: &str,
    save: Option<&Path>,
    offer: Option<&Path>,
) -> Handshake {
    exchange(addr, version, sni, save, offer).0
}

/// The newest ticket `report` (s_client's output) shows: s_client dumps every session it
/// gets (after a resumed TLS 1.2 handshake too, where it writes no `-sess_out`), the ticket
/// in rows of "0000 - 6b 74 6c 73 ...-... 16 bytes   ktls...", the hex padded to width.
fn newest_ticket(report: &str) -> Vec<u8> {
    let dump = report
        .rsplit("TLS session ticket:")
        .next()
        .unwrap_or_default();
    let mut bytes = Vec::new();
    for row in dump.lines().skip(1) {
        let Some((_, rest)) = row.split_once(" - ") else {
            break;
        };
        let hex: String = rest.chars().take(16 * 3).collect();
        bytes.extend(
            hex.replace('-', " ")
                .split_whitespace()
                .filter_map(|t| u8::from_str_radix(t, 16).ok()),
        );
    }
    assert!(bytes.len() > 64, "no ticket in:\n{report}");
    bytes
}

/// The name of the key that sealed the newest ticket of `report`: a ticket starts with it.
fn newest_ticket_key(report: &str) -> String {
    String::from_utf8_lossy(&newest_ticket(report)[..16]).into_owned()
}

/// Opens `ticket` as nginx would with `key` (its layouts: 48 bytes = name, AES-128 key, HMAC
/// key; 80 = name, HMAC key, AES-256 key): the HMAC-SHA256 of all but the last 32 bytes is
/// the last 32, and the rest after the name and IV decrypts (AES-CBC) to a DER session.
fn opens_as_nginx(ticket: &[u8], key: &[u8]) -> bool {
    use openssl::symm::{decrypt, Cipher};
    let (cipher, aes, hmac) = match key.len() {
        48 => (Cipher::aes_128_cbc(), &key[16..32], &key[32..48]),
        _ => (Cipher::aes_256_cbc(), &key[48..80], &key[16..48]),
    };
    let (sealed, mac) = ticket.split_at(ticket.len() - 32);
    let pkey = openssl::pkey::PKey::hmac(hmac).expect("hmac key");
    let mut signer =
        openssl::sign::Signer::new(openssl::hash::MessageDigest::sha256(), &pkey).expect("hmac");
    signer.update(sealed).expect("hmac");
    let expected = signer.sign_to_vec().expect("hmac");
    let (iv, ciphertext) = sealed[16..].split_at(16);
    let plain = decrypt(cipher, aes, Some(iv), ciphertext);
    expected == mac && sealed[..16] == key[..16] && plain.is_ok_and(|p| p.first() == Some(&0x30))
}

fn label(name: [u8; 16]) -> String {
    String::from_utf8_lossy(&name).into_owned()
}

/// A node: one vhost `site` whose tickets come from `keys`.
fn node(tag: &str, origin: &Origin, keys: &Path) -> (Proxy, SocketAddr) {
    let setup = Setup::new(tag);
    let https = setup.https;
    let conf = setup.config(origin.addr(), "", "").replace(
        "proxy_pass default; }",
        &format!(
            "proxy_pass default; tls_tickets keys={}; }}",
            keys.display()
        ),
    );
    (setup.start(&conf), https)
}

/// Waits until the proxy has logged `needle` more than `before` times.
fn wait_for_count(proxy: &mut Proxy, needle: &str, before: usize, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if proxy.proc.logs().matches(needle).count() > before {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn session(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.pem"))
}

#[test]
fn two_nodes_sharing_a_key_file_resume_each_others_sessions() {
    let origin = Origin::fixed(b"ok");
    let dir = e2e::TempDir::new("ticket-keys-shared");
    let (shared_line, shared_name) = key_line("fleet-key-1");
    let (other_line, _) = key_line("another-key");
    let shared = dir.join("shared.keys");
    let other = dir.join("other.keys");
    write_keys(&shared, &[&shared_line], true);
    write_keys(&other, &[&other_line], true);
    let (a, a_addr) = node("ticket-keys-a", &origin, &shared);
    let (b, b_addr) = node("ticket-keys-b", &origin, &shared);
    let (_c, c_addr) = node("ticket-keys-c", &origin, &other);
    for version in VERSIONS {
        let from_a = session(dir.path(), &format!("a{version}"));
        let (first, report) = exchange(a_addr, version, "site.test", Some(&from_a), None);
        assert_eq!(first, Handshake::Full);
        assert_eq!(newest_ticket_key(&report), label(shared_name));
        assert_eq!(
            handshake(b_addr, version, "site.test", None, Some(&from_a)),
            Handshake::Resumed,
            "{version}: node B did not resume node A's session\n{}\n{}",
            a.proc.logs(),
            b.proc.logs()
        );
        assert_eq!(
            handshake(c_addr, version, "site.test", None, Some(&from_a)),
            Handshake::Full,
            "{version}: a node with another key file resumed the session"
        );
    }
}

/// The rotation recipe of docs/FLEET.md on two nodes: new key first (the file renamed over),
/// then the old key dropped (the file rewritten in place).
#[test]
fn a_rotation_keeps_old_tickets_until_their_key_leaves_the_ring() {
    let origin = Origin::fixed(b"ok");
    let dir = e2e::TempDir::new("ticket-keys-rotation");
    let (old_line, old_name) = key_line("old-key");
    let (new_line, new_name) = key_line("new-key");
    let keys = dir.join("ring.keys");
    write_keys(&keys, &[&old_line], true);
    let (mut a, a_addr) = node("ticket-rot-a", &origin, &keys);
    let (mut b, b_addr) = node("ticket-rot-b", &origin, &keys);
    let changed = "key file";
    for version in VERSIONS {
        let old = session(dir.path(), &format!("old{version}"));
        let (_, report) = exchange(a_addr, version, "site.test", Some(&old), None);
        assert_eq!(newest_ticket_key(&report), label(old_name));
    }

    write_keys(&keys, &[&new_line, &old_line], true);
    for (name, proxy) in [("A", &mut a), ("B", &mut b)] {
        assert!(
            wait_for_count(proxy, changed, 0, ROTATION_SEEN),
            "node {name} did not re-read the rotated file\n{}",
            proxy.proc.logs()
        );
    }
    for version in VERSIONS {
        let old = session(dir.path(), &format!("old{version}"));
        let (resumed, report) = exchange(b_addr, version, "site.test", None, Some(&old));
        assert_eq!(
            resumed,
            Handshake::Resumed,
            "{version}: the old key, second in the ring, no longer opens its tickets\n{}",
            b.proc.logs()
        );
        // The resumption brings a ticket sealed with the new first key.
        assert_eq!(newest_ticket_key(&report), label(new_name), "{version}");
        let fresh = session(dir.path(), &format!("fresh{version}"));
        let (full, report) = exchange(a_addr, version, "site.test", Some(&fresh), None);
        assert_eq!(full, Handshake::Full);
        assert_eq!(newest_ticket_key(&report), label(new_name), "{version}");
    }

    write_keys(&keys, &[&new_line], false);
    for (name, proxy) in [("A", &mut a), ("B", &mut b)] {
        assert!(
            wait_for_count(proxy, changed, 1, ROTATION_SEEN),
            "node {name} did not re-read the file rewritten in place\n{}",
            proxy.proc.logs()
        );
    }
    for version in VERSIONS {
        let old = session(dir.path(), &format!("old{version}"));
        let fresh = session(dir.path(), &format!("fresh{version}"));
        for addr in [a_addr, b_addr] {
            assert_eq!(
                handshake(addr, version, "site.test", None, Some(&old)),
                Handshake::Full,
                "{version}: a ticket of the retired key resumed on {addr}"
            );
            assert_eq!(
                handshake(addr, version, "site.test", None, Some(&fresh)),
                Handshake::Resumed,
                "{version}: a ticket of the key in force did not resume on {addr}"
            );
        }
    }
}

#[test]
fn a_bad_key_file_is_refused_at_load_and_leaves_the_keys_in_force_at_run_time() {
    let origin = Origin::fixed(b"ok");
    let dir = e2e::TempDir::new("ticket-keys-bad");
    let (line, name) = key_line("kept-key");
    let keys = dir.join("ring.keys");
    write_keys(&keys, &[&line], true);
    let (mut proxy, addr) = node("ticket-bad", &origin, &keys);
    let saved = session(dir.path(), "kept");
    let (_, report) = exchange(addr, "-tls1_3", "site.test", Some(&saved), None);
    assert_eq!(newest_ticket_key(&report), label(name));

    // Half a key, as a platform's interrupted write would leave it.
    write_keys(&keys, &[&line[..60]], false);
    assert!(
        wait_for_count(
            &mut proxy,
            "the previous keys stay in force",
            0,
            ROTATION_SEEN
        ),
        "no word of the bad file\n{}",
        proxy.proc.logs()
    );
    let logs = proxy.proc.logs();
    assert!(logs.contains("line 2: the key is 45 bytes"), "{logs}");
    assert_eq!(
        handshake(addr, "-tls1_3", "site.test", None, Some(&saved)),
        Handshake::Resumed,
        "the keys in force were lost to a bad file"
    );

    // At load: the directive's file:line:col and what is wrong with the file.
    let check = proxy_cmd(&proxy.config, &["-t"]);
    let text = e2e::output_text(&check);
    assert!(!check.status.success(), "a bad key file passed -t:\n{text}");
    let conf = std::fs::read_to_string(&proxy.config).expect("config");
    let (line_no, col) = conf
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.find("keys=").map(|c| (i + 1, c + 1 + "keys=".len())))
        .expect("the keys= attribute");
    let position = format!("{}:{line_no}:{col}", proxy.config.display());
    assert!(text.contains(&position), "no {position} in:\n{text}");
    assert!(text.contains("line 2: the key is 45 bytes"), "{text}");
}

/// Keys from one file may seal several vhosts' tickets: a session of one vhost still does
/// not resume under another.
#[test]
fn vhosts_sharing_a_key_file_keep_their_sessions_apart() {
    let origin = Origin::fixed(b"ok");
    let setup = Setup::new("ticket-keys-vhosts");
    let dir = setup.dir.path().to_path_buf();
    let (line, _) = key_line("two-vhosts");
    let keys = dir.join("ring.keys");
    write_keys(&keys, &[&line], true);
    let (a_crt, a_key) = gen_cert(&dir, "a", KeyKind::EcdsaP256, &["a.test"]);
    let (b_crt, b_key) = gen_cert(&dir, "b", KeyKind::EcdsaP256, &["b.test"]);
    let conf = format!(
        "listen {http};\nlisten {https} proto=https;\n\
         srv_group default {{ server {origin}; }}\n\
         tls_tickets keys={keys};\n\
         vhost a.test {{ tls_certificate {ac}; tls_certificate_key {ak}; proxy_pass default; }}\n\
         vhost b.test {{ tls_certificate {bc}; tls_certificate_key {bk}; proxy_pass default; }}\n\
         http_chain {{ host == \"a.test\" -> a.test; host == \"b.test\" -> b.test; }}\n",
        http = setup.http,
        https = setup.https,
        origin = origin.addr(),
        keys = keys.display(),
        ac = a_crt.display(),
        ak = a_key.display(),
        bc = b_crt.display(),
        bk = b_key.display(),
    );
    let https = setup.https;
    let _proxy = setup.start(&conf);
    for version in VERSIONS {
        let a = session(&dir, &format!("a{version}"));
        handshake(https, version, "a.test", Some(&a), None);
        assert_eq!(
            handshake(https, version, "a.test", None, Some(&a)),
            Handshake::Resumed,
            "{version}: the control failed: tickets do not resume at all"
        );
        assert_eq!(
            handshake(https, version, "b.test", None, Some(&a)),
            Handshake::Full,
            "{version}: a session of a.test resumed under b.test"
        );
    }
}

/// A reload reads the key file for the new configuration (here: from `secret=` to
/// `keys=`), and a reload naming a bad file is refused with the file's problem while the
/// keys in force stay.
#[test]
fn a_reload_reads_the_key_file_and_one_naming_a_bad_file_is_refused() {
    let origin = Origin::fixed(b"ok");
    let setup = Setup::new("ticket-keys-reload");
    let dir = setup.dir.path().to_path_buf();
    let https = setup.https;
    let conf = setup.config(origin.addr(), "", "").replace(
        "proxy_pass default; }",
        "proxy_pass default; tls_tickets secret=\"before the reload\"; }",
    );
    let mut proxy = setup.start(&conf);
    let (line, name) = key_line("after-reload");
    let keys = dir.join("ring.keys");
    write_keys(&keys, &[&line], true);
    let before = session(&dir, "before");
    handshake(https, "-tls1_3", "site.test", Some(&before), None);

    let text = std::fs::read_to_string(&proxy.config).expect("config");
    let with_keys = text.replace(
        "secret=\"before the reload\"",
        &format!("keys={}", keys.display()),
    );
    std::fs::write(&proxy.config, &with_keys).expect("write config");
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        wait_for_count(&mut proxy, "reloaded", 0, ROTATION_SEEN),
        "no reload\n{}",
        proxy.proc.logs()
    );
    let after = session(&dir, "after");
    let (full, report) = exchange(https, "-tls1_3", "site.test", Some(&after), None);
    assert_eq!(full, Handshake::Full);
    assert_eq!(newest_ticket_key(&report), label(name));
    assert_eq!(
        handshake(https, "-tls1_3", "site.test", None, Some(&before)),
        Handshake::Full,
        "a ticket of the replaced secret resumed"
    );

    let bad = dir.join("bad.keys");
    std::fs::write(&bad, "not a key\n").expect("write bad file");
    std::fs::write(
        &proxy.config,
        with_keys.replace(&keys.display().to_string(), &bad.display().to_string()),
    )
    .expect("write config");
    proxy.proc.signal(libc::SIGHUP);
    assert!(
        wait_for_count(
            &mut proxy,
            "still serving the previous configuration",
            0,
            ROTATION_SEEN
        ),
        "the reload naming a bad key file was not refused\n{}",
        proxy.proc.logs()
    );
    assert!(
        proxy.proc.logs().contains("line 1: not base64"),
        "{}",
        proxy.proc.logs()
    );
    assert_eq!(
        handshake(https, "-tls1_3", "site.test", None, Some(&after)),
        Handshake::Resumed,
        "the keys in force were lost to a refused reload"
    );
}

/// nginx's key files as they are: a 48-byte key (AES-128-CBC, a 16-byte HMAC key) in a line,
/// and a bare binary 80-byte file (`openssl rand 80 > file`), each sealing tickets as nginx
/// does with the same key (so a mixed fleet shares them) and opening them.
#[test]
fn nginx_key_sizes_and_binary_files_seal_and_open_tickets() {
    let origin = Origin::fixed(b"ok");
    let dir = e2e::TempDir::new("ticket-keys-nginx");
    let (short, short_name) = key_bytes("aes128-key", 48);
    let lines = dir.join("short.keys");
    write_keys(&lines, &[&openssl::base64::encode_block(&short)], true);
    let (raw, raw_name) = key_bytes("binary-key", 80);
    let binary = dir.join("binary.key");
    std::fs::write(&binary, &raw).expect("write the binary key");
    for (tag, file, name) in [("short", &lines, short_name), ("binary", &binary, raw_name)] {
        let (_node, addr) = node(&format!("ticket-nginx-{tag}"), &origin, file);
        for version in VERSIONS {
            let saved = session(dir.path(), &format!("{tag}{version}"));
            let (_, report) = exchange(addr, version, "site.test", Some(&saved), None);
            assert_eq!(newest_ticket_key(&report), label(name), "{tag} {version}");
            let key = if tag == "short" { &short } else { &raw };
            assert!(
                opens_as_nginx(&newest_ticket(&report), key),
                "{tag} {version}: the ticket is not sealed as nginx seals with this key"
            );
            assert_eq!(
                handshake(addr, version, "site.test", None, Some(&saved)),
                Handshake::Resumed,
                "{tag} {version}: its ticket did not resume"
            );
        }
    }
}
