//! An incremental HTTP/1.1 response reader without I/O: it finds where each response ends
//! (Content-Length, chunked, or the end of the connection) so keep-alive and pipelining work,
//! and reports the status and whether the server will close the connection.

use crate::chunked::ChunkedDiscard;

/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;

/// A response that cannot be framed; the connection must be dropped.
#[derive(Debug, PartialEq, Eq)]
pub struct ResponseError(pub &'static str);

/// One complete response.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Complete {
    pub status: u16,
    /// The server said `Connection: close` (or spoke HTTP/1.0 without keep-alive).
    pub close: bool,
}

enum State {
    Head,
    Length {
        left: u64,
        done: Complete,
    },
    Chunked {
        decoder: ChunkedDiscard,
        done: Complete,
    },
    /// No framing: the body ends when the server closes.
    UntilClose {
        done: Complete,
    },
}

/// Reads a stream of responses.
pub struct ResponseReader {
    state: State,
}

impl Default for ResponseReader {
    fn default() -> Self {
        ResponseReader { state: State::Head }
    }
}

impl ResponseReader {
    /// Consumes bytes of `buf`; returns how many, and the response they completed, if any.
    /// Call again with the rest while it returns a response. `head_only` is true when the
    /// request was HEAD (the response has no body whatever its headers say).
    pub fn feed(
        &mut self,
        buf: &[u8],
        head_only: bool,
    ) -> Result<(usize, Option<Complete>), ResponseError> {
        match &mut self.state {
            State::Head => self.feed_head(buf, head_only),
            State::Length { left, done } => {
                let take = (*left).min(buf.len() as u64);
                *left -= take;
                let finished = (*left == 0).then_some(*done);
                if finished.is_some() {
                    self.state = State::Head;
                }
                Ok((take as usize, finished))
            }
            State::Chunked { decoder, done } => {
                let done = *done;
                let (used, finished) = decoder.feed(buf).map_err(|e| ResponseError(e.0))?;
                if finished {
                    self.state = State::Head;
                    return Ok((used, Some(done)));
                }
                Ok((used, None))
            }
            State::UntilClose { .. } => Ok((buf.len(), None)),
        }
    }

    /// The server closed the connection: completes a body delimited by the close.
    pub fn eof(&mut self) -> Option<Complete> {
        match std::mem::replace(&mut self.state, State::Head) {
            State::UntilClose { done } => Some(done),
            _ => None,
        }
    }

    fn feed_head(
        &mut self,
        buf: &[u8],
        head_only: bool,
    ) -> Result<(usize, Option<Complete>), ResponseError> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        let head_len = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
                return Err(ResponseError("response head larger than 64 KiB"))
            }
            Ok(httparse::Status::Partial) => return Ok((0, None)),
            Err(_) => return Err(ResponseError("malformed response head")),
        };
        let status = resp.code.unwrap_or(0);
        // An interim response (100 Continue, 103 Early Hints) precedes the real one.
        if (100..200).contains(&status) && status != 101 {
            return Ok((head_len, None));
        }
        let mut close = resp.version == Some(0);
        let mut length: Option<u64> = None;
        let mut chunked = false;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or(ResponseError("invalid Content-Length"))?;
                length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = h
                    .value
                    .to_ascii_lowercase()
                    .windows(7)
                    .any(|w| w == b"chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                let v = h.value.to_ascii_lowercase();
                if v.windows(5).any(|w| w == b"close") {
                    close = true;
                } else if v.windows(10).any(|w| w == b"keep-alive") {
                    close = false;
                }
            }
        }
        let done = Complete { status, close };
        let bodiless = head_only || status == 204 || status == 304;
        if bodiless {
            return Ok((head_len, Some(done)));
        }
        self.state = if chunked {
            State::Chunked {
                decoder: ChunkedDiscard::default(),
                done,
            }
        } else {
            match length {
                Some(0) => return Ok((head_len, Some(done))),
                Some(left) => State::Length { left, done },
                None => State::UntilClose {
                    done: Complete {
                        close: true,
                        ..done
                    },
                },
            }
        };
        Ok((head_len, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` one slice at a time, as reads would deliver them, and collects responses.
    fn read_all(bytes: &[u8], step: usize, head_only: bool) -> Vec<Complete> {
        let mut r = ResponseReader::default();
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for piece in bytes.chunks(step) {
            buf.extend_from_slice(piece);
            loop {
                let (used, done) = r.feed(&buf, head_only).unwrap();
                buf.drain(..used);
                if let Some(d) = done {
                    out.push(d);
                } else if used == 0 || buf.is_empty() {
                    break;
                }
            }
        }
        out.extend(r.eof());
        out
    }

    #[test]
    fn pipelined_length_and_chunked_in_any_split() {
        let stream = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 NF\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nHTTP/1.1 301 M\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        for step in 1..stream.len() {
            let got = read_all(stream, step, false);
            let statuses: Vec<u16> = got.iter().map(|c| c.status).collect();
            assert_eq!(statuses, vec![200, 404, 301], "step {step}");
            assert!(!got[0].close && got[2].close);
        }
    }

    #[test]
    fn head_and_close_delimited() {
        let got = read_all(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", 7, true);
        assert_eq!(got.len(), 1);
        let got = read_all(b"HTTP/1.0 200 OK\r\n\r\nbody until close", 4, false);
        assert_eq!(
            got,
            vec![Complete {
                status: 200,
                close: true
            }]
        );
        let mut r = ResponseReader::default();
        assert!(r.feed(b"NOT HTTP\r\n\r\n", false).is_err());
    }
}
