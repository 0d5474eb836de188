//! QPACK against an independent implementation: pylsqpack (ls-qpack, as aioquic uses it).
//!
//! Its encoder, dynamic table on (4096 bytes, 16 blocked streams), encodes a corpus of
//! header lists; ours decodes each section, with the encoder stream fed after the section
//! for every other list (so the section blocks and resumes) and before it for the rest.
//! Our decoder stream goes back to its encoder, which refuses anything malformed. Then our
//! encoder encodes the same lists and the whole static table, and its decoder decodes them.
//!
//! Skips, saying why, without python3 or pylsqpack (`pip install pylsqpack`); fails
//! instead when KTLS_PROXY_REQUIRE_PYLSQPACK=1. The script bounds its own time (60 s).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use h3::qpack::{self, static_table::STATIC_TABLE, Decoded, Decoder, Outcome};
use h3::{Field, Limits};

fn available() -> bool {
    let why = match Command::new("python3")
        .args(["-c", "import pylsqpack"])
        .output()
    {
        Ok(out) if out.status.success() => return true,
        Ok(out) => format!(
            "pylsqpack missing: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => format!("python3 not runnable: {e}"),
    };
    assert!(
        std::env::var("KTLS_PROXY_REQUIRE_PYLSQPACK").as_deref() != Ok("1"),
        "KTLS_PROXY_REQUIRE_PYLSQPACK=1 but {why}"
    );
    eprintln!("SKIPPED: the pylsqpack cross-check did not run: {why}");
    false
}

/// The python process; dropped (a failed assertion included), it is killed by its pid.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer {
    fn start(mode: &str) -> Peer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pylsqpack_peer.py");
        let mut child = Command::new("python3")
            .args([script, mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Peer {
            child,
            stdin: Some(stdin),
            stdout,
        }
    }

    fn line(&mut self) -> Vec<String> {
        let mut l = String::new();
        self.stdout.read_line(&mut l).expect("read from the peer");
        assert!(!l.is_empty(), "the peer ended early (see its stderr)");
        l.split_whitespace().map(str::to_string).collect()
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open until finish");
        writeln!(stdin, "{line}").expect("write to the peer");
        stdin.flush().expect("flush to the peer");
    }

    fn finish(&mut self) {
        self.stdin.take();
        let status = self.child.wait().expect("the peer exits");
        assert!(status.success(), "the peer failed: {status}");
    }
}

fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "-".into();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex_list(s: &str) -> Vec<Field> {
    if s == "-" {
        return Vec::new();
    }
    s.split(',')
        .map(|pair| {
            let (n, v) = pair.split_once(':').expect("name:value");
            Field::new(&unhex(n), &unhex(v))
        })
        .collect()
}

fn limits() -> Limits {
    Limits {
        qpack_max_table_capacity: 4096,
        qpack_blocked_streams: 16,
        ..Limits::default()
    }
}

/// Decodes one section, feeding the encoder stream after it on odd lists (it may block,
/// then resume) and before it on even ones. Also says whether it blocked.
fn decode_one(
    d: &mut Decoder,
    i: usize,
    sid: u64,
    enc: &[u8],
    section: Vec<u8>,
) -> (Vec<Field>, bool) {
    let mut unblocked = Vec::new();
    let outcome = if i % 2 == 1 {
        let o = d.decode_section(sid, section).expect("section accepted");
        d.feed_encoder(enc, &mut unblocked)
            .expect("encoder stream accepted");
        o
    } else {
        d.feed_encoder(enc, &mut unblocked)
            .expect("encoder stream accepted");
        d.decode_section(sid, section).expect("section accepted")
    };
    let was_blocked = outcome == Outcome::Blocked;
    let decoded = match outcome {
        Outcome::Decoded(dec) => dec,
        Outcome::Blocked => {
            assert_eq!(unblocked.len(), 1, "list {i}: blocked and never resumed");
            let (stream, dec) = unblocked.pop().expect("one");
            assert_eq!(stream, sid);
            dec
        }
    };
    match decoded {
        Decoded::Fields(f) => (f, was_blocked),
        Decoded::TooLarge(kind) => panic!("list {i}: over a limit: {kind:?}"),
    }
}

#[test]
fn pylsqpack_encodes_with_its_dynamic_table_and_we_decode() {
    if !available() {
        return;
    }
    let mut peer = Peer::start("encode");
    let mut d = Decoder::new(&limits());
    let first = peer.line();
    assert_eq!(first[0], "E");
    d.feed_encoder(&unhex(&first[1]), &mut Vec::new())
        .expect("capacity accepted");
    d.take_instructions();
    let (mut lists, mut blocked, mut dynamic) = (0, 0, 0);
    loop {
        let l = peer.line();
        if l[0] == "END" {
            break;
        }
        let (sid, enc, section) = (l[1].parse().expect("sid"), unhex(&l[2]), unhex(&l[3]));
        let expected = unhex_list(&l[4]);
        dynamic += usize::from(section[0] != 0);
        let (got, was_blocked) = decode_one(&mut d, lists, sid, &enc, section);
        blocked += usize::from(was_blocked);
        assert_eq!(got, expected, "list {lists}");
        peer.send(&format!("D {}", hex(&d.take_instructions())));
        lists += 1;
    }
    peer.finish();
    eprintln!("pylsqpack -> h3: {lists} lists, {dynamic} with dynamic references, {blocked} blocked first");
    assert!(
        lists >= 20 && dynamic >= 10 && blocked >= 3,
        "{lists} {dynamic} {blocked}"
    );
}

#[test]
fn we_encode_and_pylsqpack_decodes() {
    if !available() {
        return;
    }
    // The lists of the corpus, as pylsqpack's encoder reports them.
    let mut corpus = Vec::new();
    let mut src = Peer::start("encode");
    src.line();
    loop {
        let l = src.line();
        if l[0] == "END" {
            break;
        }
        corpus.push(unhex_list(&l[4]));
        src.send("D -");
    }
    src.finish();
    corpus.push(STATIC_TABLE.iter().map(|(n, v)| Field::new(n, v)).collect());
    let mut peer = Peer::start("decode");
    for (i, list) in corpus.iter().enumerate() {
        let mut section = Vec::new();
        qpack::encode(
            list.iter().map(|f| (&f.name[..], &f.value[..])),
            &mut section,
        );
        peer.send(&format!("H {} {}", 4 * i, hex(&section)));
        let l = peer.line();
        assert_eq!(l[0], "L", "list {i}: pylsqpack refused it: {l:?}");
        assert_eq!(unhex_list(&l[1]), *list, "list {i}");
    }
    peer.send("Q");
    peer.finish();
    eprintln!(
        "h3 -> pylsqpack: {} lists, the last the whole static table",
        corpus.len()
    );
}
