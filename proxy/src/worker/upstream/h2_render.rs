//! A health monitor's answer from an HTTP/2 origin, rendered as HTTP/1.1 for
//! `worker/health.rs` to judge as it judges any server's (an exchange's response goes to
//! the relay decoded instead: `h2_pieces.rs`): the head as a status line (the reason left empty: the relay puts
//! the standard one) and the fields; the body raw under the origin's Content-Length, else
//! chunked, its trailers (gRPC's `grpc-status`) as the chunked body's trailer section, which
//! the relay hands to the client's codec; a response without a body by definition gets no
//! framing, and an empty one ended by END_STREAM a `content-length: 0`. The codec checked
//! every field already (RFC 9113 §8.2.1: no CR, LF or NUL; no connection-specific field).

use h2::ClientEvent;

/// A stream's pieces a rendering writes into (`H2Stream::render_to`): its response bytes not
/// yet in the read buffer, the window owed for its body bytes, whether the request was HEAD,
/// whether its body is rendered chunked.
pub(super) struct RenderTo<'a> {
    pub overflow: &'a mut Vec<u8>,
    pub owed: &'a mut usize,
    pub head_request: bool,
    pub chunked: &'a mut bool,
}

/// Renders `ev` (any event but a reset, window or connection one) into a stream's response
/// bytes.
pub(super) fn render(to: RenderTo<'_>, ev: ClientEvent) {
    match ev {
        ClientEvent::Interim { response, .. } => head(to.overflow, &response, None),
        ClientEvent::Response {
            response,
            end_stream,
            ..
        } => final_head(to, &response, end_stream),
        ClientEvent::Data {
            data, end_stream, ..
        } => {
            *to.owed += data.len();
            if !*to.chunked {
                to.overflow.extend_from_slice(&data);
                return;
            }
            if !data.is_empty() {
                let size = http1::ChunkSize::new(data.len());
                to.overflow.extend_from_slice(size.as_bytes());
                to.overflow.extend_from_slice(&data);
                to.overflow.extend_from_slice(http1::CHUNK_END);
            }
            if end_stream {
                to.overflow.extend_from_slice(http1::LAST_CHUNK);
                to.overflow.extend_from_slice(http1::TRAILER_END);
            }
        }
        // Under a Content-Length the body ended already: HTTP/1.1 has no place for them.
        ClientEvent::Trailers { fields, .. } if *to.chunked => {
            to.overflow.extend_from_slice(http1::LAST_CHUNK);
            for f in &fields {
                http1::write_field(to.overflow, &f.name, &f.value);
            }
            to.overflow.extend_from_slice(http1::TRAILER_END);
        }
        _ => {}
    }
}

/// The final head: its framing decided here (see the module's comment).
fn final_head(to: RenderTo<'_>, response: &h2::Response, end_stream: bool) {
    let status = response.status;
    let bodiless = to.head_request || status == 204 || status == 304 || status < 200;
    if end_stream && !bodiless && response.field(b"grpc-status").is_some() {
        return trailers_only(to, response);
    }
    let framing: Option<(&[u8], &[u8])> = if bodiless || response.content_length.is_some() {
        None
    } else if end_stream {
        Some((b"content-length", b"0"))
    } else {
        *to.chunked = true;
        Some((b"transfer-encoding", b"chunked"))
    };
    head(to.overflow, response, framing);
}

/// gRPC's Trailers-Only response (one HEADERS with END_STREAM: the status, the content
/// type and the call's status and metadata) rendered as a head with its content type and a
/// trailer section with the rest: the same call, and the form every hop can carry (relayed
/// as a head, a client's codec would end the stream with an empty DATA frame, and a gRPC
/// client needs its status in trailers).
fn trailers_only(to: RenderTo<'_>, response: &h2::Response) {
    let content_type = |f: &&h2::Field| f.name == b"content-type";
    http1::write_status_line(to.overflow, response.status, b"");
    for f in response.fields.iter().filter(content_type) {
        http1::write_field(to.overflow, &f.name, &f.value);
    }
    http1::write_field(to.overflow, b"transfer-encoding", b"chunked");
    to.overflow.extend_from_slice(http1::TRAILER_END);
    to.overflow.extend_from_slice(http1::LAST_CHUNK);
    for f in response.fields.iter().filter(|f| !content_type(f)) {
        http1::write_field(to.overflow, &f.name, &f.value);
    }
    to.overflow.extend_from_slice(http1::TRAILER_END);
}

/// A head: status line (no reason), fields, the framing field if any, the empty line.
fn head(out: &mut Vec<u8>, response: &h2::Response, framing: Option<(&[u8], &[u8])>) {
    http1::write_status_line(out, response.status, b"");
    for f in &response.fields {
        http1::write_field(out, &f.name, &f.value);
    }
    if let Some((name, value)) = framing {
        http1::write_field(out, name, value);
    }
    // The empty line that ends a head is the one that ends a trailer section.
    out.extend_from_slice(http1::TRAILER_END);
}

#[cfg(test)]
mod tests {
    use super::*;
    use http1::{parse_response, BodyDecoder, BodyFraming, Limits};

    fn response(status: u16, fields: &[(&[u8], &[u8])], length: Option<u64>) -> h2::Response {
        h2::Response {
            status,
            fields: fields.iter().map(|(n, v)| h2::Field::new(n, v)).collect(),
            content_length: length,
        }
    }

    /// Renders `events` for a request (`head_request`: HEAD); the bytes and the credit owed.
    fn rendered(events: Vec<ClientEvent>, head_request: bool) -> (Vec<u8>, usize) {
        let (mut out, mut owed, mut chunked) = (Vec::new(), 0, false);
        for ev in events {
            let to = RenderTo {
                overflow: &mut out,
                owed: &mut owed,
                head_request,
                chunked: &mut chunked,
            };
            render(to, ev);
        }
        (out, owed)
    }

    fn data(d: &[u8], end_stream: bool) -> ClientEvent {
        ClientEvent::Data {
            stream: 1,
            data: d.to_vec(),
            end_stream,
        }
    }

    #[test]
    fn grpc_trailers_become_the_chunked_trailer_section() {
        let head = response(200, &[(b"content-type", b"application/grpc")], None);
        let events = vec![
            ClientEvent::Response {
                stream: 1,
                response: head,
                end_stream: false,
            },
            data(b"\0\0\0\0\x02hi", false),
            ClientEvent::Trailers {
                stream: 1,
                fields: vec![
                    h2::Field::new(b"grpc-status", b"5"),
                    h2::Field::new(b"grpc-message", b"not found"),
                ],
            },
        ];
        let (out, owed) = rendered(events, false);
        assert_eq!(owed, 7);
        let limits = Limits::default();
        let Ok(Some((parsed, len))) = parse_response(&out, &limits, false) else {
            panic!("{}", out.escape_ascii());
        };
        assert_eq!(parsed.status(), 200);
        assert_eq!(parsed.framing(), BodyFraming::Chunked);
        let mut decoder = BodyDecoder::new(BodyFraming::Chunked, &limits);
        let mut at = len;
        loop {
            let Ok(step) = decoder.decode(&out[at..]) else {
                panic!("bad chunks: {}", out.escape_ascii());
            };
            at += step.consumed;
            if step.done {
                break;
            }
            assert!(step.consumed > 0, "stuck at {at}: {}", out.escape_ascii());
        }
        assert_eq!(at, out.len());
        let BodyDecoder::Chunked(c) = &decoder else {
            panic!("not chunked");
        };
        assert_eq!(
            c.trailer_section(),
            b"grpc-status: 5\r\ngrpc-message: not found\r\n"
        );
    }

    #[test]
    fn a_grpc_trailers_only_answer_keeps_its_status_in_trailers() {
        let fields: &[(&[u8], &[u8])] = &[
            (b"content-type", b"application/grpc"),
            (b"grpc-status", b"5"),
            (b"grpc-message", b"gone"),
        ];
        let events = vec![ClientEvent::Response {
            stream: 1,
            response: response(200, fields, None),
            end_stream: true,
        }];
        let (out, _) = rendered(events, false);
        let want: &[u8] = b"HTTP/1.1 200 \r\ncontent-type: application/grpc\r\n\
            transfer-encoding: chunked\r\n\r\n0\r\ngrpc-status: 5\r\ngrpc-message: gone\r\n\r\n";
        assert_eq!(
            out.escape_ascii().to_string(),
            want.escape_ascii().to_string()
        );
    }

    #[test]
    fn a_length_stays_and_bodiless_answers_get_no_framing() {
        let sized = response(200, &[(b"content-length", b"2")], Some(2));
        let events = vec![
            ClientEvent::Response {
                stream: 1,
                response: sized,
                end_stream: false,
            },
            data(b"ok", true),
        ];
        let (out, _) = rendered(events, false);
        assert_eq!(out, b"HTTP/1.1 200 \r\ncontent-length: 2\r\n\r\nok");
        let empty = |status| ClientEvent::Response {
            stream: 1,
            response: response(status, &[], None),
            end_stream: true,
        };
        let (out, _) = rendered(vec![empty(200)], false);
        assert_eq!(out, b"HTTP/1.1 200 \r\ncontent-length: 0\r\n\r\n");
        let (out, _) = rendered(vec![empty(304)], false);
        assert_eq!(out, b"HTTP/1.1 304 \r\n\r\n");
        let (out, _) = rendered(vec![empty(200)], true);
        assert_eq!(out, b"HTTP/1.1 200 \r\n\r\n");
    }
}
