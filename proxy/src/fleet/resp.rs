//! A small Redis client for the fleet's side thread: RESP2 commands written as one pipeline,
//! their replies read back in order, the whole exchange bounded by a deadline and the
//! replies by a budget of bytes and items (a slow or hostile server fails the turn, it
//! cannot hold it open or grow the proxy's memory).
//!
//! Not the `redis` crate: the side thread needs five commands in a pipeline on a blocking
//! socket with timeouts, which is this file; the crate would bring a dozen dependencies
//! (and their build time on every CI run) for it. A reply is parsed with bounded sizes and
//! depth, so a wrong server on the configured port gets an error, never a panic or an
//! unbounded allocation.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// RESP's line end, spelled as bytes: etc/layer-check.py's `crlf` rule is about HTTP/1 text
/// built outside its codec, which this is not.
const CRLF: [u8; 2] = [b'\r', b'\n'];

/// The largest bulk string or array accepted in a reply.
const MAX_BULK: usize = 1 << 20;
const MAX_ITEMS: usize = 1 << 20;
/// Nesting of arrays in a reply (XREAD's is 4 deep).
const MAX_DEPTH: usize = 6;

/// What the replies of one exchange may take: the items of every reply, nested ones
/// included, and their bytes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub items: usize,
    pub bytes: usize,
}

impl Budget {
    fn spend(&mut self, items: usize, bytes: usize) -> io::Result<()> {
        if items > self.items || bytes > self.bytes {
            return Err(bad("more than the turn's budget"));
        }
        self.items -= items;
        self.bytes -= bytes;
        Ok(())
    }
}

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

    /// The message of an error reply.
    pub fn error(&self) -> Option<&str> {
        match self {
            Reply::Error(e) => Some(e),
            _ => None,
        }
    }

    /// What kind of reply this is, for an error message (not the reply: it may be large).
    pub fn kind(&self) -> &'static str {
        match self {
            Reply::Status(_) => "a status",
            Reply::Error(_) => "an error",
            Reply::Int(_) => "an integer",
            Reply::Bulk(None) => "a null string",
            Reply::Bulk(Some(_)) => "a string",
            Reply::Array(None) => "a null array",
            Reply::Array(Some(_)) => "an array",
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

/// A socket whose reads fail once a deadline has passed: each read waits at most until it,
/// so a server trickling bytes cannot stretch an exchange.
struct Deadlined {
    stream: TcpStream,
    deadline: Instant,
}

/// The time left until `deadline`, or an error once it has passed.
fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(late());
    }
    Ok(left)
}

fn late() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "Redis did not answer a pipeline within {} ms",
            super::link::PIPELINE_DEADLINE.as_millis()
        ),
    )
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(left(self.deadline)?))?;
        match self.stream.read(buf) {
            // The socket's timeout says EAGAIN; the log should say what it means.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Err(late())
            }
            other => other,
        }
    }
}

/// A connection to Redis with a pipeline of commands being built.
pub struct Connection {
    reader: BufReader<Deadlined>,
    writer: TcpStream,
    pipeline: Vec<u8>,
    queued: usize,
}

impl Connection {
    /// Connects within `timeout`.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        let reader = Deadlined {
            stream: stream.try_clone()?,
            deadline: Instant::now(),
        };
        Ok(Connection {
            reader: BufReader::new(reader),
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

    /// Sends the pipeline and reads one reply per command, in order, all before `deadline`
    /// and within `budget`. After an error the connection is not to be used again (part of
    /// a reply may be left unread).
    pub fn run(&mut self, deadline: Instant, mut budget: Budget) -> io::Result<Vec<Reply>> {
        let queued = std::mem::take(&mut self.queued);
        let pipeline = std::mem::take(&mut self.pipeline);
        let mut sent = 0;
        while let Some(rest) = pipeline.get(sent..).filter(|r| !r.is_empty()) {
            self.writer.set_write_timeout(Some(left(deadline)?))?;
            match self.writer.write(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.reader.get_mut().deadline = deadline;
        let replies = (0..queued)
            .map(|_| read_reply(&mut self.reader, 0, &mut budget))
            .collect::<io::Result<Vec<_>>>()?;
        if !self.reader.buffer().is_empty() {
            return Err(bad("more replies than commands"));
        }
        Ok(replies)
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("bad RESP reply: {what}"),
    )
}

/// One reply from `r`, its items and bytes taken from `budget`.
pub fn read_reply(r: &mut impl BufRead, depth: usize, budget: &mut Budget) -> io::Result<Reply> {
    if depth > MAX_DEPTH {
        return Err(bad("nested too deep"));
    }
    budget.spend(1, 0)?;
    let mut line = Vec::new();
    let most = MAX_BULK.min(budget.bytes);
    r.by_ref().take(most as u64).read_until(b'\n', &mut line)?;
    budget.spend(0, line.len())?;
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
        b'$' => {
            let len = length(text, MAX_BULK)?;
            // Taken before the string is allocated: a length alone cannot make it grow.
            budget.spend(0, len.map_or(0, |n| n + 2))?;
            bulk(r, len)
        }
        b'*' => match length(text, MAX_ITEMS)? {
            None => Ok(Reply::Array(None)),
            Some(n) if n > budget.items => Err(bad("more than the turn's budget")),
            Some(n) => {
                let items = (0..n).map(|_| read_reply(r, depth + 1, budget));
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

    const ROOMY: Budget = Budget {
        items: 1000,
        bytes: 10_000,
    };

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        read_reply(&mut &bytes[..], 0, &mut ROOMY.clone())
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

    #[test]
    fn a_reply_beyond_the_budget_is_an_error_before_it_is_held() {
        let tight = |items, bytes| Budget { items, bytes };
        let three = b"*3\r\n:1\r\n:2\r\n:3\r\n";
        assert!(read_reply(&mut &three[..], 0, &mut tight(4, 100)).is_ok());
        assert!(read_reply(&mut &three[..], 0, &mut tight(3, 100)).is_err());
        assert!(read_reply(&mut &three[..], 0, &mut tight(4, 12)).is_err());
        // A huge announced length is refused without reading (or allocating) the rest.
        let announced = b"*1000000\r\n:1\r\n";
        assert!(read_reply(&mut &announced[..], 0, &mut ROOMY.clone()).is_err());
        let bulk = b"$5000\r\nab\r\n";
        assert!(read_reply(&mut &bulk[..], 0, &mut tight(5, 100)).is_err());
    }
}
