//! The full fault runs of issue 38 (`benches/faults/run.sh` calls this): the scenarios of
//! `e2e::faults::scenarios` for longer than the CI test, against the proxy and nginx, with a
//! table on stdout and every figure in a JSON file.
//!
//!     faults [--servers proxy,nginx] [--secs 30] [--h1-rate 200] [--h2-rate 100]
//!            [--scenarios a,b,...] [--json FILE]
//!            [--soak SECS [--soak-rate-of-max F [--max-rps N]] [--ws-rate R]
//!             [--soak-window SECS]]
//!
//! `--soak` runs the soak's mix (`e2e::faults::soak`) instead of the scenarios: at the
//! `--h1-rate`/`--h2-rate` rates, or at F times the highest rate of the mix (`--max-rps`, or
//! probed on the server first); `--ws-rate` WebSocket sessions a second (default one per 100
//! requests a second); the report counts by window of `--soak-window` seconds (60).
//!
//! Exit status 0 when every run met its expectation, 1 otherwise, 2 for bad arguments.
#![forbid(unsafe_code)]

use e2e::faults::report::{Report, TABLE_HEAD};
use e2e::faults::scenarios::{self, Params};
use e2e::faults::server::Kind;
use e2e::faults::soak::{self, Soak};

struct Args {
    servers: Vec<Kind>,
    params: Params,
    scenarios: Vec<String>,
    soak: Option<Soak>,
    json: Option<String>,
}

/// The soak's options (`--soak` and those after it), into `args.soak`.
fn soak_flag(soak: &mut Option<Soak>, flag: &str, value: &str) -> Result<(), String> {
    let s = soak.get_or_insert(Soak {
        kind: Kind::Proxy,
        secs: 0,
        h1_rate: 0,
        h2_rate: 0,
        ws_rate: None,
        rate_of_max: None,
        max_rps: None,
        window: 60,
    });
    let float = |v: &str| match v.parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => Ok(f),
        _ => Err(format!("{flag} {v}: a positive number")),
    };
    match flag {
        "--soak" => s.secs = value.parse().map_err(|e| format!("{value}: {e}"))?,
        "--soak-window" => s.window = value.parse().map_err(|e| format!("{value}: {e}"))?,
        "--soak-rate-of-max" => s.rate_of_max = Some(float(value)?),
        "--max-rps" => s.max_rps = Some(float(value)?),
        "--ws-rate" => s.ws_rate = Some(float(value)?),
        _ => return Err(format!("unknown option {flag}")),
    }
    Ok(())
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        servers: vec![Kind::Proxy, Kind::Nginx],
        params: Params {
            kind: Kind::Proxy,
            secs: 30,
            h1_rate: 200,
            h2_rate: 100,
        },
        scenarios: scenarios::ALL.iter().map(|(n, _)| n.to_string()).collect(),
        soak: None,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--servers" => {
                args.servers = value()?
                    .split(',')
                    .map(|s| match s {
                        "proxy" => Ok(Kind::Proxy),
                        "nginx" => Ok(Kind::Nginx),
                        other => Err(format!("unknown server {other}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--secs" => args.params.secs = number(value()?)?,
            "--h1-rate" => args.params.h1_rate = number(value()?)? as u32,
            "--h2-rate" => args.params.h2_rate = number(value()?)? as u32,
            "--scenarios" => args.scenarios = value()?.split(',').map(str::to_string).collect(),
            "--soak" | "--soak-window" | "--soak-rate-of-max" | "--max-rps" | "--ws-rate" => {
                soak_flag(&mut args.soak, &flag, &value()?)?
            }
            "--json" => args.json = Some(value()?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if args.soak.is_some_and(|s| s.secs == 0) {
        return Err(
            "--soak-window, --soak-rate-of-max, --max-rps and --ws-rate need --soak SECS".into(),
        );
    }
    for name in &args.scenarios {
        if !scenarios::ALL.iter().any(|(n, _)| n == name) {
            return Err(format!("unknown scenario {name}"));
        }
    }
    Ok(args)
}

/// What a report missed and its notes, one line each ("FAIL: ..." first, then "note: ...").
fn remarks(report: &Report) -> Vec<String> {
    let fails = report
        .violations()
        .into_iter()
        .map(|v| format!("FAIL: {v}"));
    fails
        .chain(report.notes.iter().map(|n| format!("note: {n}")))
        .collect()
}

/// The report's row on stdout (the table stays one Markdown table); its remarks on stderr as
/// it ends, and on stdout after the table (`print_remarks`).
fn print_report(report: &Report) {
    println!("{}", report.row());
    for r in remarks(report) {
        eprintln!("    {r}");
    }
}

/// Under the table: each row's remarks, named by scenario and server.
fn print_remarks(reports: &[Report]) {
    let mut first = true;
    for report in reports {
        for r in remarks(report) {
            if first {
                println!("\nRemarks:\n");
                first = false;
            }
            println!("- {} ({}): {r}", report.scenario, report.server);
        }
    }
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("faults: {e}");
            std::process::exit(2);
        }
    };
    println!("{TABLE_HEAD}");
    let mut reports: Vec<Report> = Vec::new();
    for &kind in &args.servers {
        let params = Params {
            kind,
            ..args.params
        };
        if let Some(s) = args.soak {
            let s = Soak {
                kind,
                h1_rate: params.h1_rate,
                h2_rate: params.h2_rate,
                ..s
            };
            let report = soak::soak(&s);
            print_report(&report);
            reports.push(report);
            continue;
        }
        for (name, scenario) in scenarios::ALL {
            if !args.scenarios.iter().any(|n| n == name) {
                continue;
            }
            if kind == Kind::Nginx && !scenarios::applies_to_nginx(name) {
                continue;
            }
            let report = scenario(&params);
            print_report(&report);
            reports.push(report);
        }
    }
    print_remarks(&reports);
    for report in &reports {
        if let Some(soak) = &report.soak {
            println!("{}", soak.table(report));
        }
    }
    if let Some(path) = &args.json {
        let all: Vec<_> = reports.iter().map(Report::to_json).collect();
        let text = serde_json::to_string_pretty(&all).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("faults: {path}: {e}");
            std::process::exit(2);
        }
    }
    let failed = reports.iter().any(|r| !r.violations().is_empty());
    std::process::exit(i32::from(failed));
}
