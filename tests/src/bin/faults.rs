//! The full fault runs of issue 38 (`benches/faults/run.sh` calls this): the scenarios of
//! `e2e::faults::scenarios` for longer than the CI test, against the proxy and nginx, with a
//! table on stdout and every figure in a JSON file.
//!
//!     faults [--servers proxy,nginx] [--secs 30] [--h1-rate 200] [--h2-rate 100]
//!            [--scenarios a,b,...] [--soak SECS] [--json FILE]
//!
//! Exit status 0 when every run met its expectation, 1 otherwise, 2 for bad arguments.
#![forbid(unsafe_code)]

use e2e::faults::report::{Report, TABLE_HEAD};
use e2e::faults::scenarios::{self, Params};
use e2e::faults::server::Kind;

struct Args {
    servers: Vec<Kind>,
    params: Params,
    scenarios: Vec<String>,
    soak: Option<u64>,
    json: Option<String>,
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
            "--soak" => args.soak = Some(number(value()?)?),
            "--json" => args.json = Some(value()?),
            other => return Err(format!("unknown option {other}")),
        }
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
        if let Some(secs) = args.soak {
            let report = scenarios::soak(&Params { secs, ..params });
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
