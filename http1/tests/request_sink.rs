//! The forwarded request head as pieces: [`RequestMeasure`] sizes exactly what [`RequestText`]
//! writes (the limits judge an HTTP/2 rendering by the same measure), and `TE: trailers` is
//! reported to the sink while the HTTP/1.1 text still drops TE.

use http1::{
    forward_request_fields, parse_request, BodyFraming, ConnectionOption, Forwarding, HeaderEdits,
    Limits, RequestMeasure, RequestSink, RequestText,
};

/// Records whether the sink was told the client accepts trailers.
#[derive(Default)]
struct Trailers(bool);

impl RequestSink for Trailers {
    fn start(&mut self, _: &[u8], _: &[u8]) {}
    fn field(&mut self, _: &[u8], _: &[u8]) {}
    fn value_start(&mut self, _: &[u8]) {}
    fn value_part(&mut self, _: &[u8]) {}
    fn value_end(&mut self) {}
    fn te_trailers(&mut self) {
        self.0 = true;
    }
    fn framing(&mut self, _: BodyFraming) {}
    fn connection(&mut self, _: ConnectionOption) {}
    fn end(&mut self) {}
}

fn pieces(raw: &[u8]) -> (Vec<u8>, RequestMeasure, bool) {
    let limits = Limits::default();
    let (head, _) = parse_request(raw, &limits)
        .expect("valid")
        .expect("complete");
    let mut edits = HeaderEdits::new();
    edits.set(b"X-Set", b"1").expect("valid edit");
    let fwd = Forwarding {
        forwarded_for: Some(b"192.0.2.7"),
        forwarded_proto: Some(b"https"),
        via: Some(b"p"),
        edits: &edits,
        framing: head.framing(),
        connection: ConnectionOption::Default,
        limits: &limits,
    };
    let mut out = Vec::new();
    let mut sinks = (
        (RequestText { out: &mut out }, RequestMeasure::default()),
        Trailers::default(),
    );
    forward_request_fields(&mut sinks, &head, raw, &fwd);
    let ((_, measure), trailers) = sinks;
    (out, measure, trailers.0)
}

#[test]
fn the_measure_is_the_texts_size() {
    let raw = b"POST http://h.test/p?q HTTP/1.1\r\nHost: h.test\r\nX-Forwarded-For: 10.0.0.1\r\n\
                Via: 1.0 a\r\nContent-Length: 5\r\nX-Set: 0\r\nAccept: */*\r\n\r\nhello";
    let (out, measure, trailers) = pieces(raw);
    assert_eq!(
        measure.measure.bytes,
        out.len(),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert!(!trailers);
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"),
        "{text}"
    );
    assert!(text.contains("Via: 1.0 a, 1.1 p\r\n"), "{text}");
    assert!(text.contains("Content-Length: 5\r\n"), "{text}");
}

#[test]
fn te_trailers_is_told_to_the_sink_and_not_written_as_http1() {
    let raw = b"POST /svc/M HTTP/1.1\r\nHost: h\r\nTE: gzip, Trailers\r\nContent-Length: 0\r\n\r\n";
    let (out, measure, trailers) = pieces(raw);
    assert!(trailers);
    assert_eq!(measure.measure.bytes, out.len());
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert!(!text.contains("\r\nte:"), "{text}");
}

/// A head too large as HTTP/1.1 text gets the same verdict from its measure (what an HTTP/2
/// rendering is judged by) as from the written text.
#[test]
fn the_measure_gives_the_texts_verdict() {
    let raw = b"GET /p HTTP/1.1\r\nHost: h\r\nX-A: 0123456789\r\nX-B: 0123456789\r\n\r\n";
    let parse_limits = Limits::default();
    let (head, _) = parse_request(raw, &parse_limits)
        .expect("valid")
        .expect("complete");
    let edits = HeaderEdits::new();
    for (max_headers, max_field_bytes, max_head_bytes) in
        [(3, 4096, 4096), (10, 20, 4096), (10, 4096, 60)]
    {
        let tight = Limits {
            max_headers,
            max_field_bytes,
            max_head_bytes,
            ..Limits::default()
        };
        let fwd = Forwarding {
            forwarded_for: Some(b"192.0.2.7"),
            forwarded_proto: None,
            via: Some(b"p"),
            edits: &edits,
            framing: head.framing(),
            connection: ConnectionOption::Default,
            limits: &tight,
        };
        let written = http1::write_request_head(&mut Vec::new(), &head, raw, &fwd);
        let mut measure = RequestMeasure::default();
        forward_request_fields(&mut measure, &head, raw, &fwd);
        assert_eq!(
            measure.measure.check(&tight),
            written,
            "{max_headers} {max_field_bytes} {max_head_bytes}"
        );
        assert!(written.is_err());
    }
}
