//! Rate mode's wake-up: a timerfd armed for the next intended send time, so a request goes
//! out within microseconds of it. epoll_wait's timeout counts whole milliseconds (mio rounds
//! up), which would send requests in bursts up to 1 ms late and, since latency counts from
//! the intended time, add that lateness to every server's figures alike.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};

pub struct Pacer {
    fd: OwnedFd,
}

impl Pacer {
    /// The poll token of the timer (no connection has it).
    pub const TOKEN: Token = Token(usize::MAX);

    pub fn new(registry: &Registry) -> io::Result<Pacer> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        registry.register(
            &mut SourceFd(&fd.as_raw_fd()),
            Self::TOKEN,
            Interest::READABLE,
        )?;
        Ok(Pacer { fd })
    }

    /// Fires once, `after` from now (at least 1 ns: a zero time would disarm it).
    pub fn arm(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: after.as_secs() as _,
                tv_nsec: after.subsec_nanos() as _,
            },
        };
        timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec)?;
        Ok(())
    }

    /// Reads the expiry count, so the next expiry is a new readiness event.
    pub fn drain(&self) {
        let mut count = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut count);
    }
}
