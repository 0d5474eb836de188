//! The descriptor limit: every peer holds a socket, so the run needs as many descriptors as
//! peers (plus a few per thread).

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// The RLIMIT_NOFILE soft and hard limits (`u64::MAX`: unlimited).
#[derive(Debug, Clone, Copy)]
pub struct FileLimit {
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft descriptor limit to the hard one and returns the result. A refused raise
/// is not an error: the caller compares what it needs with the soft limit it gets.
pub fn raise_file_limit() -> FileLimit {
    let mut limit = getrlimit(Resource::Nofile);
    let below_hard = match (limit.current, limit.maximum) {
        (Some(soft), Some(hard)) => soft < hard,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if below_hard {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = raised;
        }
    }
    FileLimit {
        soft: limit.current.unwrap_or(u64::MAX),
        hard: limit.maximum.unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After the call the soft limit is the hard one (this process may always raise its own
    /// soft limit up to the hard one), and both agree with what the kernel reports.
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limit = raise_file_limit();
        assert_eq!(limit.soft, limit.hard);
        let now = getrlimit(Resource::Nofile);
        assert_eq!(now.current.unwrap_or(u64::MAX), limit.soft);
    }
}
