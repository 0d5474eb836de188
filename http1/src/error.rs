//! Why a message was refused, and the status code that says so.

use std::fmt;

/// A refused message. Every variant is one distinct shape of bad input so
/// that logs and counters say exactly what a peer sent.
///
/// [`ParseError::status`] gives the status to answer a *client* with. When
/// the message came from an upstream (response head or response body), the
/// proxy answers its client with 502 instead, whatever the variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    // ---- 400: request line / status line ----
    /// The request line is malformed (method, spaces, version).
    InvalidRequestLine,
    /// The status line is malformed.
    InvalidStatusLine,
    /// A version other than HTTP/1.0 or HTTP/1.1.
    InvalidVersion,
    /// The request target is not origin-form, absolute-form (http/https),
    /// or `*` with OPTIONS; or it has a fragment or userinfo.
    InvalidTarget,
    /// A byte of the request target is outside the configured URI set.
    UriByteNotAllowed,

    // ---- 400: header section syntax ----
    /// A header name with a byte that is not a token character.
    InvalidHeaderName,
    /// A header value with NUL or another control character.
    InvalidHeaderValue,
    /// A byte of a header value is outside the configured value set.
    HeaderByteNotAllowed,
    /// Whitespace between a header name and its colon.
    WhitespaceBeforeColon,
    /// A header line starting with SP or HTAB (obsolete line folding).
    ObsFold,
    /// A CR not followed by LF.
    BareCr,
    /// An LF not preceded by CR.
    BareLf,

    // ---- 400: framing ----
    /// Both Content-Length and Transfer-Encoding.
    ContentLengthWithTransferEncoding,
    /// Several Content-Length values that differ.
    ConflictingContentLength,
    /// Content-Length that is not a plain decimal number, or overflows.
    InvalidContentLength,
    /// Transfer-Encoding whose last coding is not `chunked`, or that
    /// names `chunked` more than once, or is empty.
    InvalidTransferEncoding,
    /// Transfer-Encoding in an HTTP/1.0 message (RFC 9112 §6.1: faulty
    /// framing).
    TransferEncodingInHttp10,

    // ---- 400: Host ----
    /// HTTP/1.1 request without Host.
    MissingHost,
    /// More than one Host header.
    DuplicateHost,
    /// A Host value (or absolute-form authority) with bytes that are not
    /// allowed in an authority.
    InvalidHost,

    // ---- 400: fields Tempesta validates ----
    /// An X-Forwarded-For field that is not a list of node names (Tempesta's alphabet, or
    /// `http_xff_brange`), or has an empty element.
    InvalidForwardedFor,
    /// A Forwarded field Tempesta's parser does not read (`forwarded.rs`: only `for`, `by`,
    /// `host` and `proto`, once each, `;` with no space, nodes of the X-Forwarded-For
    /// alphabet).
    InvalidForwarded,
    /// Content (Content-Length above 0) or a Content-Type field on GET, HEAD, DELETE or
    /// TRACE, or on a request a method-override field turns into one of them.
    ContentOnBodylessMethod,

    // ---- 400: chunked body ----
    /// A chunk size that is empty, not hexadecimal, or too long.
    InvalidChunkSize,
    /// A malformed or overlong chunk extension.
    InvalidChunkExtension,
    /// Chunk data not followed by CRLF, or a chunk line not ended by CRLF.
    MissingChunkCrlf,
    /// A malformed trailer field.
    InvalidTrailer,
    /// The trailer section is larger than the limit.
    TrailerTooLarge,
    /// The connection ended before the body did.
    IncompleteBody,

    // ---- 413 / 414 / 431 ----
    /// The body is longer than `Limits::max_body_bytes`.
    BodyTooLarge,
    /// The request target is longer than `Limits::max_uri_bytes`.
    UriTooLong,
    /// The head is larger than `Limits::max_head_bytes`.
    HeadTooLarge,
    /// More header fields than `Limits::max_headers`.
    TooManyHeaders,
    /// One header field is longer than `Limits::max_field_bytes`.
    HeaderFieldTooLong,

    // ---- 501 ----
    /// A transfer coding other than `chunked`.
    UnsupportedTransferCoding,
    /// CONNECT: this is a reverse proxy, not a tunnel.
    ConnectNotSupported,
}

impl ParseError {
    /// The status code to answer a client with.
    pub fn status(&self) -> u16 {
        use ParseError::*;
        match self {
            BodyTooLarge => 413,
            UriTooLong => 414,
            HeadTooLarge | TooManyHeaders | HeaderFieldTooLong => 431,
            UnsupportedTransferCoding | ConnectNotSupported => 501,
            _ => 400,
        }
    }

    /// A short description for logs.
    pub fn message(&self) -> &'static str {
        use ParseError::*;
        match self {
            InvalidRequestLine => "malformed request line",
            InvalidStatusLine => "malformed status line",
            InvalidVersion => "unsupported HTTP version",
            InvalidTarget => "malformed request target",
            UriByteNotAllowed => "byte not allowed in request target",
            InvalidHeaderName => "invalid byte in header name",
            InvalidHeaderValue => "control character in header value",
            HeaderByteNotAllowed => "byte not allowed in header value",
            WhitespaceBeforeColon => "whitespace between header name and colon",
            ObsFold => "obsolete line folding",
            BareCr => "CR not followed by LF",
            BareLf => "LF not preceded by CR",
            ContentLengthWithTransferEncoding => "both Content-Length and Transfer-Encoding",
            ConflictingContentLength => "differing Content-Length values",
            InvalidContentLength => "malformed Content-Length",
            InvalidTransferEncoding => "Transfer-Encoding not ending in a single chunked",
            TransferEncodingInHttp10 => "Transfer-Encoding in HTTP/1.0",
            MissingHost => "HTTP/1.1 request without Host",
            DuplicateHost => "several Host headers",
            InvalidHost => "malformed Host",
            InvalidForwardedFor => "malformed X-Forwarded-For",
            InvalidForwarded => "malformed Forwarded",
            ContentOnBodylessMethod => "Content-Length or Content-Type on a method without a body",
            InvalidChunkSize => "malformed chunk size",
            InvalidChunkExtension => "malformed chunk extension",
            MissingChunkCrlf => "missing CRLF in chunked body",
            InvalidTrailer => "malformed trailer field",
            TrailerTooLarge => "trailer section too large",
            IncompleteBody => "connection closed before the end of the body",
            BodyTooLarge => "body too large",
            UriTooLong => "request target too long",
            HeadTooLarge => "header section too large",
            TooManyHeaders => "too many header fields",
            HeaderFieldTooLong => "header field too long",
            UnsupportedTransferCoding => "unsupported transfer coding",
            ConnectNotSupported => "CONNECT not supported",
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for ParseError {}
