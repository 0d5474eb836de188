//! Size and content limits applied while parsing; Tempesta's
//! `frang_limits` map onto these fields.

use crate::byteset::ByteSet;

/// Limits for one message. Plain fields so that a configuration layer can
/// fill them in directly; [`Limits::default`] gives values close to
/// nginx's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest head (start line, header fields, blank line), in bytes.
    /// Exceeding it gives 431. Also bounds how much is buffered while the
    /// head is incomplete.
    pub max_head_bytes: usize,
    /// Most header fields in one head (431 beyond).
    pub max_headers: usize,
    /// Longest request target in bytes (414 beyond).
    pub max_uri_bytes: usize,
    /// Longest header field line (`name: value`, without CRLF; 431 beyond).
    pub max_field_bytes: usize,
    /// Longest body in bytes, `None` for no limit (413 beyond).
    pub max_body_bytes: Option<u64>,
    /// Longest chunk extension (everything after the size on a chunk line).
    pub max_chunk_ext_bytes: usize,
    /// Largest trailer section of a chunked body, in bytes.
    pub max_trailer_bytes: usize,
    /// When set, every byte of the request target must be in this set
    /// (`http_uri_brange`); others give 400.
    pub uri_bytes: Option<ByteSet>,
    /// When set, every byte of every header value must be in this set
    /// (`http_*_brange`); others give 400.
    pub header_value_bytes: Option<ByteSet>,
    /// When set, the bytes an X-Forwarded-For node name may have (`http_xff_brange`), in
    /// place of Tempesta's default (letters, digits, `._-[]:`).
    pub xff_bytes: Option<ByteSet>,
    /// A Content-Type field on a method without a body (GET, HEAD, DELETE, TRACE) is
    /// allowed (`http_allow_empty_body_content_type`); content there is refused all the same.
    pub allow_content_type_without_body: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 16 * 1024,
            max_headers: 100,
            max_uri_bytes: 8 * 1024,
            max_field_bytes: 8 * 1024,
            max_body_bytes: None,
            max_chunk_ext_bytes: 1024,
            max_trailer_bytes: 4 * 1024,
            uri_bytes: None,
            header_value_bytes: None,
            xff_bytes: None,
            allow_content_type_without_body: false,
        }
    }
}

impl Limits {
    /// The limits a forwarded head must fit: this parser's defaults, raised
    /// to these limits where they are larger. Smaller configured limits
    /// restrict what a peer may send (frang's `http_header_cnt 5` lets a
    /// client send five fields, as in Tempesta, whatever the proxy adds);
    /// the next hop is only assumed to parse like this crate does by
    /// default, or like this proxy does when it was configured to accept
    /// more. So the proxy never sends a head that it, or a peer with the
    /// default limits, would refuse.
    pub fn for_forwarding(&self) -> Limits {
        let defaults = Limits::default();
        Limits {
            max_head_bytes: self.max_head_bytes.max(defaults.max_head_bytes),
            max_headers: self.max_headers.max(defaults.max_headers),
            max_field_bytes: self.max_field_bytes.max(defaults.max_field_bytes),
            ..defaults
        }
    }
}
