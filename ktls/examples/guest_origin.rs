//! A tiny HTTP/1.1 origin for the kTLS guest's proxy stage (tests/ktls-vm/guest.sh): one
//! thread per connection, keep-alive, `/bytes/N` answers N bytes of a deterministic pattern
//! (`guest_client` checks every byte against the same formula), any other path 10 bytes.
//! Responses carry `Cache-Control: max-age=300`, so a caching proxy serves repeats as hits.
//!
//!     guest_origin [--listen 127.0.0.1:8000]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::thread;

#[path = "guest_common/pattern.rs"]
#[allow(dead_code)]
mod pattern;

use pattern::body_byte;

/// Largest body served (bounds the time a request can take, not memory: bodies are streamed).
const MAX_BODY: u64 = 1 << 30;
/// Longest request head accepted.
const MAX_HEAD: usize = 16 * 1024;

fn main() -> ExitCode {
    let mut listen = "127.0.0.1:8000".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--listen", Some(addr)) => listen = addr,
            _ => {
                eprintln!("usage: guest_origin [--listen ADDR]");
                return ExitCode::from(2);
            }
        }
    }
    let listener = match TcpListener::bind(&listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("guest_origin: bind {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("guest_origin: listening on {listen}");
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                let _ = thread::Builder::new().spawn(move || serve(stream));
            }
            Err(e) => eprintln!("guest_origin: accept: {e}"),
        }
    }
    ExitCode::SUCCESS
}

/// What a request asks for.
struct Request {
    body_len: u64,
    close: bool,
    head_only: bool,
}

/// Reads one request head; `Ok(None)` at a clean end of stream.
fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("/");
    let version = parts.next().unwrap_or("HTTP/1.0");
    let path = target.split('?').next().unwrap_or(target);
    let body_len = match path.strip_prefix("/bytes/") {
        Some(n) => n
            .parse::<u64>()
            .ok()
            .filter(|&n| n <= MAX_BODY)
            .unwrap_or(0),
        None => 10,
    };
    let mut close = version != "HTTP/1.1";
    let mut head = line.len();
    loop {
        let mut field = String::new();
        if reader.read_line(&mut field)? == 0 {
            return Ok(None);
        }
        head += field.len();
        if head > MAX_HEAD {
            return Err(std::io::Error::other("request head too long"));
        }
        let field = field.trim_end();
        if field.is_empty() {
            break;
        }
        if let Some((name, value)) = field.split_once(':') {
            if name.eq_ignore_ascii_case("connection") {
                let value = value.trim();
                if value.eq_ignore_ascii_case("close") {
                    close = true;
                } else if value.eq_ignore_ascii_case("keep-alive") {
                    close = false;
                }
            }
        }
    }
    Ok(Some(Request {
        body_len,
        close,
        head_only: method == "HEAD",
    }))
}

fn serve(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut chunk = vec![0u8; 64 * 1024];
    while let Ok(Some(req)) = read_request(&mut reader) {
        let head =
            format!(
            "HTTP/1.1 200 OK\r\nServer: guest_origin\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: {}\r\nCache-Control: max-age=300\r\n{}\r\n",
            req.body_len,
            if req.close { "Connection: close\r\n" } else { "" }
        );
        if writer.write_all(head.as_bytes()).is_err() {
            return;
        }
        if !req.head_only {
            let mut offset = 0u64;
            while offset < req.body_len {
                let n = (req.body_len - offset).min(chunk.len() as u64) as usize;
                for (i, b) in chunk[..n].iter_mut().enumerate() {
                    *b = body_byte(offset + i as u64);
                }
                if writer.write_all(&chunk[..n]).is_err() {
                    return;
                }
                offset += n as u64;
            }
        }
        if req.close {
            return;
        }
    }
}
