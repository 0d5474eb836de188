//! Chunked transfer coding (RFC 9112 section 7.1), decoded only to find where a body ends:
//! the data is skipped, never copied. Shared by `http-perf` (responses) and `origin` (request
//! bodies, included with `#[path]`).

/// The chunked framing is broken; the connection cannot be used further.
#[derive(Debug, PartialEq, Eq)]
pub struct ChunkError(pub &'static str);

/// Discards a chunked body. It works on the connection's input buffer, consuming only whole
/// lines, so a size line split across reads simply waits for more bytes.
#[derive(Debug, Default)]
pub struct ChunkedDiscard {
    state: ChunkState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailer,
}

/// Longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 4096;

impl ChunkedDiscard {
    /// Consumes what it can of `buf`; returns (bytes consumed, body finished).
    pub fn feed(&mut self, buf: &[u8]) -> Result<(usize, bool), ChunkError> {
        let mut pos = 0;
        loop {
            let rest = &buf[pos..];
            match self.state {
                ChunkState::Data(n) => {
                    let take = n.min(rest.len() as u64);
                    pos += take as usize;
                    self.state = if take == n {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(n - take)
                    };
                    if take < n {
                        return Ok((pos, false));
                    }
                }
                ChunkState::Size | ChunkState::DataEnd | ChunkState::Trailer => {
                    let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
                        if rest.len() > MAX_LINE {
                            return Err(ChunkError("chunk line too long"));
                        }
                        return Ok((pos, false));
                    };
                    let line = rest[..nl].strip_suffix(b"\r").unwrap_or(&rest[..nl]);
                    pos += nl + 1;
                    match self.state {
                        ChunkState::Size => {
                            let size = line.split(|b| *b == b';').next().unwrap_or(b"");
                            let size = std::str::from_utf8(size)
                                .ok()
                                .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
                                .ok_or(ChunkError("invalid chunk size"))?;
                            self.state = if size == 0 {
                                ChunkState::Trailer
                            } else {
                                ChunkState::Data(size)
                            };
                        }
                        ChunkState::DataEnd if line.is_empty() => self.state = ChunkState::Size,
                        ChunkState::DataEnd => return Err(ChunkError("chunk without CRLF")),
                        _ if line.is_empty() => {
                            self.state = ChunkState::Size;
                            return Ok((pos, true));
                        }
                        _ => {} // a trailer field: ignored
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_body_split_anywhere() {
        let body = b"5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        for split in 0..body.len() {
            let mut d: ChunkedDiscard = ChunkedDiscard::default();
            let mut buf = body[..split].to_vec();
            let (used, done) = d.feed(&buf).unwrap();
            assert!(!done || split >= body.len() - 4);
            buf.drain(..used);
            buf.extend_from_slice(&body[split..]);
            let (used, done) = if done {
                (0, true)
            } else {
                d.feed(&buf).unwrap()
            };
            assert!(done, "split at {split}");
            if used > 0 {
                assert_eq!(&buf[used..], b"NEXT");
            }
        }
    }
}
