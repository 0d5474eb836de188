//! Every bound an HTTP/3 connection applies, with its default and the reason for it. Plain
//! fields so the configuration layer can fill them in. QUIC bounds the rest (streams per
//! connection, bytes in flight per stream) through its own flow control.

/// Limits of one HTTP/3 connection. Together they bound the memory the protocol layer keeps
/// per connection by configuration, never by the peer: one buffered frame per stream (at
/// most a field section), the QPACK dynamic table, the field sections of blocked streams,
/// and one encoder-stream instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// SETTINGS_MAX_FIELD_SECTION_SIZE we advertise (RFC 9114 §4.2.2): a decoded field
    /// section counted as name + value + 32 per field. It also bounds the encoded HEADERS
    /// frame we buffer: a longer one is skipped unread and the request answered 431. 16 KiB,
    /// as the h2 crate's `max_header_list_size`.
    pub max_field_section_size: u64,
    /// Most fields in one section (as h2's `max_header_fields`): a section of one-byte
    /// static references otherwise expands a lot. Over it: 431. 100.
    pub max_header_fields: u32,
    /// SETTINGS_QPACK_MAX_TABLE_CAPACITY we advertise (RFC 9204 §5): the most the peer's
    /// encoder may set our decoder's dynamic table to; a Set Dynamic Table Capacity above
    /// it is QPACK_ENCODER_STREAM_ERROR. 4096 (0 turns the dynamic table off).
    pub qpack_max_table_capacity: u64,
    /// SETTINGS_QPACK_BLOCKED_STREAMS we advertise (RFC 9204 §2.1.2): streams whose field
    /// section waits for encoder-stream inserts. One more is QPACK_DECOMPRESSION_FAILED. 16.
    pub qpack_blocked_streams: u64,
    /// Bytes a blocked request stream may receive after its HEADERS before the inserts it
    /// waits for arrive (its body is held meanwhile). Over it: H3_EXCESSIVE_LOAD on the
    /// stream. 64 KiB.
    pub max_blocked_input: usize,
    /// The longest SETTINGS frame we buffer; over it: H3_EXCESSIVE_LOAD. Real peers send a
    /// few dozen bytes. 1 KiB.
    pub max_settings_size: u64,
    /// Frames of unknown or reserved type per stream (§7.2.8 says skip them; a peer could
    /// send nothing else). Over it: H3_EXCESSIVE_LOAD (a stream error on a request stream,
    /// a connection error on the control stream). 32.
    pub max_skipped_frames: u32,
    /// Empty DATA frames per request stream: they carry nothing and cost a frame's work
    /// each. Over it: H3_EXCESSIVE_LOAD on the stream. 32.
    pub max_empty_frames: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_field_section_size: 16 * 1024,
            max_header_fields: 100,
            qpack_max_table_capacity: 4096,
            qpack_blocked_streams: 16,
            max_blocked_input: 64 * 1024,
            max_settings_size: 1024,
            max_skipped_frames: 32,
            max_empty_frames: 32,
        }
    }
}

impl Limits {
    /// The protocol's ranges, checked once when a connection starts.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.qpack_max_table_capacity > 1 << 30 {
            return Err("qpack_max_table_capacity must be at most 2^30");
        }
        if self.qpack_blocked_streams > 1 << 16 {
            return Err("qpack_blocked_streams must be at most 65536");
        }
        if self.max_field_section_size < 64 {
            return Err("max_field_section_size must be at least 64");
        }
        if self.max_field_section_size > 1 << 24 {
            return Err("max_field_section_size must be at most 16 MiB");
        }
        Ok(())
    }

    /// The longest encoder-stream instruction buffered: an insert of the largest entry the
    /// table can hold, Huffman-coded at its worst (30 bits per byte), plus its integers.
    pub fn max_encoder_instruction(&self) -> usize {
        let cap = usize::try_from(self.qpack_max_table_capacity).unwrap_or(usize::MAX);
        cap.saturating_mul(4).saturating_add(64)
    }
}
