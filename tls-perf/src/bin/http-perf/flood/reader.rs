//! What the server says back to a flooding connection: frames are counted into the
//! [`Tally`] (acks, response heads by status, resets and GOAWAY by code), and answered as a
//! client must (SETTINGS and PING acks, window credit for the DATA read) so that only the
//! attack itself is misbehaviour.

use std::collections::BTreeMap;
use std::time::Instant;

use super::attack::Attack;
use super::wire::{self, kind, Header, ACK, END_HEADERS, END_STREAM, HEADER_LEN};

/// What the connections of one thread saw; summed over threads for the report.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Attack frames queued for writing (the last batch of a connection may be unsent).
    pub frames_sent: u64,
    /// Bytes written to the connections (preface, acks and attack frames).
    pub bytes_sent: u64,
    pub ping_acks: u64,
    pub settings_acks: u64,
    /// Response heads by `:status` (0: a head the tool could not decode).
    pub responses: BTreeMap<u16, u64>,
    pub resets: BTreeMap<u32, u64>,
    pub goaways: BTreeMap<u32, u64>,
    pub data_bytes: u64,
    /// Connections that completed TCP (and TLS with ALPN h2) and started flooding.
    pub flooded: u64,
    pub connect_errors: u64,
    /// TLS handshakes that failed or timed out.
    pub handshake_errors: u64,
    /// TLS handshakes in which the server did not select `h2`.
    pub not_h2: u64,
    /// Milliseconds from the first attack frame to the server's GOAWAY, per connection.
    pub goaway_ms: Vec<u64>,
    /// Milliseconds from the first attack frame to the server closing, per connection.
    pub closed_ms: Vec<u64>,
    /// Server closes (FIN or reset) without a GOAWAY before them.
    pub closed_without_goaway: u64,
    /// Frames the tool could not make sense of (the connection was dropped).
    pub bad_frames: u64,
    /// Connections still open when the run ended.
    pub still_open: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.frames_sent += o.frames_sent;
        self.bytes_sent += o.bytes_sent;
        self.ping_acks += o.ping_acks;
        self.settings_acks += o.settings_acks;
        for (k, v) in &o.responses {
            *self.responses.entry(*k).or_default() += v;
        }
        for (k, v) in &o.resets {
            *self.resets.entry(*k).or_default() += v;
        }
        for (k, v) in &o.goaways {
            *self.goaways.entry(*k).or_default() += v;
        }
        self.data_bytes += o.data_bytes;
        self.flooded += o.flooded;
        self.connect_errors += o.connect_errors;
        self.handshake_errors += o.handshake_errors;
        self.not_h2 += o.not_h2;
        self.goaway_ms.extend(&o.goaway_ms);
        self.closed_ms.extend(&o.closed_ms);
        self.closed_without_goaway += o.closed_without_goaway;
        self.bad_frames += o.bad_frames;
        self.still_open += o.still_open;
    }
}

/// A frame from the server larger than this is refused (we advertise the default 16 KiB).
const MAX_FRAME: usize = 1 << 20;
/// Connection window credit is returned in steps of this much DATA.
const CREDIT_STEP: u64 = 32 * 1024;

/// Per-connection reading state.
pub struct Reader {
    input: Vec<u8>,
    decoder: loona_hpack::Decoder<'static>,
    /// A response header block waiting for its CONTINUATION frames: (END_STREAM, block).
    pending: Option<(bool, Vec<u8>)>,
    owed: u64,
    /// When the server's GOAWAY arrived.
    pub goaway_at: Option<Instant>,
}

impl Reader {
    pub fn new() -> Reader {
        Reader {
            input: Vec::new(),
            decoder: loona_hpack::Decoder::new(),
            pending: None,
            owed: 0,
            goaway_at: None,
        }
    }

    /// Handles bytes read from the server. Answers go to `out`. Err: the server sent
    /// something that is not HTTP/2 (the connection should be dropped).
    pub fn feed(
        &mut self,
        data: &[u8],
        flood_start: Instant,
        attack: &mut Attack,
        tally: &mut Tally,
        out: &mut Vec<u8>,
    ) -> Result<(), &'static str> {
        self.input.extend_from_slice(data);
        let mut at = 0;
        while let Some(h) = Header::parse(&self.input[at..]) {
            if h.length > MAX_FRAME {
                return Err("frame over 1 MiB");
            }
            let end = at + HEADER_LEN + h.length;
            if self.input.len() < end {
                break;
            }
            let payload = self.input[at + HEADER_LEN..end].to_vec();
            self.frame(&h, &payload, flood_start, attack, tally, out)?;
            at = end;
        }
        self.input.drain(..at);
        Ok(())
    }

    fn frame(
        &mut self,
        h: &Header,
        payload: &[u8],
        flood_start: Instant,
        attack: &mut Attack,
        tally: &mut Tally,
        out: &mut Vec<u8>,
    ) -> Result<(), &'static str> {
        match h.kind {
            kind::DATA => {
                tally.data_bytes += payload.len() as u64;
                if h.flags & END_STREAM != 0 {
                    attack.stream_ended();
                }
                if attack.returns_credit() {
                    self.owed += h.length as u64;
                    if self.owed >= CREDIT_STEP {
                        wire::window_update(out, 0, self.owed as u32);
                        self.owed = 0;
                    }
                }
            }
            kind::HEADERS => {
                let block = wire::headers_block(h, payload).ok_or("malformed HEADERS")?;
                let end_stream = h.flags & END_STREAM != 0;
                self.pending = Some((end_stream, block));
                if h.flags & END_HEADERS != 0 {
                    self.head_done(attack, tally);
                }
            }
            kind::CONTINUATION => {
                let Some((_, block)) = self.pending.as_mut() else {
                    return Err("CONTINUATION without HEADERS");
                };
                block.extend_from_slice(payload);
                if h.flags & END_HEADERS != 0 {
                    self.head_done(attack, tally);
                }
            }
            kind::RST_STREAM => {
                let code = wire::code_at(payload, 0).ok_or("short RST_STREAM")?;
                *tally.resets.entry(code).or_default() += 1;
                attack.stream_ended();
            }
            kind::SETTINGS if h.flags & ACK != 0 => tally.settings_acks += 1,
            kind::SETTINGS => {
                for p in payload.chunks_exact(6) {
                    // SETTINGS_MAX_CONCURRENT_STREAMS
                    if u16::from_be_bytes([p[0], p[1]]) == 0x3 {
                        attack.max_concurrent = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
                    }
                }
                wire::frame(out, kind::SETTINGS, ACK, 0, &[]);
            }
            kind::PING if h.flags & ACK != 0 => tally.ping_acks += 1,
            kind::PING => wire::frame(out, kind::PING, ACK, 0, payload),
            kind::GOAWAY => {
                let code = wire::code_at(payload, 4).ok_or("short GOAWAY")?;
                *tally.goaways.entry(code).or_default() += 1;
                if self.goaway_at.is_none() {
                    let now = Instant::now();
                    self.goaway_at = Some(now);
                    tally
                        .goaway_ms
                        .push(now.duration_since(flood_start).as_millis() as u64);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A response head is complete: count it by status.
    fn head_done(&mut self, attack: &mut Attack, tally: &mut Tally) {
        let Some((end_stream, block)) = self.pending.take() else {
            return;
        };
        let status = self
            .decoder
            .decode(&block)
            .ok()
            .and_then(|fields| {
                fields
                    .into_iter()
                    .find(|(name, _)| name == b":status")
                    .and_then(|(_, v)| std::str::from_utf8(&v).ok()?.parse().ok())
            })
            .unwrap_or(0);
        *tally.responses.entry(status).or_default() += 1;
        if end_stream {
            attack.stream_ended();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::attack::{FloodKind, Target};
    use super::*;

    #[test]
    fn acks_goaway_and_statuses_are_counted() {
        let mut attack = Attack::new(
            FloodKind::Ping,
            Target {
                scheme: "http",
                authority: "a".into(),
                path: "/".into(),
            },
        );
        let mut tally = Tally::default();
        let mut out = Vec::new();
        let mut server = Vec::new();
        wire::settings(&mut server, &[(0x3, 7)]);
        wire::frame(&mut server, kind::PING, ACK, 0, &[0; 8]);
        // HEADERS :status 200 (static index 8) split over a CONTINUATION.
        wire::frame(&mut server, kind::HEADERS, END_STREAM, 1, &[]);
        wire::frame(&mut server, kind::CONTINUATION, END_HEADERS, 1, &[0x88]);
        wire::frame(&mut server, kind::GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0xb]);
        let mut r = Reader::new();
        let t0 = Instant::now();
        // Byte by byte: frames split across reads.
        for b in &server {
            r.feed(
                std::slice::from_ref(b),
                t0,
                &mut attack,
                &mut tally,
                &mut out,
            )
            .unwrap();
        }
        assert_eq!(attack.max_concurrent, 7);
        assert_eq!(tally.ping_acks, 1);
        assert_eq!(tally.responses.get(&200), Some(&1));
        assert_eq!(tally.goaways.get(&0xb), Some(&1));
        assert_eq!(tally.goaway_ms.len(), 1);
        // Our SETTINGS ack went out.
        assert_eq!(
            Header::parse(&out).map(|h| (h.kind, h.flags)),
            Some((kind::SETTINGS, ACK))
        );
    }
}
