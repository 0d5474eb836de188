//! The `h3_*` extensions (the QUIC side's bounds): defaults and values landing in
//! `Config::h3`. Their refusals are in errors.rs.

use std::path::Path;

use config::*;

fn load(text: &str) -> Config {
    match parse_str("t.conf", text, Path::new("/etc/t")) {
        Ok(l) => l.config,
        Err(d) => panic!("refused:\n{text}\n{d}"),
    }
}

#[test]
fn h3_limits_directives_and_defaults() {
    let d = load("server 127.0.0.1;\n").h3;
    assert_eq!((d.max_handshakes, d.retry_above), (1024, 64));
    assert_eq!(
        (d.stream_window, d.connection_window, d.send_window),
        (256 << 10, 2 << 20, 2 << 20)
    );
    assert_eq!(
        (d.crypto_buffer, d.qpack_table, d.qpack_blocked_streams),
        (16 << 10, 4096, 16)
    );
    let c = load(
        "h3_max_handshakes 50;\n h3_retry_above 0;\n h3_stream_window 64K;\n\
         h3_connection_window 1M;\n h3_send_window 512K;\n h3_crypto_buffer 8K;\n\
         h3_qpack_table 0;\n h3_qpack_blocked_streams 0;\n",
    )
    .h3;
    assert_eq!((c.max_handshakes, c.retry_above), (50, 0));
    assert_eq!(
        (c.stream_window, c.connection_window, c.send_window),
        (64 << 10, 1 << 20, 512 << 10)
    );
    assert_eq!(
        (c.crypto_buffer, c.qpack_table, c.qpack_blocked_streams),
        (8 << 10, 0, 0)
    );
}
