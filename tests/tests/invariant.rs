//! The exchange invariant (issue 12), through the real binary: several clients send pipelined,
//! tagged requests with bodies of every framing (none, Content-Length, chunked with and
//! without trailers and extensions, `Expect: 100-continue`), to a recording origin that
//! sometimes answers before reading the body (403, 302, 413, an early 200), sometimes closes,
//! and answers HEAD. Random but seeded. For every seed:
//!
//! - the origin receives exactly the requests the proxy accepted, each once, each with its own
//!   body (a body that outlives its exchange shows up as a request with no tag, or as another
//!   request's body);
//! - every client gets exactly its own responses, in order (the origin echoes the tag), and no
//!   answer the proxy made itself except a 5xx;
//! - nothing stalls.
//!
//! `INVARIANT_SEEDS=N` runs N seeds (default 300), `INVARIANT_FIRST_SEED=S` starts at S, and
//! `INVARIANT_NO_EARLY=1` leaves out early answers (to tell issue 12 item 1 from anything
//! else). One proxy and one origin serve all seeds, so pooled upstream connections carry over
//! from one seed to the next: a failure names its seed, and may need the seeds before it to
//! reproduce.

use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use e2e::pipeline_client::{
    plan_requests, run_client, ClientOutcome, End, PlannedRequest, SeededRng,
};
use e2e::proxy::{Proxy, Setup};
use e2e::tagged_origin::{early_answer, full_answer, BodyState, Plan, TaggedOrigin, TaggedRequest};

/// How long one client may take for all its requests.
const CLIENT_PATIENCE: Duration = Duration::from_secs(10);
/// How long the origin may take to finish reading bodies after the clients are done.
const ORIGIN_PATIENCE: Duration = Duration::from_secs(3);

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn start() -> (TaggedOrigin, Proxy, SocketAddr) {
    let origin = TaggedOrigin::start();
    let setup = Setup::new("invariant");
    let addr = setup.http;
    let conf = setup.config(
        origin.addr(),
        "",
        "frang_limits { http_methods GET HEAD POST PUT; }",
    );
    let proxy = setup.start(&conf);
    (origin, proxy, addr)
}

#[test]
fn every_client_gets_its_own_responses_and_the_origin_exactly_the_accepted_requests() {
    let seeds = env_number("INVARIANT_SEEDS", 300);
    let early = std::env::var_os("INVARIANT_NO_EARLY").is_none();
    let first = env_number("INVARIANT_FIRST_SEED", 1);
    let (origin, proxy, addr) = start();
    let started = Instant::now();
    let mut requests_sent = 0;
    for seed in first..first + seeds {
        let (plans, outcomes) = run_seed(addr, seed, early);
        requests_sent += plans.iter().map(Vec::len).sum::<usize>();
        let records = origin.records_settled(&format!("s{seed}c"), ORIGIN_PATIENCE);
        if let Err(violation) = check_seed(&plans, &outcomes, &records) {
            let tail: Vec<String> = proxy
                .proc
                .stderr()
                .lines()
                .rev()
                .take(20)
                .map(String::from)
                .collect();
            panic!(
                "seed {seed} (INVARIANT_FIRST_SEED={seed} INVARIANT_SEEDS=1 to rerun): \
                 {violation}\n{}origin:\n{}proxy log (last lines, newest first):\n{}",
                describe(&plans, &outcomes),
                describe_records(&records),
                tail.join("\n"),
            );
        }
    }
    assert!(
        proxy.proc.stderr().lines().all(|l| !l.contains("panicked")),
        "{}",
        proxy.proc.logs()
    );
    eprintln!(
        "invariant: {seeds} seeds, {requests_sent} requests in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Plans the clients of `seed` and runs them at once.
fn run_seed(
    addr: SocketAddr,
    seed: u64,
    early: bool,
) -> (Vec<Vec<PlannedRequest>>, Vec<ClientOutcome>) {
    let mut rng = SeededRng::new(seed);
    let clients = 2 + rng.below(3) as usize;
    let plans: Vec<Vec<PlannedRequest>> = (0..clients)
        .map(|c| plan_requests(&mut rng, seed, c, early))
        .collect();
    let handles: Vec<_> = plans
        .iter()
        .cloned()
        .map(|requests| thread::spawn(move || run_client(addr, &requests, CLIENT_PATIENCE)))
        .collect();
    let outcomes = handles
        .into_iter()
        .map(|h| h.join().expect("client thread"))
        .collect();
    (plans, outcomes)
}

/// The invariant for one seed.
fn check_seed(
    plans: &[Vec<PlannedRequest>],
    outcomes: &[ClientOutcome],
    records: &[TaggedRequest],
) -> Result<(), String> {
    let mut answered_by_origin = Vec::new();
    let mut in_flight_when_cut = Vec::new();
    for (requests, outcome) in plans.iter().zip(outcomes) {
        match &outcome.end {
            End::Stalled => return Err("a client stalled".into()),
            End::Garbled(what) => return Err(format!("a client read garbage: {what}")),
            End::Closed => {
                // The request in flight when the proxy closed may have reached the origin
                // with no answer coming back (its body was cut short, say).
                if let Some(r) = requests.get(outcome.responses.len()) {
                    in_flight_when_cut.push(r.tag.clone());
                }
            }
            End::Reset => {
                // A reset destroys what the client had not read yet: any unanswered request
                // may have been answered.
                let unanswered = requests.iter().skip(outcome.responses.len());
                in_flight_when_cut.extend(unanswered.map(|r| r.tag.clone()));
            }
            End::Answered => {}
        }
        for (request, response) in requests.iter().zip(&outcome.responses) {
            check_response(request, response)?;
            if response.tag.is_some() {
                answered_by_origin.push(request.tag.clone());
            }
        }
    }
    let all: Vec<&PlannedRequest> = plans.iter().flatten().collect();
    let mut seen = Vec::new();
    for record in records {
        let Some(request) = all.iter().find(|r| r.tag == record.tag) else {
            return Err(format!(
                "the origin received a request nobody sent: {} {} body {:?}",
                record.method,
                record.target,
                String::from_utf8_lossy(&record.body[..record.body.len().min(80)])
            ));
        };
        if seen.contains(&record.tag) {
            return Err(format!("the origin received {} twice", record.tag));
        }
        seen.push(record.tag.clone());
        check_record(request, record)?;
        if !answered_by_origin.contains(&record.tag) && !in_flight_when_cut.contains(&record.tag) {
            return Err(format!(
                "the origin answered {} but its client never got that answer",
                record.tag
            ));
        }
    }
    if let Some(missing) = answered_by_origin.iter().find(|t| !seen.contains(t)) {
        return Err(format!("{missing} was answered but not recorded"));
    }
    Ok(())
}

/// A response at a request's position is that request's: the origin's echo of its tag and
/// body, or a 5xx the proxy made.
fn check_response(
    request: &PlannedRequest,
    response: &e2e::pipeline_client::SeenResponse,
) -> Result<(), String> {
    let Some(tag) = &response.tag else {
        if response.status >= 500 {
            return Ok(());
        }
        return Err(format!(
            "{} got {} made by the proxy (not the origin): {:?}",
            request.tag,
            response.status,
            String::from_utf8_lossy(&response.body)
        ));
    };
    if *tag != request.tag {
        return Err(format!("{} got the response for {tag}", request.tag));
    }
    let expected = match request.plan {
        _ if request.is_head() => String::new(),
        Plan::Early(_) | Plan::EarlyClose(_) => early_answer(tag),
        Plan::Full | Plan::Chunked | Plan::Close => full_answer(tag, &request.body),
    };
    if response.body != expected.as_bytes() {
        return Err(format!(
            "{} got body {:?}, expected {expected:?}",
            request.tag,
            String::from_utf8_lossy(&response.body)
        ));
    }
    Ok(())
}

/// What the origin recorded for a request is that request, with its own body.
fn check_record(request: &PlannedRequest, record: &TaggedRequest) -> Result<(), String> {
    if record.method != request.method || record.target != request.target() {
        return Err(format!(
            "{} arrived as {} {}",
            request.tag, record.method, record.target
        ));
    }
    let prefix_ok = request.body.starts_with(&record.body);
    match record.body_state {
        BodyState::Complete if record.body == request.body => Ok(()),
        BodyState::Complete => Err(format!(
            "{}: the origin read a body of {} bytes that is not the one sent ({} bytes)",
            request.tag,
            record.body.len(),
            request.body.len()
        )),
        // After an early answer the proxy may close instead of sending the rest.
        BodyState::Cut if request.plan.is_early() && prefix_ok => Ok(()),
        BodyState::Unread if request.plan.is_early() => Ok(()),
        BodyState::Reading => Err(format!(
            "{}: the origin is still waiting for the rest of its body ({} of {} bytes)",
            request.tag,
            record.body.len(),
            request.body.len()
        )),
        state => Err(format!(
            "{}: body {state:?} for plan {:?}",
            request.tag, request.plan
        )),
    }
}

/// The seed's requests and what each client saw, for the failure message.
fn describe(plans: &[Vec<PlannedRequest>], outcomes: &[ClientOutcome]) -> String {
    let mut text = String::new();
    for (c, (requests, outcome)) in plans.iter().zip(outcomes).enumerate() {
        text.push_str(&format!(
            "client {c}: ended {:?}, {} sent\n",
            outcome.end, outcome.sent
        ));
        for (i, r) in requests.iter().enumerate() {
            let seen = outcome
                .responses
                .get(i)
                .map(|s| format!("{} tag {:?}", s.status, s.tag))
                .unwrap_or_else(|| "-".into());
            text.push_str(&format!(
                "  {} {} {:?} body {} expect {} pieces {} -> {seen}\n",
                r.method,
                r.target(),
                r.framing,
                r.body.len(),
                r.expect,
                r.body_pieces.len()
            ));
        }
    }
    text
}

/// What the origin recorded, for the failure message.
fn describe_records(records: &[TaggedRequest]) -> String {
    records
        .iter()
        .map(|r| {
            format!(
                "  conn {} {} {} body {} {:?}\n",
                r.conn,
                r.method,
                r.target,
                r.body.len(),
                r.body_state
            )
        })
        .collect()
}
