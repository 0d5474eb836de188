//! Handling of each received frame type once its layout was checked.

use super::{Connection, PendingBlock};
use crate::counters::Flood;
use crate::error::{ErrorCode, H2Error};
use crate::event::Event;
use crate::frame::{parse_frame, Frame, FrameHeader};
use crate::stream::{Closed, SendState};
use crate::write;

const MAX_WINDOW: i64 = 0x7fff_ffff;

impl Connection {
    pub(super) fn on_frame(&mut self, h: &FrameHeader, payload: &[u8]) -> Result<(), H2Error> {
        if let Some(p) = &self.pending_block {
            if h.kind != crate::frame::kind::CONTINUATION || h.stream != p.stream {
                return Err(H2Error::conn(
                    ErrorCode::PROTOCOL_ERROR,
                    "frame inside a header block",
                ));
            }
        }
        self.account(h.kind, h.length, self.now)?;
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
            } => self.on_continuation(stream, block, end_headers),
            Frame::Priority { .. } | Frame::Unknown => Ok(()),
            Frame::RstStream { stream, code } => self.on_rst_stream(stream, code),
            Frame::Settings { ack, payload } => self.on_settings(ack, payload),
            Frame::PushPromise => Err(H2Error::conn(
                ErrorCode::PROTOCOL_ERROR,
                "PUSH_PROMISE from a client",
            )),
            Frame::Ping { ack, payload } => self.on_ping(ack, payload),
            Frame::GoAway {
                last_stream,
                code,
                debug,
            } => {
                self.counters.goaways_received += 1;
                self.events.push_back(Event::GoAway {
                    last_stream,
                    code,
                    debug: debug.to_vec(),
                });
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => self.on_window_update(stream, increment),
        }
    }

    /// A frame on a stream that is not in the map: idle (above the
    /// highest id seen) or closed.
    fn not_open(&self, stream: u32) -> Result<Option<Closed>, H2Error> {
        if stream > self.highest_stream {
            return Err(H2Error::conn(
                ErrorCode::PROTOCOL_ERROR,
                "frame on an idle stream",
            ));
        }
        Ok(self.closed.get(stream))
    }

    fn on_data(&mut self, id: u32, data: &[u8], end: bool, flow_len: u32) -> Result<(), H2Error> {
        let flow = i64::from(flow_len);
        if flow > self.recv_window {
            return Err(H2Error::conn(
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA beyond the connection window",
            ));
        }
        self.recv_window -= flow;
        if data.is_empty() && !end {
            self.check_empty_data_rate()?;
        }
        let slack = self.window_slack();
        let Some(s) = self.streams.get_mut(&id) else {
            self.release_connection_window(u64::from(flow_len));
            return match self.not_open(id)? {
                Some(Closed::ResetByUs) => Ok(()),
                _ => Err(H2Error::conn(
                    ErrorCode::STREAM_CLOSED,
                    "DATA on a closed stream",
                )),
            };
        };
        // Padding is never delivered: give it back at once.
        let padding = u64::from(flow_len) - data.len() as u64;
        if !s.recv_open {
            self.release_connection_window(u64::from(flow_len));
            return Err(H2Error::stream(
                id,
                ErrorCode::STREAM_CLOSED,
                "DATA after END_STREAM",
            ));
        }
        if flow > s.recv_window + slack {
            self.release_connection_window(u64::from(flow_len));
            return Err(H2Error::stream(
                id,
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA beyond the stream window",
            ));
        }
        s.recv_window -= flow;
        s.received += data.len() as u64;
        s.unconsumed += data.len() as u64;
        let too_long = s.content_length.is_some_and(|cl| s.received > cl);
        let too_short = end && s.content_length.is_some_and(|cl| s.received != cl);
        if end {
            s.recv_open = false;
        }
        if too_long || too_short {
            self.release_connection_window(padding);
            return Err(H2Error::stream(
                id,
                ErrorCode::PROTOCOL_ERROR,
                "body length differs from content-length",
            ));
        }
        if padding > 0 {
            self.release_connection_window(padding);
            self.release_stream_window(id, padding as u32);
        }
        if !data.is_empty() || end {
            self.events.push_back(Event::Data {
                stream: id,
                data: data.to_vec(),
                end_stream: end,
            });
        }
        self.close_if_finished(id);
        Ok(())
    }

    /// Until our SETTINGS are acked the peer may still use the protocol's
    /// initial window of 65 535 if ours is smaller.
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
        if id & 1 == 0 {
            return Err(H2Error::conn(
                ErrorCode::PROTOCOL_ERROR,
                "client opened an even stream",
            ));
        }
        if !self.streams.contains_key(&id) && id <= self.highest_stream {
            match self.closed.get(id) {
                Some(Closed::ResetByUs) => {}
                Some(_) => {
                    return Err(H2Error::conn(
                        ErrorCode::STREAM_CLOSED,
                        "HEADERS on a closed stream",
                    ))
                }
                None => {
                    return Err(H2Error::conn(
                        ErrorCode::PROTOCOL_ERROR,
                        "stream id lower than one already used",
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
            return Err(self.trip(
                Flood::Continuation,
                "header block over max_header_list_size",
            ));
        }
        Ok(())
    }

    fn on_continuation(&mut self, id: u32, block: &[u8], end_headers: bool) -> Result<(), H2Error> {
        let Some(p) = self.pending_block.as_mut() else {
            return Err(H2Error::conn(
                ErrorCode::PROTOCOL_ERROR,
                "CONTINUATION without HEADERS",
            ));
        };
        debug_assert_eq!(p.stream, id);
        p.continuations += 1;
        if p.continuations > self.limits.max_continuation_frames {
            return Err(self.trip(Flood::Continuation, "too many CONTINUATION frames"));
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
        let Some(s) = self.streams.remove(&id) else {
            self.not_open(id)?;
            return Ok(());
        };
        self.counters.reset_received(code);
        self.closed.push(id, Closed::ResetByPeer);
        self.release_connection_window(s.unconsumed);
        if s.delivered {
            self.events.push_back(Event::Reset { stream: id, code });
        }
        if s.send != SendState::Done {
            self.spend_reset_budget()?;
        }
        Ok(())
    }

    fn on_settings(&mut self, ack: bool, payload: &[u8]) -> Result<(), H2Error> {
        if ack {
            self.settings_unacked_since = None;
            return Ok(());
        }
        self.check_settings_rate()?;
        let before = self.peer;
        self.peer.apply(payload)?;
        if self.peer.header_table_size != before.header_table_size {
            self.encoder
                .set_peer_table_size(self.peer.header_table_size);
        }
        let delta =
            i64::from(self.peer.initial_window_size) - i64::from(before.initial_window_size);
        if delta != 0 {
            for s in self.streams.values_mut() {
                s.send_window += delta;
                if s.send_window > MAX_WINDOW {
                    return Err(H2Error::conn(
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
        self.check_ping_rate()?;
        // Only one ack is ever queued: a newer PING overwrites the payload
        // of an ack the peer has not read yet (it only needs the latest).
        self.output.ping_ack(payload);
        Ok(())
    }

    fn on_window_update(&mut self, id: u32, increment: u32) -> Result<(), H2Error> {
        self.check_window_update_rate()?;
        let inc = i64::from(increment);
        if id == 0 {
            if inc == 0 {
                return Err(H2Error::conn(
                    ErrorCode::PROTOCOL_ERROR,
                    "WINDOW_UPDATE of 0 on the connection",
                ));
            }
            self.send_window += inc;
            if self.send_window > MAX_WINDOW {
                return Err(H2Error::conn(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "connection window over 2^31-1",
                ));
            }
            self.announce_open_windows(None);
            return Ok(());
        }
        let Some(s) = self.streams.get_mut(&id) else {
            self.not_open(id)?;
            return Ok(());
        };
        if inc == 0 {
            return Err(H2Error::stream(
                id,
                ErrorCode::PROTOCOL_ERROR,
                "WINDOW_UPDATE of 0",
            ));
        }
        s.send_window += inc;
        if s.send_window > MAX_WINDOW {
            return Err(H2Error::stream(
                id,
                ErrorCode::FLOW_CONTROL_ERROR,
                "stream window over 2^31-1",
            ));
        }
        self.announce_open_windows(Some(id));
        Ok(())
    }

    /// Tells the application which blocked streams may send again (all of
    /// them, or just `only`).
    fn announce_open_windows(&mut self, only: Option<u32>) {
        if self.send_window <= 0 {
            return;
        }
        for (id, s) in self.streams.iter_mut() {
            if only.is_some_and(|o| o != *id) {
                continue;
            }
            if s.blocked_since.is_some() && s.send_window > 0 {
                s.blocked_since = None;
                self.events.push_back(Event::WindowOpened { stream: *id });
            }
        }
    }
}
