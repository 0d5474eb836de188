//! Issue 38, faults with figures, the CI version: every scenario of `e2e::faults::scenarios`
//! for a few seconds against the real proxy, under a fixed-rate load over HTTP/1.1 keep-alive
//! and HTTP/2 (h2load), asserting the expectation each scenario writes down: only the right
//! statuses (502 for a failing origin, never a hang), no request lost that the origin
//! answered, no crash, descriptors back to the baseline and RSS within its slack.
//! `benches/faults/run.sh` runs the same scenarios for longer, and against nginx.

use e2e::faults::report::Report;
use e2e::faults::scenarios::{self, Params};
use e2e::faults::server::Kind;

fn check(report: Report) {
    eprintln!("{}", report.row());
    let violations = report.violations();
    assert!(violations.is_empty(), "{}", report.describe());
    // The load ran: no scenario passes on requests that were never sent.
    assert!(
        report.h1.sent > 0 && report.h2.sent > 0,
        "{}",
        report.describe()
    );
}

fn ci() -> Params {
    Params::ci(Kind::Proxy)
}

#[test]
fn origin_killed_mid_response_gives_502_while_down_and_loses_nothing_it_answered() {
    check(scenarios::origin_killed(&ci()));
}

#[test]
fn a_one_byte_a_second_origin_is_answered_200_whole() {
    check(scenarios::origin_slow(&ci()));
}

#[test]
fn a_resetting_origin_gives_502_for_every_request() {
    check(scenarios::origin_resetting(&ci()));
}

#[test]
fn an_origin_answering_garbage_gives_502_for_every_request() {
    check(scenarios::origin_garbage(&ci()));
}

#[test]
fn an_origin_at_ten_times_its_latency_is_answered_200_for_every_request() {
    check(scenarios::origin_latency_10x(&ci()));
}

#[test]
fn a_reload_every_100ms_under_load_loses_no_request() {
    check(scenarios::reload_every_100ms(&ci()));
}

#[test]
fn a_hot_upgrade_under_load_loses_no_request_of_either_protocol() {
    check(scenarios::hot_upgrade(&ci()));
}

#[test]
fn descriptor_exhaustion_hangs_nothing_and_recovers() {
    check(scenarios::fd_exhaustion(&ci()));
}

#[test]
fn mtu_80_in_a_network_namespace_is_answered_200() {
    check(scenarios::mtu80_netns(&ci()));
}

#[test]
fn a_memory_cgroup_limit_near_the_working_set_kills_nothing() {
    check(scenarios::memcg_limit(&ci()));
}
