//! Vocabulary shared by requests and responses: version, method, framing.

/// The HTTP/1.x minor version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// HTTP/1.0
    Http10,
    /// HTTP/1.1
    Http11,
}

impl Version {
    pub(crate) fn from_minor(minor: u8) -> Option<Version> {
        match minor {
            0 => Some(Version::Http10),
            1 => Some(Version::Http11),
            _ => None,
        }
    }

    /// `HTTP/1.0` or `HTTP/1.1`.
    pub fn as_bytes(&self) -> &'static [u8] {
        match self {
            Version::Http10 => b"HTTP/1.0",
            Version::Http11 => b"HTTP/1.1",
        }
    }
}

/// The request method. Methods are case-sensitive: `get` is `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Trace,
    Patch,
    Connect,
    /// Tempesta's (and Varnish's) cache purge method.
    Purge,
    /// Any other token; its bytes are in [`RequestHead::method_bytes`](crate::RequestHead::method_bytes).
    Other,
}

impl Method {
    pub(crate) fn from_bytes(name: &[u8]) -> Method {
        match name {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"PATCH" => Method::Patch,
            b"CONNECT" => Method::Connect,
            b"PURGE" => Method::Purge,
            _ => Method::Other,
        }
    }

    /// The method's token, for every method but [`Method::Other`] (whose
    /// bytes are in the head): a `&str` without a UTF-8 check.
    pub fn as_str(&self) -> Option<&'static str> {
        Some(match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Trace => "TRACE",
            Method::Patch => "PATCH",
            Method::Connect => "CONNECT",
            Method::Purge => "PURGE",
            Method::Other => return None,
        })
    }

    /// Safe methods (RFC 9110 §9.2.1).
    pub fn is_safe(&self) -> bool {
        matches!(
            self,
            Method::Get | Method::Head | Method::Options | Method::Trace
        )
    }

    /// Idempotent methods (RFC 9110 §9.2.2): may be retried on another
    /// upstream connection.
    pub fn is_idempotent(&self) -> bool {
        self.is_safe() || matches!(self, Method::Put | Method::Delete)
    }
}

/// How the length of a body is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BodyFraming {
    /// No body at all.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes (responses only).
    CloseDelimited,
}

impl BodyFraming {
    /// Whether a body may follow the head.
    pub fn has_body(&self) -> bool {
        !matches!(self, BodyFraming::None | BodyFraming::Length(0))
    }
}
