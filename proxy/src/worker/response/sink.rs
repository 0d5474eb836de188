//! Where a relayed response goes: the one thing that differs between the exchanges the relay
//! serves. A client's exchange writes through its codec (HTTP/1.1 or HTTP/2) and, when the
//! response fills the cache, into the fill it holds; a background revalidation has no client,
//! and its sink is the fill alone. The sink owns the fill while it relays: the relay takes it
//! from the exchange's `Forward` for a step and gives it back after (`into_fill`), so the
//! head, body and trailers reach client and fill through one call each.

use super::super::client::codec::{self, RelayedHead};
use super::super::client::Client;
use super::super::fill::{Fill, Origin};
use super::super::h1::{self, BodyPlan};

/// The receiving end of one relayed response.
pub enum Sink<'a> {
    /// A client's codec, on `stream` (0 on HTTP/1.1), and the cache fill beside it if any.
    Client {
        client: &'a mut Client,
        stream: u32,
        fill: Option<Box<Fill>>,
    },
    /// No client (stale-while-revalidate's background revalidation, `background.rs`): the
    /// response goes only to the cache fill.
    FillOnly(Box<Fill>),
}

impl<'a> Sink<'a> {
    /// The sink of an exchange with `client` (None: the proxy's own) and `fill`. None: an
    /// exchange without a client always has a fill (`background.rs`).
    pub fn new(client: Option<(&'a mut Client, u32)>, fill: Option<Box<Fill>>) -> Option<Self> {
        match (client, fill) {
            (Some((client, stream)), fill) => Some(Sink::Client {
                client,
                stream,
                fill,
            }),
            (None, Some(fill)) => Some(Sink::FillOnly(fill)),
            (None, None) => None,
        }
    }

    /// The fill, given back to the exchange after the step.
    pub fn into_fill(self) -> Option<Box<Fill>> {
        match self {
            Sink::Client { fill, .. } => fill,
            Sink::FillOnly(fill) => Some(fill),
        }
    }

    pub fn fill_mut(&mut self) -> Option<&mut Fill> {
        match self {
            Sink::Client { fill, .. } => fill.as_deref_mut(),
            Sink::FillOnly(fill) => Some(fill),
        }
    }

    /// The client, when there is one.
    pub fn client(&self) -> Option<&Client> {
        match self {
            Sink::Client { client, .. } => Some(client),
            Sink::FillOnly(_) => None,
        }
    }

    /// The client's outbox, when there is one.
    pub fn client_out(&mut self) -> Option<&mut crate::outbox::Outbox> {
        match self {
            Sink::Client { client, .. } => Some(&mut client.out),
            Sink::FillOnly(_) => None,
        }
    }

    /// Whether more of the response may be passed on now (a client's outbox and HTTP/2
    /// flow-control window; a fill takes everything, giving up past its size limit, after
    /// which nothing more is read: [`Sink::abandons`]).
    pub fn has_room(&self) -> bool {
        match self {
            Sink::Client { client, stream, .. } => codec::has_room(client, *stream),
            Sink::FillOnly(_) => true,
        }
    }

    /// Whether nothing takes the rest of the body: a fill-only sink whose fill gave up
    /// storing (too large). A client's sink always takes it (the client reads it).
    pub fn abandons(&self) -> bool {
        match self {
            Sink::Client { .. } => false,
            Sink::FillOnly(fill) => !fill.storing(),
        }
    }

    /// An interim (1xx, not 101) head over `input` (parsed from its first `len` bytes, or
    /// None: decoded by an HTTP/2 origin's stream). True if a client got it.
    pub fn interim(&mut self, parsed: (&http1::ResponseHead, &[u8], Option<usize>)) -> bool {
        match self {
            Sink::Client { client, stream, .. } => codec::interim(client, *stream, parsed),
            Sink::FillOnly(_) => false,
        }
    }

    /// The `Age` a client sees of a response that fills the cache: `edits` with it set, or
    /// None (no fill, no Age, or a fill-only sink, which stores the origin's head as it came).
    pub fn age_edits(
        &self,
        head: &http1::ResponseHead,
        input: &[u8],
        edits: &http1::HeaderEdits,
    ) -> Option<http1::HeaderEdits> {
        match self {
            Sink::Client { fill, .. } => fill.as_ref()?.age_edits(head, input, edits),
            Sink::FillOnly(_) => None,
        }
    }

    /// The final response head: sent in the client's codec form, its pieces also given to
    /// the fill, which starts storing (`origin`: the head as received); a fill-only sink only
    /// fills. Err: over the forwarding limits, nothing written.
    pub fn head(
        &mut self,
        scratch: &mut Vec<u8>,
        relayed: &RelayedHead<'_>,
        origin: Origin<'_>,
    ) -> Result<BodyPlan, ()> {
        let plan = match self {
            Sink::Client {
                client,
                stream,
                fill,
            } => {
                let store = fill.as_mut().map(|f| f.head_sink());
                codec::response_head(client, *stream, scratch, relayed, store)?
            }
            Sink::FillOnly(fill) => h1::relayed_head_fields(
                Some(fill.head_sink()),
                (relayed.head, relayed.input),
                relayed.edits,
                relayed.limits,
                relayed.to,
            )?,
        };
        if let Some(fill) = self.fill_mut() {
            fill.begin_store(origin.head.status(), origin);
        }
        Ok(plan)
    }

    /// The body ends when the client's connection closes (a close-delimited body).
    pub fn close_after_flush(&mut self) {
        if let Sink::Client { client, .. } = self {
            client.end.close_after_flush();
        }
    }

    /// Relayed body bytes: `raw` as the upstream framed them, `data` the decoded part (which
    /// the fill stores). Returns the body bytes a client got.
    pub fn body(&mut self, raw: &[u8], data: &[u8], chunked: bool, dechunk: bool) -> u64 {
        let sent = match self {
            Sink::Client { client, stream, .. } => {
                codec::body(client, *stream, raw, data, chunked, dechunk)
            }
            Sink::FillOnly(_) => 0,
        };
        if let Some(fill) = self.fill_mut() {
            fill.push_body(data);
        }
        sent
    }

    /// The trailer section of a chunked body that ended.
    pub fn trailers(&mut self, section: &[u8]) {
        if let Sink::Client { client, stream, .. } = self {
            codec::trailers(client, *stream, section);
        }
    }

    /// Body data another codec decoded (an HTTP/2 origin's DATA), which the fill stores as
    /// it is; `framed`: the client reads chunked framing, which its codec writes around it.
    /// Returns the body bytes a client got.
    pub fn decoded_body(&mut self, data: &[u8], framed: bool) -> u64 {
        let sent = match self {
            Sink::Client { client, stream, .. } => {
                codec::decoded_body(client, *stream, data, framed)
            }
            Sink::FillOnly(_) => 0,
        };
        if let Some(fill) = self.fill_mut() {
            fill.push_body(data);
        }
        sent
    }

    /// The end of a body another codec decoded, with its trailers (none: empty); `framed`
    /// as for [`Sink::decoded_body`].
    /// Returns the body bytes a client got (an HTTP/1.1 client's last chunk).
    pub fn decoded_end(&mut self, trailers: &[h2::Field], framed: bool) -> u64 {
        match self {
            Sink::Client { client, stream, .. } => {
                codec::decoded_end(client, *stream, trailers, framed)
            }
            Sink::FillOnly(_) => 0,
        }
    }
}
