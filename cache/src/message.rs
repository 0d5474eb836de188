//! The plain request/response descriptions the proxy hands to the cache,
//! built from whatever its own HTTP types are, without copying.

use std::time::SystemTime;

use crate::headers::HeaderPair;
use crate::key::Key;

/// A client request as far as caching is concerned.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a, H: HeaderPair> {
    /// Virtual host name (or any stable id rendered as text); part of the key.
    pub vhost: &'a str,
    /// `https` when the client connection is TLS, `http` otherwise; part of the key.
    pub scheme: &'a str,
    /// The Host field value, or the authority of an absolute-form target
    /// (empty when there is none); part of the key after normalisation.
    pub authority: &'a [u8],
    pub method: &'a str,
    /// Request target as received (path and query).
    pub uri: &'a [u8],
    pub headers: &'a [H],
}

impl<H: HeaderPair> Request<'_, H> {
    pub fn is_head(&self) -> bool {
        self.method.eq_ignore_ascii_case("HEAD")
    }

    /// The primary cache key of this request (RFC 9111 §2).
    pub fn key(&self) -> Key<'_> {
        Key::new(
            self.vhost,
            self.scheme,
            self.authority,
            self.method,
            self.uri,
        )
    }
}

/// An origin response head. Hop-by-hop fields (Connection, Keep-Alive,
/// Transfer-Encoding, ...) must already be removed; the body length is the
/// decoded length, Content-Length is written by the cache itself.
#[derive(Debug, Clone, Copy)]
pub struct Response<'a, H: HeaderPair> {
    pub status: u16,
    /// Reason phrase as received; empty to use the standard one.
    pub reason: &'a [u8],
    pub headers: &'a [H],
    pub body_len: usize,
}

/// When the exchange with the origin happened, by the caller's clock
/// (RFC 9111 §4.2.3 `request_time` and `response_time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangeTimes {
    /// When the request was sent to the origin.
    pub request_time: SystemTime,
    /// When the response head was received.
    pub response_time: SystemTime,
}

/// Standard reason phrases for the status codes a cache stores or sends.
pub fn standard_reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        412 => "Precondition Failed",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}
