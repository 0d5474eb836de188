//! Faults with figures (issue 38): scenarios that break the origin, the network or the
//! server's own resources while a fixed-rate load runs through the server, and count what
//! became of every request. `tests/tests/faults.rs` runs each for a few seconds and asserts
//! the expectations; `benches/faults/run.sh` runs the same functions for longer, against the
//! proxy and against nginx, and writes the figures (docs/RELIABILITY.md).

pub mod driver;
pub mod fault_origin;
pub mod isolation;
pub mod netns;
pub mod report;
pub mod scenarios;
pub mod server;
pub mod soak;
pub mod soak_report;
pub mod window;
pub mod ws_load;
