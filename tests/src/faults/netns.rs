//! The scenarios of the network: the server in a network namespace of its own, joined by a
//! veth pair with MTU 80 (a 40-byte MSS) to the clients and the origin on the host side,
//! and the same with a share of the packets dropped each way (nftables in the namespace;
//! this kernel has no netem).

use std::net::SocketAddr;

use super::fault_origin::FaultOrigin;
use super::isolation::NetNs;
use super::report::{Expect, Report};
use super::scenarios::{measure, sleep_secs, Params, Run};

fn namespace(scenario: &str) -> NetNs {
    match NetNs::create(80) {
        Ok(ns) => ns,
        Err(e) => panic!("the network namespace of {scenario}: {e} (root and `ip` are needed)"),
    }
}

fn run_in(ns: &NetNs, name: &'static str, p: &Params, origin: &FaultOrigin) -> Run {
    let mut run = Run::new(name, p, origin, Expect::statuses(&[200]));
    run.spec.listen_ip = ns.ns_ip;
    run.spec.prefix = ns.exec_prefix();
    run
}

/// MTU 80 only. Right: every request 200: records and HTTP/2 frames split over tiny
/// segments are reassembled on both sides.
pub fn mtu80_netns(p: &Params) -> Report {
    let ns = namespace("mtu80_netns");
    let origin = FaultOrigin::start(SocketAddr::from((ns.host_ip, 0)));
    let run = run_in(&ns, "mtu80_netns", p, &origin);
    let report = measure(p, run, &origin, |ctx| sleep_secs(ctx.params.secs as f64));
    drop(origin);
    drop(ns);
    report
}

/// MTU 80 and 1 % of the packets dropped each way.
pub fn mtu80_loss1(p: &Params) -> Report {
    mtu80_loss(p, "mtu80_loss1", 1)
}

/// MTU 80 and 5 % of the packets dropped each way.
pub fn mtu80_loss5(p: &Params) -> Report {
    mtu80_loss(p, "mtu80_loss5", 5)
}

/// MTU 80 and `percent` % of the packets into and out of the namespace dropped at random
/// (client and origin traffic alike), from before the server starts to the end of the
/// load's schedule; then the rules go, so that the end sample waits on no retransmission.
/// Right: every request 200 (TCP retransmits; a request is late, never lost), nothing lost,
/// no crash, descriptors back to the baseline. A connection whose SYN is dropped until the
/// client's 5 s connect timeout counts as not sent, the clients' limit.
fn mtu80_loss(p: &Params, name: &'static str, percent: u32) -> Report {
    let ns = namespace(name);
    let rules = match ns.drop_share(percent) {
        Ok(rules) => rules,
        Err(e) => panic!("{name}: no packet loss rules: {e}"),
    };
    let origin = FaultOrigin::start(SocketAddr::from((ns.host_ip, 0)));
    let run = run_in(&ns, name, p, &origin);
    let report = measure(p, run, &origin, |ctx| {
        sleep_secs(ctx.params.secs as f64);
        let dropped = ns.dropped();
        if let Err(e) = ns.stop_loss(rules) {
            ctx.notes.push(format!("the loss rules stayed: {e}"));
        }
        ctx.notes.push(match dropped {
            Some((into, out)) => format!(
                "{percent}% loss ({rules:?}): {into} packets dropped into the namespace and {out} out of it since the start"
            ),
            None => format!("{percent}% loss ({rules:?})"),
        });
    });
    drop(origin);
    drop(ns);
    report
}
