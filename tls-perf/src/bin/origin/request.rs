//! Request side of `origin`, without I/O: parse one request head, decide the response, and
//! discard request bodies (Content-Length or chunked) as their bytes arrive.

use std::io::Write;

pub use crate::chunked::ChunkedDiscard;

/// Largest request head accepted; beyond it the request is refused with 400.
pub const MAX_HEAD: usize = 64 * 1024;
/// Largest `/bytes/N` body served (bodies are streamed from a filler, so this bounds time, not memory).
pub const MAX_BODY: u64 = 1 << 32;
/// The path that reports this process's counters as JSON.
pub const STATS_PATH: &str = "/__origin/stats";

/// Why a request was refused with 400.
#[derive(Debug, PartialEq, Eq)]
pub struct BadRequest(pub &'static str);

/// How the request body that follows the head is framed.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// What to answer to one parsed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// A body of this many filler bytes.
    Bytes(u64),
    /// This process's counters.
    Stats,
}

/// One parsed request head.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// Bytes of the head, including the final CRLF.
    pub head_len: usize,
    pub head_only: bool,
    pub close: bool,
    /// HTTP/1.0 with `Connection: keep-alive`: the response must say so.
    pub keep_alive_1_0: bool,
    pub framing: BodyFraming,
    pub answer: Answer,
}

/// Parses a request head at the start of `buf`; `Ok(None)` means more bytes are needed.
pub fn parse(buf: &[u8], default_size: u64) -> Result<Option<Request>, BadRequest> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(BadRequest("request head too large"))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(BadRequest("malformed request")),
    };
    let version_1_0 = req.version == Some(0);
    let mut connection_close = version_1_0;
    let mut keep_alive_1_0 = false;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or(BadRequest("invalid Content-Length"))?;
            if content_length.is_some_and(|old| old != value) {
                return Err(BadRequest("conflicting Content-Length"));
            }
            content_length = Some(value);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let value = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            if value.trim().ends_with("chunked") {
                chunked = true;
            } else {
                return Err(BadRequest("unsupported Transfer-Encoding"));
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|b| *b == b',') {
                let token = String::from_utf8_lossy(token);
                match token.trim().to_ascii_lowercase().as_str() {
                    "close" => connection_close = true,
                    "keep-alive" if version_1_0 => {
                        connection_close = false;
                        keep_alive_1_0 = true;
                    }
                    _ => {}
                }
            }
        }
    }
    let framing = match (content_length, chunked) {
        (Some(_), true) => return Err(BadRequest("both Content-Length and Transfer-Encoding")),
        (Some(0), false) | (None, false) => BodyFraming::None,
        (Some(n), false) => BodyFraming::Length(n),
        (None, true) => BodyFraming::Chunked,
    };
    let path = req.path.unwrap_or("/");
    let path = path.split('?').next().unwrap_or(path);
    let answer = if path == STATS_PATH {
        Answer::Stats
    } else if let Some(n) = path.strip_prefix("/bytes/") {
        match n.parse::<u64>() {
            Ok(n) if n <= MAX_BODY => Answer::Bytes(n),
            _ => return Err(BadRequest("/bytes/N needs a number up to 2^32")),
        }
    } else {
        Answer::Bytes(default_size)
    };
    Ok(Some(Request {
        head_len,
        head_only: req.method == Some("HEAD"),
        close: connection_close,
        keep_alive_1_0: keep_alive_1_0 && !connection_close,
        framing,
        answer,
    }))
}

/// Appends a response head for a body of `body_len` bytes.
pub fn write_head(out: &mut Vec<u8>, body_len: u64, cache_control: Option<&str>, req: &Request) {
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nServer: origin\r\nContent-Type: text/plain\r\nContent-Length: {body_len}\r\n"
    );
    if let Some(cc) = cache_control {
        let _ = write!(out, "Cache-Control: {cc}\r\n");
    }
    if req.close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if req.keep_alive_1_0 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The 400 answer; the connection is closed after it.
pub const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nServer: origin\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes_head_and_close() {
        let r = parse(
            b"HEAD /bytes/77 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nX",
            10,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.answer, Answer::Bytes(77));
        assert!(r.head_only && r.close);
        assert_eq!(r.head_len, 55);
        let r = parse(b"GET /x HTTP/1.0\r\n\r\n", 10).unwrap().unwrap();
        assert_eq!(r.answer, Answer::Bytes(10));
        assert!(r.close);
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost:", 10), Ok(None));
    }

    #[test]
    fn refuses_smuggling_shapes() {
        let both = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(parse(both, 10).is_err());
        let two = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n";
        assert!(parse(two, 10).is_err());
        assert!(parse(b"\x01\x02garbage\r\n\r\n", 10).is_err());
    }
}
