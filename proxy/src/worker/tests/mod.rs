//! The exchange state machine driven without the network: a real `Worker` loop stepped by
//! the test on AF_UNIX socketpairs (`harness.rs`), the test scripting the client and the
//! upstream. Why socketpairs rather than an in-memory transport: the worker's transports are
//! kernel sockets registered with mio (edge-triggered readiness, partial writes, EOF, resets);
//! a pair exercises exactly that code with no ports, no TCP and no timing of a network stack,
//! while an in-memory transport would need a second readiness model inside the worker.

mod h2_peer;
mod harness;

mod background_flow;
mod cache_flow;
mod h1_flow;
mod h1_messages;
mod h2_flow;
mod h2_requests;
mod h2_responses;
mod refusals;
mod request_bodies;
mod request_entry;
mod tunnel_flow;
mod upstream_flow;
