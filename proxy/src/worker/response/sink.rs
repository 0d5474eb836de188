//! Where a relayed response goes: the one thing that differs between the exchanges the relay
//! serves. A client's exchange writes through its codec (HTTP/1.1 or HTTP/2) and, when the
//! response fills the cache, into the fill beside it; a background revalidation has no
//! client, and its response only updates the cache.

use super::super::client::codec::{self, RelayedHead};
use super::super::client::Client;
use super::super::h1::{self, BodyPlan};

/// The receiving end of one relayed response.
pub enum Sink<'a> {
    /// A client's codec, on `stream` (0 on HTTP/1.1).
    Client { client: &'a mut Client, stream: u32 },
    /// No client (stale-while-revalidate's background revalidation, `background.rs`): the
    /// response goes only to the exchange's cache fill.
    FillOnly,
}

impl Sink<'_> {
    /// The client, when there is one.
    pub fn client(&self) -> Option<&Client> {
        match self {
            Sink::Client { client, .. } => Some(client),
            Sink::FillOnly => None,
        }
    }

    /// Whether more of the response may be passed on now (a client's outbox and HTTP/2
    /// flow-control window; a fill takes everything, giving up past its size limit).
    pub fn has_room(&self) -> bool {
        match self {
            Sink::Client { client, stream } => codec::has_room(client, *stream),
            Sink::FillOnly => true,
        }
    }

    /// An interim (1xx, not 101) head, parsed from `input`'s first `len` bytes. True if a
    /// client got it.
    pub fn interim(&mut self, parsed: (&http1::ResponseHead, &[u8], usize)) -> bool {
        match self {
            Sink::Client { client, stream } => codec::interim(client, *stream, parsed),
            Sink::FillOnly => false,
        }
    }

    /// The final response head: sent in the client's codec form, its pieces also handed to
    /// `store` (the fill's copy); a fill-only sink only fills `store`. Err: over the
    /// forwarding limits, nothing written.
    pub fn head(
        &mut self,
        scratch: &mut Vec<u8>,
        relayed: &RelayedHead<'_>,
        store: Option<&mut http1::ResponseFields>,
    ) -> Result<BodyPlan, ()> {
        match self {
            Sink::Client { client, stream } => {
                codec::response_head(client, *stream, scratch, relayed, store)
            }
            Sink::FillOnly => h1::relayed_head_fields(
                store,
                (relayed.head, relayed.input),
                relayed.edits,
                relayed.limits,
                relayed.to,
            ),
        }
    }

    /// The body ends when the client's connection closes (a close-delimited body).
    pub fn close_after_flush(&mut self) {
        if let Sink::Client { client, .. } = self {
            client.end.close_after_flush();
        }
    }

    /// Relayed body bytes: `raw` as the upstream framed them, `data` the decoded part.
    /// Returns the body bytes a client got.
    pub fn body(&mut self, raw: &[u8], data: &[u8], chunked: bool, dechunk: bool) -> u64 {
        match self {
            Sink::Client { client, stream } => {
                codec::body(client, *stream, raw, data, chunked, dechunk)
            }
            Sink::FillOnly => 0,
        }
    }

    /// The trailer section of a chunked body that ended.
    pub fn trailers(&mut self, section: &[u8]) {
        if let Sink::Client { client, stream } = self {
            codec::trailers(client, *stream, section);
        }
    }
}
