//! Shared pieces of the load generators (`tls-perf`, `http-perf`) and the bundled `origin`.
//!
//! The binaries live under `src/bin/`; what two of them need lives here.
#![forbid(unsafe_code)]

pub mod man;
pub mod procstat;
