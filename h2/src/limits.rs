//! Every bound the connection applies, with its default and the reason
//! for it. Plain fields so the configuration layer can fill them in.

use std::time::Duration;

/// Limits of one HTTP/2 connection. Together they bound the memory a
/// connection can use (input frame buffer, header block, streams, output
/// queue) by configuration, never by what the peer sends, and they cap
/// every frame flood the protocol allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS we advertise and enforce (nginx and
    /// issue 14: 100). A HEADERS beyond it is refused with REFUSED_STREAM.
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE we advertise: the most request body
    /// bytes a stream may have in flight before the application consumes
    /// them (64 KiB, as nginx).
    pub initial_window_size: u32,
    /// Our connection receive window (the WINDOW_UPDATE sent after the
    /// preface raises it from 65 535): bounds request body bytes buffered
    /// across all streams. 1 MiB.
    pub connection_window_size: u32,
    /// SETTINGS_MAX_FRAME_SIZE we advertise; it also bounds the input
    /// buffer (one frame plus its 9-byte header). The protocol minimum,
    /// 16 384.
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE (`http_max_header_list_size`): the
    /// decoded header list, counted as RFC 9113 §6.5.2 does (name + value
    /// + 32 per field), and also the most compressed bytes one header
    ///   block may carry across its CONTINUATION frames. 16 KiB.
    pub max_header_list_size: u32,
    /// Most fields in one header list (as http1's `max_headers`): an HPACK
    /// block of one-byte indexed references otherwise expands a lot. 100.
    pub max_header_fields: u32,
    /// SETTINGS_HEADER_TABLE_SIZE we advertise and hold the peer's encoder
    /// to; a larger dynamic table size update is a COMPRESSION_ERROR. 4096
    /// (the protocol default, so no peer is surprised: a smaller value is
    /// enforced from the first block, before the peer has acked it).
    pub header_table_size: u32,
    /// CONTINUATION frames after one HEADERS (CVE-2024-27316 family);
    /// real clients use none or one or two. 16.
    pub max_continuation_frames: u32,
    /// PING frames per second before GOAWAY ENHANCE_YOUR_CALM (Tempesta's
    /// rate). Only one PING ack is ever queued: a newer PING replaces the
    /// unsent ack. 100.
    pub max_pings_per_sec: u32,
    /// SETTINGS frames per second before GOAWAY ENHANCE_YOUR_CALM. 10.
    pub max_settings_per_sec: u32,
    /// How long the peer has to acknowledge our SETTINGS before GOAWAY
    /// SETTINGS_TIMEOUT (RFC 9113 §6.5.3 leaves it to us). 5 s.
    pub settings_ack_timeout: Duration,
    /// Tempesta's `ctrl_frame_rate_multiplier`: control frames (SETTINGS,
    /// PING, PRIORITY, RST_STREAM, WINDOW_UPDATE, GOAWAY, unknown types) per second
    /// may reach this times `max_concurrent_streams`. 16 (1 600/s with
    /// the default of 100 streams).
    pub ctrl_frame_rate_multiplier: u32,
    /// Tempesta's `window_update_frame_rate_multiplier`: WINDOW_UPDATE
    /// frames per second may reach this times `max_concurrent_streams`;
    /// a client needs about one per stream per window it reads. 4.
    pub window_update_frame_rate_multiplier: u32,
    /// Empty DATA frames without END_STREAM per second: they carry
    /// nothing and cost a frame's work each. 100.
    pub max_empty_data_per_sec: u32,
    /// Rapid reset (CVE-2023-44487), h2o's scheme: every stream the client
    /// resets before we finished it spends one unit, every stream that
    /// completes gives one back, up to this cap. At zero: GOAWAY
    /// ENHANCE_YOUR_CALM. 200 (twice the default stream limit).
    pub reset_budget: u32,
    /// New streams accepted in one call to `recv` (one read pass), as
    /// nginx: twice `max_concurrent_streams` when 0. More are refused.
    pub max_new_streams_per_read: u32,
    /// MadeYouReset (CVE-2025-8671): RST_STREAM frames the peer provokes
    /// us into sending (stream errors) spend this budget, refilled like
    /// `reset_budget`. At zero: GOAWAY ENHANCE_YOUR_CALM. 100.
    pub provoked_reset_budget: u32,
    /// Overhead ratio: when control-frame bytes received exceed this many
    /// times (payload bytes + `overhead_allowance`), the connection is
    /// closed with ENHANCE_YOUR_CALM. Payload is request headers and body
    /// received plus response body sent (a downloading client answers our
    /// DATA with WINDOW_UPDATEs). 8.
    pub max_overhead_ratio: u32,
    /// Control bytes a connection may send before payload counts: lets a
    /// fresh or idle connection do its handshake and keep-alive PINGs. 64 KiB.
    pub overhead_allowance: u64,
    /// A stream whose send window stays at zero while the application has
    /// data waiting is reset (CANCEL) after this long: memory per stalled
    /// stream is bounded by its window, its time by this. 30 s.
    pub send_window_timeout: Duration,
    /// Output queued and not taken by the caller (a client that reads
    /// nothing) for this long closes the connection. 30 s.
    pub output_stall_timeout: Duration,
    /// Bytes of output the connection queues before `wants_read` turns
    /// false and `send_data` accepts nothing more: bounds the output queue
    /// (acks, resets, response frames). 256 KiB.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_concurrent_streams: 100,
            initial_window_size: 65_536,
            connection_window_size: 1 << 20,
            max_frame_size: 16_384,
            max_header_list_size: 16 * 1024,
            max_header_fields: 100,
            header_table_size: 4096,
            max_continuation_frames: 16,
            max_pings_per_sec: 100,
            max_settings_per_sec: 10,
            settings_ack_timeout: Duration::from_secs(5),
            ctrl_frame_rate_multiplier: 16,
            window_update_frame_rate_multiplier: 4,
            max_empty_data_per_sec: 100,
            reset_budget: 200,
            max_new_streams_per_read: 0,
            provoked_reset_budget: 100,
            max_overhead_ratio: 8,
            overhead_allowance: 64 * 1024,
            send_window_timeout: Duration::from_secs(30),
            output_stall_timeout: Duration::from_secs(30),
            max_output_bytes: 256 * 1024,
        }
    }
}

impl Limits {
    /// New streams per read pass: the configured value, or twice the
    /// stream limit when it is 0.
    pub fn new_streams_per_read(&self) -> u32 {
        if self.max_new_streams_per_read == 0 {
            self.max_concurrent_streams.saturating_mul(2).max(1)
        } else {
            self.max_new_streams_per_read
        }
    }

    /// The protocol's ranges, checked once when a connection starts, so a
    /// bad configuration is caught before it reaches the wire.
    pub fn validate(&self) -> Result<(), &'static str> {
        if !(16_384..=16_777_215).contains(&self.max_frame_size) {
            return Err("max_frame_size must be within 16384..=16777215 (RFC 9113 §6.5.2)");
        }
        if self.initial_window_size > 0x7fff_ffff || self.connection_window_size > 0x7fff_ffff {
            return Err("window sizes must be at most 2^31-1 (RFC 9113 §6.9.1)");
        }
        if self.connection_window_size < 65_535 {
            return Err(
                "connection_window_size must be at least 65535, the protocol's initial window",
            );
        }
        if self.max_output_bytes < 2 * (self.max_frame_size as usize + 9) {
            return Err("max_output_bytes must hold at least two full frames");
        }
        Ok(())
    }
}
