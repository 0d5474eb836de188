//! What a graceful stop and a reload ask of the client connections as a whole.

use std::collections::VecDeque;

use mio::Token;

use super::codec::Codec;
use super::{Client, ClientId, Clients};
use crate::worker::token::client_token;

impl Clients {
    /// Tells every HTTP/2 client that no new stream will be served (GOAWAY with the last
    /// stream accepted); the streams in flight finish, then the connection closes. Each is
    /// queued on `dirty` to flush it.
    pub fn go_away_all(&mut self, dirty: &mut VecDeque<Token>) {
        for (ci, c) in self.iter_mut() {
            // Not `End::close_after_flush`: the streams in flight still read WINDOW_UPDATEs;
            // the codec says when the connection is done.
            if let Client {
                codec: Codec::H2(h2),
                out,
                ..
            } = c
            {
                h2.conn.go_away();
                h2.flush_into(out);
                dirty.push_back(client_token(ci));
            } else if let Codec::H3(h3) = &mut c.codec {
                h3.h3.send_goaway();
                dirty.push_back(client_token(ci));
            }
        }
    }

    /// The idle HTTP/1 and HTTP/3 connections (a graceful stop's last call closes them;
    /// an HTTP/3 one with CONNECTION_CLOSE after its GOAWAY).
    pub fn idle_h1(&self) -> Vec<ClientId> {
        self.iter()
            .filter(|(_, c)| c.is_idle() && !matches!(c.codec, Codec::H2(_)))
            .map(|(i, _)| i)
            .collect()
    }
}
