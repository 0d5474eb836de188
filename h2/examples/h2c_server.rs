//! A cleartext HTTP/2 (h2c, prior knowledge) server on top of the `h2`
//! crate, for conformance tools and tests: every request gets 200 and a
//! small body; a POST gets its body echoed back (the greeting when empty).
//!
//! `cargo run --release -p h2 --example h2c_server -- 127.0.0.1:8080`
//! prints `listening on ADDR` once ready (port 0 picks a free port).

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use h2::{Connection, ErrorCode, Event, Limits};

/// Echoed bodies are buffered whole; beyond this the answer is 413.
const MAX_ECHO: usize = 16 << 20;
const GREETING: &[u8] = b"hello from h2\n";

#[derive(Default)]
struct Exchange {
    is_post: bool,
    body: Vec<u8>,
    /// Response bytes not yet accepted by the connection.
    pending: Option<Vec<u8>>,
}

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = match TcpListener::bind(&addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cannot listen on {addr}: {e}");
            std::process::exit(2);
        }
    };
    let local = listener.local_addr().map(|a| a.to_string()).unwrap_or(addr);
    println!("listening on {local}");
    let _ = std::io::stdout().flush();
    for sock in listener.incoming().flatten() {
        std::thread::spawn(move || {
            if let Err(e) = serve(sock) {
                eprintln!("connection ended: {e}");
            }
        });
    }
}

fn serve(mut sock: TcpStream) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    sock.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut conn = Connection::new(Limits::default(), Instant::now())
        .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
    let mut exchanges: HashMap<u32, Exchange> = HashMap::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // Output room frees up as it is flushed: pump bodies until the
        // windows stop them.
        flush(&mut sock, &mut conn)?;
        while pump(&mut conn, &mut exchanges) {
            flush(&mut sock, &mut conn)?;
        }
        if conn.is_done() {
            linger(&mut sock, &mut buf);
            return Ok(());
        }
        let now = Instant::now();
        let wait = conn
            .next_deadline()
            .map_or(Duration::from_millis(500), |d| {
                d.saturating_duration_since(now)
            })
            .clamp(Duration::from_millis(1), Duration::from_millis(500));
        sock.set_read_timeout(Some(wait))?;
        match sock.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => conn.recv(&buf[..n], Instant::now()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                conn.on_timeout(Instant::now())
            }
            Err(e) => return Err(e),
        }
        while let Some(ev) = conn.poll_event() {
            handle(&mut conn, &mut exchanges, ev);
        }
    }
}

/// Closes our side and reads (discarding) for a moment, so the peer gets
/// the GOAWAY instead of a TCP reset caused by its unread frames.
fn linger(sock: &mut TcpStream, buf: &mut [u8]) {
    let _ = sock.shutdown(std::net::Shutdown::Write);
    let until = Instant::now() + Duration::from_secs(2);
    let _ = sock.set_read_timeout(Some(Duration::from_millis(100)));
    while Instant::now() < until {
        match sock.read(buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

fn flush(sock: &mut TcpStream, conn: &mut Connection) -> std::io::Result<()> {
    while !conn.output().is_empty() {
        let n = sock.write(conn.output())?;
        conn.advance_output(n);
    }
    Ok(())
}

fn handle(conn: &mut Connection, exchanges: &mut HashMap<u32, Exchange>, ev: Event) {
    match ev {
        Event::Request {
            stream,
            request,
            end_stream,
        } => {
            let ex = Exchange {
                is_post: request.method == b"POST",
                ..Exchange::default()
            };
            exchanges.insert(stream, ex);
            if end_stream {
                respond(conn, exchanges, stream);
            }
        }
        Event::Data {
            stream,
            data,
            end_stream,
        } => {
            conn.consumed(stream, data.len());
            let Some(ex) = exchanges.get_mut(&stream) else {
                return;
            };
            if ex.is_post && ex.body.len() + data.len() <= MAX_ECHO {
                ex.body.extend_from_slice(&data);
            } else if ex.is_post {
                let _ = conn.send_headers(stream, 413, &[], true);
                conn.reset(stream, ErrorCode::NO_ERROR);
                exchanges.remove(&stream);
                return;
            }
            if end_stream {
                respond(conn, exchanges, stream);
            }
        }
        Event::Trailers { stream, .. } => respond(conn, exchanges, stream),
        Event::Reset { stream, .. } => {
            exchanges.remove(&stream);
        }
        Event::WindowOpened { .. } | Event::GoAway { .. } | Event::Closed { .. } => {}
    }
}

fn respond(conn: &mut Connection, exchanges: &mut HashMap<u32, Exchange>, stream: u32) {
    let Some(ex) = exchanges.get_mut(&stream) else {
        return;
    };
    // An empty POST gets the greeting too, so every response has a body
    // that flow control can hold back (conformance tools rely on that).
    let body = if ex.is_post && !ex.body.is_empty() {
        std::mem::take(&mut ex.body)
    } else {
        GREETING.to_vec()
    };
    let len = body.len().to_string();
    let fields: [(&[u8], &[u8]); 2] = [
        (b"content-type", b"text/plain"),
        (b"content-length", len.as_bytes()),
    ];
    if conn.send_headers(stream, 200, &fields, false).is_err() {
        exchanges.remove(&stream);
        return;
    }
    ex.pending = Some(body);
}

/// Sends what the windows allow of every pending response body; true if
/// any byte went out.
fn pump(conn: &mut Connection, exchanges: &mut HashMap<u32, Exchange>) -> bool {
    let mut progressed = false;
    exchanges.retain(|&stream, ex| {
        let Some(body) = ex.pending.as_mut() else {
            return true;
        };
        match conn.send_data(stream, body, true) {
            Ok(n) if n == body.len() => {
                progressed = true;
                false
            }
            Ok(n) => {
                progressed |= n > 0;
                body.drain(..n);
                true
            }
            Err(_) => false,
        }
    });
    progressed
}
