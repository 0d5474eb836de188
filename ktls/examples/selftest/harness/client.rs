//! The self-test's client side: an independent user-space OpenSSL client (`SslStream` over a
//! std `TcpStream`, its own record layer).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use openssl::ssl::{Ssl, SslStream};

use super::{
    client_context, mib_per_s, pattern, Case, CaseKind, Sizes, ECHO_CHUNK, FILE_SEED, GO,
    IO_TIMEOUT, KEY_UPDATE_PROBE,
};

/// What the client saw.
pub(super) struct ClientReport {
    pub(super) echo_mib_s: Option<f64>,
    /// KeyUpdate case: the server echoed data sent under the new key.
    pub(super) echoed_after_key_update: bool,
}

fn exchange(stream: &mut SslStream<TcpStream>, data: &[u8]) -> Result<(), String> {
    let mut back = vec![0u8; ECHO_CHUNK];
    for chunk in data.chunks(ECHO_CHUNK) {
        stream
            .write_all(chunk)
            .map_err(|e| format!("client write: {e}"))?;
        let back = &mut back[..chunk.len()];
        stream
            .read_exact(back)
            .map_err(|e| format!("client echo read: {e}"))?;
        if back != chunk {
            return Err("echoed bytes differ".to_string());
        }
    }
    Ok(())
}

/// Sends close_notify and waits for the server's.
fn close_both_ways(stream: &mut SslStream<TcpStream>) -> Result<(), String> {
    stream
        .shutdown()
        .map_err(|e| format!("client close_notify: {e}"))?;
    match stream.shutdown() {
        Ok(openssl::ssl::ShutdownResult::Received) => Ok(()),
        Ok(other) => Err(format!("server close_notify: {other:?}")),
        Err(e) => Err(format!("server close_notify not received: {e}")),
    }
}

/// Connects, does the handshake and plays the client's part of the case.
pub(super) fn client(port: u16, case: Case, sizes: &Sizes) -> Result<ClientReport, String> {
    let ctx = client_context(&case)?;
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    tcp.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let ssl = Ssl::new(&ctx).map_err(|e| e.to_string())?;
    let mut stream = ssl
        .connect(tcp)
        .map_err(|e| format!("client handshake: {e}"))?;
    let mut report = ClientReport {
        echo_mib_s: None,
        echoed_after_key_update: false,
    };
    match case.kind {
        CaseKind::Data => {
            for (i, &len) in sizes.echo.iter().enumerate() {
                let data = pattern(len, 0x1000 + i as u32);
                let started = Instant::now();
                exchange(&mut stream, &data)?;
                if i + 1 == sizes.echo.len() {
                    report.echo_mib_s = Some(mib_per_s(len, started.elapsed()));
                }
            }
            if sizes.file > 0 {
                let mut got = vec![0u8; sizes.file];
                stream
                    .read_exact(&mut got)
                    .map_err(|e| format!("client file read: {e}"))?;
                if got != pattern(sizes.file, FILE_SEED) {
                    return Err("sendfile bytes differ".to_string());
                }
            }
            close_both_ways(&mut stream)?;
        }
        CaseKind::KeyUpdate => {
            exchange(&mut stream, KEY_UPDATE_PROBE)?;
            ktls::ossl::key_update(stream.ssl()).map_err(|e| format!("key_update: {e}"))?;
            stream
                .write_all(KEY_UPDATE_PROBE)
                .map_err(|e| format!("client write: {e}"))?;
            let mut back = [0u8; KEY_UPDATE_PROBE.len()];
            // The kernel path closes here (EOF or reset); user space echoes.
            if stream.read_exact(&mut back).is_ok() && back == KEY_UPDATE_PROBE {
                report.echoed_after_key_update = true;
                close_both_ways(&mut stream)?;
            }
        }
        CaseKind::Nonblocking => {
            let mut go = [0u8; 2];
            stream
                .read_exact(&mut go)
                .map_err(|e| format!("client GO read: {e}"))?;
            if go != GO {
                return Err("GO differs".to_string());
            }
            // One small record: the server's single read must get all of it.
            exchange(&mut stream, KEY_UPDATE_PROBE)?;
            close_both_ways(&mut stream)?;
        }
    }
    Ok(report)
}
