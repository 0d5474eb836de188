//! Each frame an origin sends, once its layout was checked.

use super::{ClientConnection, ClientEvent, Head, PendingBlock};
use crate::counters::Flood;
use crate::error::{ErrorCode, H2Error};
use crate::frame::{parse_frame, Frame, FrameHeader};
use crate::guards::trip;
use crate::stream::{Closed, SendState};
use crate::write;

const MAX_WINDOW: i64 = 0x7fff_ffff;

fn conn_err(code: ErrorCode, reason: &'static str) -> H2Error {
    H2Error::conn(code, reason)
}

impl ClientConnection {
    pub(super) fn on_frame(&mut self, h: &FrameHeader, payload: &[u8]) -> Result<(), H2Error> {
        if let Some(p) = &self.pending_block {
            if h.kind != crate::frame::kind::CONTINUATION || h.stream != p.stream {
                return Err(conn_err(
                    ErrorCode::PROTOCOL_ERROR,
                    "frame inside a header block",
                ));
            }
        }
        let ctx = (&self.limits, &mut self.counters);
        self.guards.account(ctx, h.kind, h.length, self.now)?;
        match parse_frame(h, payload)? {
            Frame::Data {
                stream,
                data,
                end_stream,
                flow_len,
            } => self.on_data(stream, data, end_stream, flow_len),
            Frame::Headers {
                stream,
                block,
                end_stream,
                end_headers,
                ..
            } => self.on_headers(stream, block, end_stream, end_headers),
            Frame::Continuation {
                stream,
                block,
                end_headers,
            } => self.on_continuation(block, end_headers, stream),
            Frame::Priority { .. } | Frame::Unknown => Ok(()),
            Frame::RstStream { stream, code } => self.on_rst_stream(stream, code),
            Frame::Settings { ack, payload } => self.on_settings(ack, payload),
            Frame::PushPromise => Err(conn_err(
                ErrorCode::PROTOCOL_ERROR,
                "PUSH_PROMISE after SETTINGS_ENABLE_PUSH 0",
            )),
            Frame::Ping { ack, payload } => self.on_ping(ack, payload),
            Frame::GoAway {
                last_stream,
                code,
                debug,
            } => {
                self.on_goaway(last_stream, code, debug);
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => self.on_window_update(stream, increment),
        }
    }

    /// The highest stream id we opened (0: none yet).
    fn last_opened(&self) -> u32 {
        self.next_stream.saturating_sub(2)
    }

    /// A frame on a stream that is not in the map: one we never opened
    /// (even ids are the origin's, which it cannot open: idle, as is any
    /// odd id above ours) is a connection error; else how it closed.
    fn not_open(&self, stream: u32) -> Result<Option<Closed>, H2Error> {
        if stream & 1 == 0 || stream > self.last_opened() {
            return Err(conn_err(
                ErrorCode::PROTOCOL_ERROR,
                "frame on a stream we never opened",
            ));
        }
        Ok(self.closed.get(stream))
    }

    fn on_data(&mut self, id: u32, data: &[u8], end: bool, flow_len: u32) -> Result<(), H2Error> {
        let flow = i64::from(flow_len);
        if flow > self.recv_window {
            return Err(conn_err(
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA beyond the connection window",
            ));
        }
        self.recv_window -= flow;
        if data.is_empty() && !end {
            let ctx = (&self.limits, &mut self.counters);
            self.guards.empty_data(ctx, self.now)?;
        }
        let slack = self.window_slack();
        let Some(cs) = self.streams.get_mut(&id) else {
            self.release_connection_window(u64::from(flow_len));
            return match self.not_open(id)? {
                Some(Closed::ResetByUs) => Ok(()),
                _ => Err(conn_err(
                    ErrorCode::STREAM_CLOSED,
                    "DATA on a closed stream",
                )),
            };
        };
        let padding = u64::from(flow_len) - data.len() as u64;
        let refuse = if !cs.s.recv_open {
            Some((ErrorCode::STREAM_CLOSED, "DATA after END_STREAM"))
        } else if cs.head != Head::Body {
            Some((ErrorCode::PROTOCOL_ERROR, "DATA before the response head"))
        } else if cs.bodiless && !data.is_empty() {
            // HEAD, 204, 304 (RFC 9110 §6.4.1): no content whatever the fields say.
            Some((
                ErrorCode::PROTOCOL_ERROR,
                "content in a response that has none",
            ))
        } else if flow > cs.s.recv_window + slack {
            Some((
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA beyond the stream window",
            ))
        } else {
            None
        };
        if let Some((code, why)) = refuse {
            self.release_connection_window(u64::from(flow_len));
            return Err(H2Error::stream(id, code, why));
        }
        let s = &mut cs.s;
        s.recv_window -= flow;
        s.received += data.len() as u64;
        s.unconsumed += data.len() as u64;
        let cl = s.content_length.filter(|_| !cs.bodiless);
        let bad_length = cl.is_some_and(|cl| s.received > cl || (end && s.received != cl));
        if end {
            s.recv_open = false;
        }
        self.release_connection_window(padding);
        if bad_length {
            return Err(H2Error::stream(
                id,
                ErrorCode::PROTOCOL_ERROR,
                "body length differs from content-length",
            ));
        }
        self.release_stream_window(id, padding as u32);
        if !data.is_empty() || end {
            self.events.push_back(ClientEvent::Data {
                stream: id,
                data: data.to_vec(),
                end_stream: end,
            });
        }
        self.close_if_finished(id);
        Ok(())
    }

    /// Until our SETTINGS are acked the origin may still use the
    /// protocol's initial window of 65 535 if ours is smaller.
    fn window_slack(&self) -> i64 {
        if self.settings_unacked_since.is_some() {
            (65_535 - i64::from(self.limits.initial_window_size)).max(0)
        } else {
            0
        }
    }

    fn on_headers(
        &mut self,
        id: u32,
        block: &[u8],
        end_stream: bool,
        end_headers: bool,
    ) -> Result<(), H2Error> {
        if !self.streams.contains_key(&id) {
            match self.not_open(id)? {
                Some(Closed::ResetByUs) => {}
                _ => {
                    return Err(conn_err(
                        ErrorCode::STREAM_CLOSED,
                        "HEADERS on a closed stream",
                    ))
                }
            }
        }
        self.check_block_size(block.len())?;
        self.pending_block = Some(PendingBlock {
            stream: id,
            block: block.to_vec(),
            end_stream,
            continuations: 0,
        });
        if end_headers {
            self.end_block()?;
        }
        Ok(())
    }

    fn check_block_size(&mut self, len: usize) -> Result<(), H2Error> {
        let have = self.pending_block.as_ref().map_or(0, |p| p.block.len());
        if have + len > self.limits.max_header_list_size as usize {
            return Err(trip(
                &mut self.counters,
                Flood::Continuation,
                "header block over max_header_list_size",
            ));
        }
        Ok(())
    }

    fn on_continuation(&mut self, block: &[u8], end_headers: bool, id: u32) -> Result<(), H2Error> {
        let Some(p) = self.pending_block.as_mut() else {
            return Err(conn_err(
                ErrorCode::PROTOCOL_ERROR,
                "CONTINUATION without HEADERS",
            ));
        };
        debug_assert_eq!(p.stream, id);
        p.continuations += 1;
        if p.continuations > self.limits.max_continuation_frames {
            let c = &mut self.counters;
            return Err(trip(c, Flood::Continuation, "too many CONTINUATION frames"));
        }
        self.check_block_size(block.len())?;
        if let Some(p) = self.pending_block.as_mut() {
            p.block.extend_from_slice(block);
        }
        if end_headers {
            self.end_block()?;
        }
        Ok(())
    }

    fn on_rst_stream(&mut self, id: u32, code: ErrorCode) -> Result<(), H2Error> {
        let Some(cs) = self.streams.remove(&id) else {
            self.not_open(id)?;
            return Ok(());
        };
        self.counters.reset_received(code);
        self.closed.push(id, Closed::ResetByPeer);
        self.release_connection_window(cs.s.unconsumed);
        self.events.push_back(ClientEvent::Reset {
            stream: id,
            code,
            retryable: code == ErrorCode::REFUSED_STREAM,
        });
        Ok(())
    }

    fn on_settings(&mut self, ack: bool, payload: &[u8]) -> Result<(), H2Error> {
        if ack {
            self.settings_unacked_since = None;
            return Ok(());
        }
        let ctx = (&self.limits, &mut self.counters);
        self.guards.settings(ctx, self.now)?;
        let before = self.peer;
        self.peer.apply(payload)?;
        for p in payload.chunks_exact(6) {
            let value = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
            match u16::from_be_bytes([p[0], p[1]]) {
                // §6.5.2: a server may only send ENABLE_PUSH 0.
                0x2 if value != 0 => {
                    return Err(conn_err(ErrorCode::PROTOCOL_ERROR, "server ENABLE_PUSH 1"))
                }
                0x3 => self.peer_max_streams = Some(value),
                _ => {}
            }
        }
        if self.peer.header_table_size != before.header_table_size {
            self.encoder
                .set_peer_table_size(self.peer.header_table_size);
        }
        let delta =
            i64::from(self.peer.initial_window_size) - i64::from(before.initial_window_size);
        if delta != 0 {
            for cs in self.streams.values_mut() {
                cs.s.send_window += delta;
                if cs.s.send_window > MAX_WINDOW {
                    return Err(conn_err(
                        ErrorCode::FLOW_CONTROL_ERROR,
                        "SETTINGS pushed a window over 2^31-1",
                    ));
                }
            }
            if delta > 0 {
                self.announce_open_windows(None);
            }
        }
        write::settings_ack(&mut self.output.buf);
        Ok(())
    }

    fn on_ping(&mut self, ack: bool, payload: [u8; 8]) -> Result<(), H2Error> {
        if ack {
            return Ok(());
        }
        let ctx = (&self.limits, &mut self.counters);
        self.guards.ping(ctx, self.now)?;
        // One ack at most is queued: a newer PING overwrites an unsent one.
        self.output.ping_ack(payload);
        Ok(())
    }

    /// No new streams; those above `last` were not processed: retryable.
    fn on_goaway(&mut self, last: u32, code: ErrorCode, debug: &[u8]) {
        self.counters.goaways_received += 1;
        let last = self.goaway_received.map_or(last, |prev| prev.min(last));
        self.goaway_received = Some(last);
        self.events.push_back(ClientEvent::GoAway {
            last_stream: last,
            code,
            debug: debug.to_vec(),
        });
        let above: Vec<u32> = self.streams.range(last + 1..).map(|(id, _)| *id).collect();
        for id in above {
            if let Some(cs) = self.streams.remove(&id) {
                self.closed.push(id, Closed::ResetByPeer);
                self.release_connection_window(cs.s.unconsumed);
                self.events.push_back(ClientEvent::Reset {
                    stream: id,
                    code: ErrorCode::REFUSED_STREAM,
                    retryable: true,
                });
            }
        }
    }

    fn on_window_update(&mut self, id: u32, increment: u32) -> Result<(), H2Error> {
        let ctx = (&self.limits, &mut self.counters);
        self.guards.window_update(ctx, self.now)?;
        let inc = i64::from(increment);
        if id == 0 {
            if inc == 0 {
                return Err(conn_err(
                    ErrorCode::PROTOCOL_ERROR,
                    "WINDOW_UPDATE of 0 on the connection",
                ));
            }
            self.send_window += inc;
            if self.send_window > MAX_WINDOW {
                return Err(conn_err(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "connection window over 2^31-1",
                ));
            }
            self.announce_open_windows(None);
            return Ok(());
        }
        let Some(cs) = self.streams.get_mut(&id) else {
            self.not_open(id)?;
            return Ok(());
        };
        if inc == 0 {
            let why = "WINDOW_UPDATE of 0";
            return Err(H2Error::stream(id, ErrorCode::PROTOCOL_ERROR, why));
        }
        cs.s.send_window += inc;
        if cs.s.send_window > MAX_WINDOW {
            let why = "stream window over 2^31-1";
            return Err(H2Error::stream(id, ErrorCode::FLOW_CONTROL_ERROR, why));
        }
        self.announce_open_windows(Some(id));
        Ok(())
    }

    /// Tells the application which blocked streams may send again.
    fn announce_open_windows(&mut self, only: Option<u32>) {
        if self.send_window <= 0 {
            return;
        }
        for (id, cs) in self.streams.iter_mut() {
            if only.is_some_and(|o| o != *id) || cs.s.send == SendState::Done {
                continue;
            }
            if cs.s.blocked_since.is_some() && cs.s.send_window > 0 {
                cs.s.blocked_since = None;
                self.events
                    .push_back(ClientEvent::WindowOpened { stream: *id });
            }
        }
    }
}
