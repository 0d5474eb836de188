//! The proxy's own answers on an HTTP/2 stream: status pages, redirects, local pages, and
//! stored responses from the cache (whole, or composed into a 206/412/416), each as HEADERS
//! then DATA, the stored body shared until it is framed. A stored or composed head goes out
//! from the cache's status and fields (`Entry::reply_fields`, `ComposedReply::fields`), not
//! from its HTTP/1 rendering.

use std::sync::Arc;
use std::time::SystemTime;

use super::super::h1::{LocalPage, Reply};
use super::H2Codec;

impl H2Codec {
    /// Writes a reply of the proxy's own on `stream`; returns the body bytes.
    pub fn reply(&mut self, stream: u32, reply: &Reply<'_>, date: &str, head_only: bool) -> u64 {
        let status = reply.status();
        match reply {
            Reply::Status(status) if *status != 200 && !http1::error_body_is_empty(*status) => {
                let page = format!("{} {}\n", status, http1::reason_phrase(*status));
                let len = page.len().to_string();
                let fields: [(&[u8], &[u8]); 3] = [
                    (b"server", b"ktls-proxy"),
                    (b"content-type", b"text/plain"),
                    (b"content-length", len.as_bytes()),
                ];
                if self
                    .conn
                    .send_headers(stream, *status, &fields, head_only)
                    .is_err()
                {
                    return 0;
                }
                if head_only {
                    return 0;
                }
                self.data(stream, page.as_bytes());
                self.end(stream);
                page_len(*status)
            }
            Reply::Status(_) => {
                let fields: [(&[u8], &[u8]); 2] =
                    [(b"server", b"ktls-proxy"), (b"content-length", b"0")];
                let _ = self.conn.send_headers(stream, status, &fields, true);
                0
            }
            Reply::Redirect { location, .. } => {
                let fields: [(&[u8], &[u8]); 4] = [
                    (b"location", location.as_bytes()),
                    (b"content-length", b"0"),
                    (b"date", date.as_bytes()),
                    (b"server", b"ktls-proxy"),
                ];
                let _ = self.conn.send_headers(stream, status, &fields, true);
                0
            }
            Reply::Local(page) => self.local(stream, page, date, head_only),
            Reply::Stored {
                entry,
                answer: cache::Answer::Stored(kind),
            } => self.stored(stream, entry, *kind),
            Reply::Stored { entry, answer } => match entry.reply(answer) {
                cache::Reply::Stored(kind) => self.stored(stream, entry, kind),
                cache::Reply::Composed(composed) => self.composed(stream, entry, &composed),
            },
        }
    }

    /// A stored response on `stream`: its head as HEADERS (from the entry's status and
    /// fields), the body shared until framed.
    fn stored(&mut self, stream: u32, entry: &Arc<cache::Entry>, kind: cache::ReplyKind) -> u64 {
        let (_, body) = entry.reply_parts(kind);
        let body_len = body.len();
        let mut digits = [0u8; 20];
        let age = entry.age_value(SystemTime::now(), &mut digits);
        let (status, fields) = (entry.reply_status(kind), entry.reply_fields(kind));
        if self
            .send_stored_head(stream, status, fields, age, body_len == 0)
            .is_err()
        {
            return 0;
        }
        if body_len > 0 {
            self.shared(stream, entry.body().clone(), 0..body_len);
            self.end(stream);
        }
        body_len as u64
    }

    /// A 206, 412 or 416 composed from a stored entry: HEADERS (from the reply's status and
    /// fields), then the body parts in order, the selected ranges shared with the stored body
    /// until framed.
    fn composed(
        &mut self,
        stream: u32,
        entry: &Arc<cache::Entry>,
        composed: &cache::ComposedReply<'_>,
    ) -> u64 {
        let body_len = composed.body_len();
        let mut digits = [0u8; 20];
        let age = entry.age_value(SystemTime::now(), &mut digits);
        let (status, fields) = (composed.status(), composed.fields());
        if self
            .send_stored_head(stream, status, fields, age, body_len == 0)
            .is_err()
        {
            return 0;
        }
        if body_len == 0 {
            return 0;
        }
        for part in composed.body_parts() {
            match part {
                cache::BodyPart::Stored(range) => {
                    self.shared(stream, entry.body().clone(), range.clone())
                }
                cache::BodyPart::Owned(bytes) => self.data(stream, bytes),
            }
        }
        self.end(stream);
        body_len as u64
    }

    /// A page of the proxy's own on `stream`; returns the body bytes sent.
    fn local(&mut self, stream: u32, page: &LocalPage<'_>, date: &str, head_only: bool) -> u64 {
        let len = page.body.len().to_string();
        let mut fields: Vec<(&[u8], &[u8])> = page.fields.to_vec();
        fields.extend_from_slice(&[
            (b"content-length", len.as_bytes()),
            (b"date", date.as_bytes()),
            (b"server", b"ktls-proxy"),
        ]);
        let end = head_only || page.body.is_empty();
        if self
            .conn
            .send_headers(stream, page.status, &fields, end)
            .is_err()
            || end
        {
            return 0;
        }
        self.data(stream, page.body);
        self.end(stream);
        page.body.len() as u64
    }
}

/// The body length of the proxy's page for `status`.
fn page_len(status: u16) -> u64 {
    if http1::error_body_is_empty(status) {
        return 0;
    }
    format!("{} {}\n", status, http1::reason_phrase(status)).len() as u64
}
