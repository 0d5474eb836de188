//! The `stats_listen ADDR;` extension: Prometheus text metrics over plain HTTP, served by one
//! small thread with blocking sockets (a scrape is rare; it must not touch the workers).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::server::ServeError;
use crate::worker::Shared;

pub fn start(addr: SocketAddr, shared: Arc<Shared>) -> Result<(), ServeError> {
    // Bound exclusively (no SO_REUSEPORT): a second instance on the same address must fail
    // loudly rather than answer some of the scrapes with its own counters.
    let listener = TcpListener::bind(addr).map_err(|reason| ServeError::Bind { addr, reason })?;
    thread::Builder::new()
        .name("stats".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut stream = stream;
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
                let mut req = [0u8; 1024];
                let n = stream.read(&mut req).unwrap_or(0);
                let wanted = req[..n].starts_with(b"GET /metrics") || req[..n].starts_with(b"GET / ");
                let (status, body) =
                    if wanted { ("200 OK", {
                        let mut text = String::new();
                        shared.cache.metrics().write_prometheus(&mut text);
                        let tracked = shared.runtime().frang.tracked_clients();
                        text.push_str(&format!(
                            "# HELP ktls_proxy_frang_clients Clients tracked for frang limits.\n\
                             # TYPE ktls_proxy_frang_clients gauge\nktls_proxy_frang_clients {tracked}\n"
                        ));
                        shared.metrics.render(Some(&text))
                    }) } else { ("404 Not Found", "not found\n".to_string()) };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body.as_bytes());
            }
        })
        .map_err(|e| ServeError::Setup(format!("cannot start the stats thread: {e}")))?;
    Ok(())
}
