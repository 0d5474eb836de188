//! Parse + validate time of real configurations: etc/tempesta.conf, its
//! TOML twin, and the commented Tempesta reference (all comments: a lexer
//! throughput figure).

use std::path::Path;

use criterion::{black_box, criterion_group, criterion_main, Criterion};

fn bench_parse(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut inputs = vec![
        ("tempesta.conf", root.join("etc/tempesta.conf")),
        ("tempesta.toml", root.join("etc/tempesta.toml")),
        (
            "tempesta_fw.conf (reference)",
            root.join("../shared/reference/tempesta_fw.conf"),
        ),
    ];
    inputs.retain(|(name, p)| {
        let present = p.exists();
        if !present {
            eprintln!("not benched: {name} ({} is missing)", p.display());
        }
        present
    });
    let base = root.join("etc");
    for (name, path) in inputs {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("config")
            .to_string();
        if config::parse_str(&file_name, &text, &base).is_err() {
            eprintln!("skipping {name}: it does not load");
            continue;
        }
        c.bench_function(&format!("parse+validate {name}"), |b| {
            b.iter(|| config::parse_str(black_box(&file_name), black_box(&text), &base))
        });
    }
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
