//! An HTTP/2 origin's response for an exchange, as the one response relay takes it
//! (`worker/response/`): decoded pieces queued on the stream entry, never HTTP/1 text. A
//! head (interim or final) is the origin's status and fields, which the relay assembles into
//! the head it reads any server's response as (`upstream_h2.rs` `response_head`, through
//! `http1::ResponseBuilder`); the body is its DATA as it came; the end carries the trailers
//! (gRPC's `grpc-status`), empty if none. The framing is decided here as the stream gives it:
//! a response without a body by definition gets none; an empty one ended by END_STREAM a
//! `content-length: 0`; otherwise the origin's Content-Length, else the stream's end.
//!
//! A health monitor's stream is not an exchange: its answer is still rendered as HTTP/1.1
//! for `worker/health.rs` to judge (`h2_render.rs`).

use std::collections::VecDeque;

use h2::ClientEvent;

use super::h2_conn::H2Link;
use super::Upstream;

/// One piece of an origin's response, in the order the stream gave them.
pub enum Piece {
    /// A head: a 1xx, or the final one.
    Head(h2::Response),
    /// Body bytes.
    Data(Vec<u8>),
    /// The response is complete, with its trailers (none: empty).
    End(Vec<h2::Field>),
}

/// Interim heads a stream's queue holds at most: one more than the relay relays
/// (`response::MAX_INTERIM_RESPONSES`), so that a flood of them still reaches its refusal
/// (502). HEADERS have no flow control, so nothing else bounds this queue but the relay's
/// taking them as they come, which it does today; the bound keeps that true whatever the
/// relay becomes.
pub const INTERIM_KEPT: usize = 9;

/// Queues what event `ev` (any but a reset, window or connection one) says of the response
/// for a stream whose request was HEAD or not (`head_request`).
pub(super) fn queue(pieces: &mut VecDeque<Piece>, ev: ClientEvent, head_request: bool) {
    match ev {
        // Before the final head every head queued is an interim one.
        ClientEvent::Interim { response, .. } if interim_heads(pieces) < INTERIM_KEPT => {
            pieces.push_back(Piece::Head(response));
        }
        ClientEvent::Response {
            response,
            end_stream,
            ..
        } => final_head(pieces, response, (head_request, end_stream)),
        ClientEvent::Data {
            data, end_stream, ..
        } => {
            if !data.is_empty() {
                pieces.push_back(Piece::Data(data));
            }
            if end_stream {
                pieces.push_back(Piece::End(Vec::new()));
            }
        }
        ClientEvent::Trailers { fields, .. } => pieces.push_back(Piece::End(fields)),
        _ => {}
    }
}

fn interim_heads(pieces: &VecDeque<Piece>) -> usize {
    pieces
        .iter()
        .filter(|p| matches!(p, Piece::Head(_)))
        .count()
}

/// The final head, and its end when it has no body (see the module's comment).
fn final_head(
    pieces: &mut VecDeque<Piece>,
    mut response: h2::Response,
    (head_request, end_stream): (bool, bool),
) {
    let status = response.status;
    let bodiless = head_request || status == 204 || status == 304 || status < 200;
    if end_stream && !bodiless && response.field(b"grpc-status").is_some() {
        return trailers_only(pieces, response);
    }
    if end_stream && !bodiless && response.content_length.is_none() {
        response
            .fields
            .push(h2::Field::new(b"content-length", b"0"));
        response.content_length = Some(0);
    }
    pieces.push_back(Piece::Head(response));
    if end_stream {
        pieces.push_back(Piece::End(Vec::new()));
    }
}

/// gRPC's Trailers-Only response (one HEADERS with END_STREAM: the status, the content
/// type and the call's status and metadata) as a head with its content type, no body, and
/// the rest as trailers: the same call, and the form every hop can carry (relayed as a head,
/// a client's codec would end the stream with an empty DATA frame, and a gRPC client needs
/// its status in trailers).
fn trailers_only(pieces: &mut VecDeque<Piece>, response: h2::Response) {
    let (head, trailers): (Vec<h2::Field>, Vec<h2::Field>) = response
        .fields
        .into_iter()
        .partition(|f| f.name == b"content-type");
    pieces.push_back(Piece::Head(h2::Response {
        status: response.status,
        fields: head,
        content_length: None,
    }));
    pieces.push_back(Piece::End(trailers));
}

/// Takes the next piece of stream entry `u`'s response (None inside: nothing yet); a
/// body piece's bytes are owed back to the origin's windows (`h2_conn.rs` `give_back`, once
/// the relay passed them on). None: `u` is not a stream entry.
pub fn take(u: &mut Upstream) -> Option<Option<Piece>> {
    let Some(H2Link::Stream(s)) = u.h2.as_mut() else {
        return None;
    };
    let piece = s.pieces.pop_front();
    if let Some(Piece::Data(data)) = &piece {
        s.owed += data.len();
    }
    Some(piece)
}
