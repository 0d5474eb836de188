//! Edge-triggered read readiness: whether a read on a non-blocking TCP socket can return
//! anything before the next readiness event.
//!
//! With edge-triggered epoll an event is reported when bytes arrive. A TCP read that returns
//! fewer bytes than it asked for has emptied the receive queue (the kernel copies until the
//! queue, backlog included, is empty or the buffer is full), so another read before the next
//! event could only return `EAGAIN`: skipping it saves a syscall per request on keep-alive
//! connections (the loop that serves a request used to read three times: data, `EAGAIN`, and
//! `EAGAIN` again after writing the response).
//!
//! The end of the stream is the exception: a FIN that arrives with the last data is reported
//! by the same event, before the read that returns the data, and no later event would come.
//! After a read-closed (or error) event reads are therefore never skipped.
//!
//! The rule for the owner: call [`ReadReadiness::on_event`] for every readiness event of the
//! socket, before reading. A missed call would leave bytes unread until the next event.

use std::io;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadReadiness {
    /// The last read emptied the receive queue, and no event has come since.
    drained: bool,
    /// The peer's FIN (or an error) was reported: read until the read says so.
    closing: bool,
}

impl ReadReadiness {
    /// Whether a read may return bytes (or the end of the stream, or an error).
    pub fn may_read(&self) -> bool {
        !self.drained || self.closing
    }

    /// Records what a read of `asked` bytes returned.
    pub fn after_read(&mut self, asked: usize, result: &io::Result<usize>) {
        match result {
            Ok(n) if *n > 0 && *n < asked => self.drained = true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.drained = true,
            _ => {}
        }
    }

    /// A readiness event for the socket: bytes may have arrived; `read_closed` when the event
    /// also reports the peer's FIN, a hang-up or an error.
    pub fn on_event(&mut self, read_closed: bool) {
        self.drained = false;
        self.closing |= read_closed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn would_block() -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    #[test]
    fn a_short_read_or_eagain_drains_until_the_next_event() {
        let mut r = ReadReadiness::default();
        assert!(r.may_read());
        r.after_read(100, &Ok(100));
        assert!(r.may_read(), "a full read may leave more behind");
        r.after_read(100, &Ok(40));
        assert!(!r.may_read(), "a short read emptied the queue");
        r.on_event(false);
        assert!(r.may_read());
        r.after_read(100, &would_block());
        assert!(!r.may_read());
    }

    #[test]
    fn after_a_read_closed_event_reads_are_never_skipped() {
        let mut r = ReadReadiness::default();
        r.on_event(true);
        r.after_read(100, &Ok(10));
        assert!(r.may_read(), "the FIN behind the data must still be read");
        r.after_read(100, &Ok(0));
        assert!(r.may_read());
    }

    #[test]
    fn end_of_stream_and_errors_do_not_drain() {
        let mut r = ReadReadiness::default();
        r.after_read(100, &Ok(0));
        assert!(r.may_read());
        r.after_read(100, &Err(io::ErrorKind::ConnectionReset.into()));
        assert!(r.may_read());
    }
}
