//! Fixed error responses and reason phrases.
//!
//! The proxy answers refused or failed requests with these bytes as they
//! are: no allocation, no formatting. The body is one short line so that
//! a human with curl sees what happened, except for 403: a block, whose
//! body is empty as Tempesta FW's is (an attacker learns nothing from it,
//! and answering costs the least). No Date (RFC 9110 §6.6.1 lets a sender
//! without a trustworthy clock, or in a hurry, omit it).

/// The reason phrase for a status this proxy emits, or `""`.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// Builds the keep-alive and closing variants of one canned response.
/// `$len` is the body length, checked by a unit test.
macro_rules! canned {
    ($code:literal, $reason:literal, $len:literal) => {
        (
            concat!(
                "HTTP/1.1 ",
                $code,
                " ",
                $reason,
                "\r\n",
                "Server: ktls-proxy\r\n",
                "Content-Type: text/plain\r\n",
                "Content-Length: ",
                $len,
                "\r\n",
                "\r\n",
                $code,
                " ",
                $reason,
                "\n"
            )
            .as_bytes(),
            concat!(
                "HTTP/1.1 ",
                $code,
                " ",
                $reason,
                "\r\n",
                "Server: ktls-proxy\r\n",
                "Content-Type: text/plain\r\n",
                "Content-Length: ",
                $len,
                "\r\n",
                "Connection: close\r\n",
                "\r\n",
                $code,
                " ",
                $reason,
                "\n"
            )
            .as_bytes(),
        )
    };
}

/// The keep-alive and closing variants of a canned response without a body.
macro_rules! canned_empty {
    ($code:literal, $reason:literal) => {
        (
            concat!(
                "HTTP/1.1 ",
                $code,
                " ",
                $reason,
                "\r\n",
                "Server: ktls-proxy\r\n",
                "Content-Length: 0\r\n",
                "\r\n"
            )
            .as_bytes(),
            concat!(
                "HTTP/1.1 ",
                $code,
                " ",
                $reason,
                "\r\n",
                "Server: ktls-proxy\r\n",
                "Content-Length: 0\r\n",
                "Connection: close\r\n",
                "\r\n"
            )
            .as_bytes(),
        )
    };
}

type Pair = (&'static [u8], &'static [u8]);

const R400: Pair = canned!("400", "Bad Request", "16");
const R403: Pair = canned_empty!("403", "Forbidden");
const R404: Pair = canned!("404", "Not Found", "14");
const R408: Pair = canned!("408", "Request Timeout", "20");
const R413: Pair = canned!("413", "Content Too Large", "22");
const R414: Pair = canned!("414", "URI Too Long", "17");
const R431: Pair = canned!("431", "Request Header Fields Too Large", "36");
const R500: Pair = canned!("500", "Internal Server Error", "26");
const R501: Pair = canned!("501", "Not Implemented", "20");
const R502: Pair = canned!("502", "Bad Gateway", "16");
const R503: Pair = canned!("503", "Service Unavailable", "24");
const R504: Pair = canned!("504", "Gateway Timeout", "20");

/// Whether the canned answer with `status` has no body (403, see the module's comment);
/// the HTTP/2 writer follows it too.
pub fn error_body_is_empty(status: u16) -> bool {
    status == 403
}

/// A complete fixed response for `status` (400, 403, 404, 408, 413, 414,
/// 431, 500, 501, 502, 503, 504; any other status gives the 500), with
/// `Connection: close` when `close`.
pub fn error_response(status: u16, close: bool) -> &'static [u8] {
    let (keep, closing) = match status {
        400 => R400,
        403 => R403,
        404 => R404,
        408 => R408,
        413 => R413,
        414 => R414,
        431 => R431,
        501 => R501,
        502 => R502,
        503 => R503,
        504 => R504,
        _ => R500,
    };
    if close {
        closing
    } else {
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_matches_body_and_reason_matches_table() {
        for status in [400, 403, 404, 408, 413, 414, 431, 500, 501, 502, 503, 504] {
            for close in [false, true] {
                let bytes = error_response(status, close);
                let text = std::str::from_utf8(bytes).unwrap();
                let (head, body) = text.split_once("\r\n\r\n").unwrap();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(length, body.len(), "{status}");
                assert_eq!(body.is_empty(), error_body_is_empty(status), "{status}");
                let status_line = format!("HTTP/1.1 {status} {}", reason_phrase(status));
                assert!(head.starts_with(&status_line), "{status}");
                assert_eq!(head.contains("Connection: close"), close);
            }
        }
        assert!(error_response(999, true).starts_with(b"HTTP/1.1 500 "));
    }
}
