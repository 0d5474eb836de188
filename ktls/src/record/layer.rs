//! The record layer of an established connection, sans I/O: it turns plaintext into records
//! and records into plaintext or events, and keeps the sequence numbers and keys. RFC 8446 §5
//! for TLS 1.3 (outer type application_data, inner content type, zero padding, nonce = IV XOR
//! sequence, the header as AAD); RFC 5246 §6.2.3.3 with RFC 5288 / RFC 7905 for TLS 1.2 AEAD
//! (AAD = sequence || type || version || plaintext length; 8-byte explicit nonce for AES-GCM).

use std::ops::Range;

use super::aead::{self, Suite, TAG_LEN};
use super::error::{alert, RecordError};
use super::keys::DirectionKeys;
use crate::kernel::{KernelCipher, TlsVersion};

/// Content types (RFC 8446 §5.1).
pub mod content {
    pub const CHANGE_CIPHER_SPEC: u8 = 20;
    pub const ALERT: u8 = 21;
    pub const HANDSHAKE: u8 = 22;
    pub const APPLICATION_DATA: u8 = 23;
}

pub const HEADER_LEN: usize = 5;
/// The largest plaintext of one record (2^14).
pub const MAX_PLAINTEXT: usize = 16 * 1024;
/// The largest ciphertext a peer may send: 2^14 + 256 (TLS 1.3), 2^14 + 2048 (TLS 1.2).
pub fn max_ciphertext(version: TlsVersion) -> usize {
    match version {
        TlsVersion::Tls13 => MAX_PLAINTEXT + 256,
        TlsVersion::Tls12 => MAX_PLAINTEXT + 2048,
    }
}
/// The largest record on the wire.
pub const MAX_RECORD: usize = HEADER_LEN + MAX_PLAINTEXT + 2048;

/// The most TLS 1.3 padding one record gets from this layer.
pub const MAX_PADDING: usize = 256;

const LEGACY_VERSION: [u8; 2] = [3, 3];
/// TLS 1.3 padding is zeros: records take theirs from here.
static ZERO_PADDING: [u8; MAX_PADDING] = [0; MAX_PADDING];
/// Every byte value at its own index: a TLS 1.3 record's inner content type as a slice that
/// lives as long as the caller's parts.
static BYTE_VALUES: [u8; 256] = {
    let mut values = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        values[i] = i as u8;
        i += 1;
    }
    values
};
const EXPLICIT_NONCE_LEN: usize = 8;
const HANDSHAKE_KEY_UPDATE: u8 = 24;
const ALERT_WARNING: u8 = 1;
const ALERT_FATAL: u8 = 2;

/// What one received record turned out to be. `consumed` bytes of the input are done with.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    /// The input does not hold a whole record yet.
    Incomplete,
    /// Application data, decrypted in place at `plain` (within the input).
    Data {
        consumed: usize,
        plain: Range<usize>,
    },
    /// The peer's close_notify.
    Closed { consumed: usize },
    /// The peer moved to its next key; `answer`: it asked us to update ours too, and the
    /// caller must send [`RecordLayer::seal_key_update`] before its next data record.
    KeyUpdated { consumed: usize, answer: bool },
    /// Nothing for the caller (an empty record, a warning alert that changes nothing).
    Skip { consumed: usize },
}

/// `len` bytes of a caller's parts, starting `offset` bytes into the first: the plaintext of
/// one record, read where it lies (no list of slices built per record).
struct Span<'a, P> {
    parts: &'a [P],
    offset: usize,
    len: usize,
}

impl<'a, P: std::ops::Deref<Target = [u8]>> Iterator for Span<'a, P> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        while self.len > 0 {
            let (first, rest) = self.parts.split_first()?;
            let bytes = first.get(self.offset..).unwrap_or_default();
            self.parts = rest;
            self.offset = 0;
            let take = bytes.len().min(self.len);
            if take > 0 {
                self.len -= take;
                return Some(&bytes[..take]);
            }
        }
        None
    }
}

/// Both directions of an established connection: about 230 bytes, no cipher context.
pub struct RecordLayer {
    version: TlsVersion,
    cipher: KernelCipher,
    read: DirectionKeys,
    write: DirectionKeys,
}

impl RecordLayer {
    pub fn new(
        version: TlsVersion,
        cipher: KernelCipher,
        read: DirectionKeys,
        write: DirectionKeys,
    ) -> RecordLayer {
        RecordLayer {
            version,
            cipher,
            read,
            write,
        }
    }

    pub fn version(&self) -> TlsVersion {
        self.version
    }

    pub fn cipher(&self) -> KernelCipher {
        self.cipher
    }

    /// The next sequence numbers to read and to write.
    pub fn sequences(&self) -> (u64, u64) {
        (self.read.seq, self.write.seq)
    }

    /// Both directions as the kernel takes them (receive, send): the same keys, nonce bases
    /// and sequence numbers, for `kernel::set_crypto` (the AWS-LC hand-over).
    #[cfg(feature = "aws-lc")]
    pub(crate) fn kernel_state(
        &self,
    ) -> Result<(crate::kernel::CryptoInfo, crate::kernel::CryptoInfo), crate::kernel::KeyLengthError>
    {
        let of = |keys: &DirectionKeys| {
            crate::kernel::CryptoInfo::of_direction(
                self.version,
                self.cipher,
                keys.key(),
                keys.iv(),
                keys.seq,
            )
        };
        Ok((of(&self.read)?, of(&self.write)?))
    }

    fn suite(cipher: KernelCipher, keys: &DirectionKeys) -> Suite<'_> {
        Suite {
            cipher,
            key: keys.key(),
            key_id: keys.key_id,
            slot: &keys.slot,
        }
    }

    /// Bytes a record adds around `plain` bytes of payload (without TLS 1.3 padding).
    pub fn overhead(&self) -> usize {
        match (self.version, self.cipher) {
            (TlsVersion::Tls13, _) => HEADER_LEN + 1 + TAG_LEN,
            (TlsVersion::Tls12, KernelCipher::Chacha20Poly1305) => HEADER_LEN + TAG_LEN,
            (TlsVersion::Tls12, _) => HEADER_LEN + EXPLICIT_NONCE_LEN + TAG_LEN,
        }
    }

    /// Appends one record of `content_type` holding the concatenation of `parts` (at most
    /// 2^14 bytes) and, in TLS 1.3, `padding` zero bytes (at most [`MAX_PADDING`]).
    pub fn seal_record(
        &mut self,
        content_type: u8,
        parts: &[&[u8]],
        padding: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        let plain_len: usize = parts.iter().map(|p| p.len()).sum();
        self.seal_pieces(content_type, parts.iter().copied(), plain_len, padding, out)
    }

    /// [`RecordLayer::seal_record`] of the `plain_len` bytes `pieces` yields.
    fn seal_pieces<'p>(
        &mut self,
        content_type: u8,
        pieces: impl Iterator<Item = &'p [u8]>,
        plain_len: usize,
        padding: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        if plain_len > MAX_PLAINTEXT {
            return Err(RecordError::RecordOverflow(plain_len));
        }
        if self.write.seq == u64::MAX {
            return Err(RecordError::SequenceExhausted);
        }
        let tls13 = self.version == TlsVersion::Tls13;
        let padding = if tls13 {
            padding.min(MAX_PADDING).min(MAX_PLAINTEXT - plain_len)
        } else {
            0
        };
        let explicit = !tls13 && self.cipher != KernelCipher::Chacha20Poly1305;
        let inner_len = plain_len + if tls13 { 1 + padding } else { 0 };
        let body_len = inner_len + TAG_LEN + if explicit { EXPLICIT_NONCE_LEN } else { 0 };
        let outer_type = if tls13 {
            content::APPLICATION_DATA
        } else {
            content_type
        };
        let start = out.len();
        out.push(outer_type);
        out.extend_from_slice(&LEGACY_VERSION);
        out.extend_from_slice(&(body_len as u16).to_be_bytes());
        let seq = self.write.seq.to_be_bytes();
        let nonce = self.write.nonce();
        if explicit {
            // RFC 5288 §3: the nonce's last 8 bytes travel in the record (the sequence number:
            // the IV's last 8 bytes are zero for TLS 1.2 AES-GCM).
            out.extend_from_slice(&nonce[4..]);
        }
        let mut aad = [0u8; 13];
        let aad: &[u8] = if tls13 {
            aad[..HEADER_LEN].copy_from_slice(&out[start..start + HEADER_LEN]);
            &aad[..HEADER_LEN]
        } else {
            aad[..8].copy_from_slice(&seq);
            aad[8] = content_type;
            aad[9..11].copy_from_slice(&LEGACY_VERSION);
            aad[11..].copy_from_slice(&(plain_len as u16).to_be_bytes());
            &aad
        };
        // TLS 1.3 inner plaintext ends with the content type and the padding.
        let inner_type = usize::from(content_type);
        let trailer: [&'static [u8]; 2] = if tls13 {
            [
                &BYTE_VALUES[inner_type..inner_type + 1],
                &ZERO_PADDING[..padding],
            ]
        } else {
            [&[], &[]]
        };
        let suite = Self::suite(self.cipher, &self.write);
        let plain = pieces.chain(trailer);
        if let Err(e) = aead::seal(&suite, &nonce, aad, plain, inner_len, out) {
            out.truncate(start);
            return Err(RecordError::Crypto(e.to_string()));
        }
        self.write.seq += 1;
        Ok(())
    }

    /// Seals application data from `parts` (taken in order, across part boundaries) into
    /// records of at most 2^14 bytes, until `max` plaintext bytes or the parts run out.
    /// Returns the plaintext bytes sealed. Like write(2), an error after the first record
    /// is not reported: the records before it are in `out` and their count is returned (the
    /// error comes back on the next call), so the count always says what `out` carries.
    pub fn seal_data<P: std::ops::Deref<Target = [u8]>>(
        &mut self,
        parts: &[P],
        max: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, RecordError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let end = total.min(max);
        let mut sealed = 0;
        // Where the next record starts: `offset` bytes into `parts[part]`.
        let (mut part, mut offset) = (0, 0);
        while sealed < end {
            let len = MAX_PLAINTEXT.min(end - sealed);
            let span = Span {
                parts: &parts[part..],
                offset,
                len,
            };
            match self.seal_pieces(content::APPLICATION_DATA, span, len, 0, out) {
                Ok(()) => sealed += len,
                Err(_) if sealed > 0 => break,
                Err(e) => return Err(e),
            }
            let mut left = len;
            while left > 0 {
                let rest = parts[part].len() - offset;
                if rest > left {
                    offset += left;
                    break;
                }
                left -= rest;
                part += 1;
                offset = 0;
            }
        }
        Ok(sealed)
    }

    /// An alert record: close_notify at level warning, anything else fatal.
    pub fn seal_alert(&mut self, description: u8, out: &mut Vec<u8>) -> Result<(), RecordError> {
        let level = if description == alert::CLOSE_NOTIFY {
            ALERT_WARNING
        } else {
            ALERT_FATAL
        };
        self.seal_record(content::ALERT, &[&[level, description]], 0, out)
    }

    /// TLS 1.3: announces our next key (KeyUpdate, `request`: ask the peer to update too),
    /// under the current key, then switches the write key.
    pub fn seal_key_update(&mut self, request: bool, out: &mut Vec<u8>) -> Result<(), RecordError> {
        if self.version != TlsVersion::Tls13 {
            return Err(RecordError::UnexpectedMessage("KeyUpdate in TLS 1.2"));
        }
        let message = [HANDSHAKE_KEY_UPDATE, 0, 0, 1, u8::from(request)];
        self.seal_record(content::HANDSHAKE, &[&message], 0, out)?;
        self.write
            .update(self.cipher)
            .map_err(|e| RecordError::Crypto(e.to_string()))
    }

    /// Opens the first record of `input`, decrypting it in place.
    pub fn open_record(&mut self, input: &mut [u8]) -> Result<Inbound, RecordError> {
        if input.len() < HEADER_LEN {
            return Ok(Inbound::Incomplete);
        }
        let outer_type = input[0];
        let body_len = usize::from(u16::from_be_bytes([input[3], input[4]]));
        if body_len > max_ciphertext(self.version) {
            return Err(RecordError::RecordOverflow(body_len));
        }
        self.check_outer(outer_type, [input[1], input[2]])?;
        let consumed = HEADER_LEN + body_len;
        if input.len() < consumed {
            return Ok(Inbound::Incomplete);
        }
        if self.read.seq == u64::MAX {
            return Err(RecordError::SequenceExhausted);
        }
        let (header, rest) = input[..consumed].split_at_mut(HEADER_LEN);
        let (content_type, plain) = match self.version {
            TlsVersion::Tls13 => self.open13(header, rest)?,
            TlsVersion::Tls12 => self.open12(header, rest)?,
        };
        self.read.seq += 1;
        let plain = HEADER_LEN + plain.start..HEADER_LEN + plain.end;
        self.dispatch(content_type, input, plain, consumed)
    }

    fn check_outer(&self, outer_type: u8, version: [u8; 2]) -> Result<(), RecordError> {
        match (self.version, outer_type) {
            // RFC 8446 §5.1: legacy_record_version is ignored after the handshake.
            (TlsVersion::Tls13, content::APPLICATION_DATA) => Ok(()),
            (TlsVersion::Tls13, _) => Err(RecordError::UnexpectedMessage(
                "unprotected record after the handshake",
            )),
            (TlsVersion::Tls12, content::CHANGE_CIPHER_SPEC) => Err(
                RecordError::UnexpectedMessage("ChangeCipherSpec after the handshake"),
            ),
            (
                TlsVersion::Tls12,
                content::ALERT | content::HANDSHAKE | content::APPLICATION_DATA,
            ) if version == LEGACY_VERSION => Ok(()),
            (
                TlsVersion::Tls12,
                content::ALERT | content::HANDSHAKE | content::APPLICATION_DATA,
            ) => Err(RecordError::DecodeError("record version")),
            (TlsVersion::Tls12, _) => Err(RecordError::UnexpectedMessage("unknown record type")),
        }
    }

    /// TLS 1.3: decrypts `body` (ciphertext || tag) and finds the inner content type.
    fn open13(
        &mut self,
        header: &[u8],
        body: &mut [u8],
    ) -> Result<(u8, Range<usize>), RecordError> {
        if body.len() < TAG_LEN + 1 {
            return Err(RecordError::BadRecordMac);
        }
        let (data, tag) = body.split_at_mut(body.len() - TAG_LEN);
        let nonce = self.read.nonce();
        let suite = Self::suite(self.cipher, &self.read);
        aead::open(&suite, &nonce, header, data, tag).map_err(|_| RecordError::BadRecordMac)?;
        let Some(type_at) = data.iter().rposition(|&b| b != 0) else {
            return Err(RecordError::UnexpectedMessage(
                "record without a content type",
            ));
        };
        if type_at > MAX_PLAINTEXT {
            return Err(RecordError::RecordOverflow(type_at));
        }
        Ok((data[type_at], 0..type_at))
    }

    /// TLS 1.2 AEAD: decrypts `body` ([explicit nonce] || ciphertext || tag).
    fn open12(
        &mut self,
        header: &[u8],
        body: &mut [u8],
    ) -> Result<(u8, Range<usize>), RecordError> {
        let explicit = if self.cipher == KernelCipher::Chacha20Poly1305 {
            0
        } else {
            EXPLICIT_NONCE_LEN
        };
        if body.len() < explicit + TAG_LEN {
            return Err(RecordError::BadRecordMac);
        }
        let plain_len = body.len() - explicit - TAG_LEN;
        if plain_len > MAX_PLAINTEXT {
            return Err(RecordError::RecordOverflow(plain_len));
        }
        let mut nonce = self.read.nonce();
        if explicit > 0 {
            nonce[4..].copy_from_slice(&body[..EXPLICIT_NONCE_LEN]);
        }
        let mut aad = [0u8; 13];
        aad[..8].copy_from_slice(&self.read.seq.to_be_bytes());
        aad[8..11].copy_from_slice(&header[..3]);
        aad[11..].copy_from_slice(&(plain_len as u16).to_be_bytes());
        let (data, tag) = body[explicit..].split_at_mut(plain_len);
        let suite = Self::suite(self.cipher, &self.read);
        aead::open(&suite, &nonce, &aad, data, tag).map_err(|_| RecordError::BadRecordMac)?;
        Ok((header[0], explicit..explicit + plain_len))
    }

    fn dispatch(
        &mut self,
        content_type: u8,
        input: &[u8],
        plain: Range<usize>,
        consumed: usize,
    ) -> Result<Inbound, RecordError> {
        let bytes = &input[plain.clone()];
        match content_type {
            content::APPLICATION_DATA if bytes.is_empty() => Ok(Inbound::Skip { consumed }),
            content::APPLICATION_DATA => Ok(Inbound::Data { consumed, plain }),
            content::ALERT => self.alert(bytes, consumed),
            content::HANDSHAKE => self.handshake(bytes, consumed),
            _ => Err(RecordError::UnexpectedMessage(
                "content type after the handshake",
            )),
        }
    }

    fn alert(&self, bytes: &[u8], consumed: usize) -> Result<Inbound, RecordError> {
        let &[level, description] = bytes else {
            return Err(RecordError::DecodeError("alert"));
        };
        match (level, description) {
            (_, alert::CLOSE_NOTIFY) => Ok(Inbound::Closed { consumed }),
            // Announcements that need no answer; a close_notify follows a user_canceled.
            (ALERT_WARNING, alert::USER_CANCELED | alert::NO_RENEGOTIATION) => {
                Ok(Inbound::Skip { consumed })
            }
            (_, description) => Err(RecordError::PeerAlert(description)),
        }
    }

    /// Post-handshake messages: only a TLS 1.3 KeyUpdate, which must end its record (RFC 8446
    /// §5.1: no handshake message may span a key change). A TLS 1.2 renegotiation is refused.
    fn handshake(&mut self, bytes: &[u8], consumed: usize) -> Result<Inbound, RecordError> {
        if self.version == TlsVersion::Tls12 {
            return Err(RecordError::UnexpectedMessage(
                "renegotiation is not supported",
            ));
        }
        match bytes {
            [HANDSHAKE_KEY_UPDATE, 0, 0, 1, request @ (0 | 1)] => {
                self.read
                    .update(self.cipher)
                    .map_err(|e| RecordError::Crypto(e.to_string()))?;
                Ok(Inbound::KeyUpdated {
                    consumed,
                    answer: *request == 1,
                })
            }
            [HANDSHAKE_KEY_UPDATE, 0, 0, 1, _] => {
                Err(RecordError::IllegalParameter("KeyUpdate request"))
            }
            [HANDSHAKE_KEY_UPDATE, ..] => Err(RecordError::DecodeError("KeyUpdate")),
            _ => Err(RecordError::UnexpectedMessage("post-handshake message")),
        }
    }

    /// Tests and the differential check against OpenSSL: start from other sequence numbers.
    #[doc(hidden)]
    pub fn set_sequences(&mut self, read: u64, write: u64) {
        self.read.seq = read;
        self.write.seq = write;
    }
}

#[cfg(test)]
mod tests {
    use super::{content, RecordLayer, MAX_PLAINTEXT};
    use crate::kernel::{KernelCipher, TlsVersion};
    use crate::record::DirectionKeys;

    fn layer() -> RecordLayer {
        let keys = || DirectionKeys::from_key_iv(&[9; 16], &[3; 12], 0).unwrap();
        RecordLayer::new(TlsVersion::Tls13, KernelCipher::AesGcm128, keys(), keys())
    }

    /// Records sealed from many parts (empty ones, one-byte ones, parts that straddle record
    /// boundaries) are those sealed from the same bytes in one piece, cut every 2^14 bytes,
    /// and `max` stops at exactly that many bytes.
    #[test]
    fn seal_data_cuts_records_across_parts_as_from_one_buffer() {
        let sizes = [0, 1, 0, 700, 1, 20_000, 0, 3, 16_384, 9_000, 1, 0];
        let parts: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|b| (b * 31 + i) as u8).collect())
            .collect();
        let whole = parts.concat();
        for max in [whole.len(), usize::MAX, 17_000, 16_384, 5] {
            let mut from_parts = Vec::new();
            let sealed = layer().seal_data(&parts, max, &mut from_parts).unwrap();
            assert_eq!(sealed, whole.len().min(max));
            let mut from_whole = Vec::new();
            let mut one = layer();
            for chunk in whole[..sealed].chunks(MAX_PLAINTEXT) {
                one.seal_record(content::APPLICATION_DATA, &[chunk], 0, &mut from_whole)
                    .unwrap();
            }
            assert_eq!(from_parts, from_whole, "max {max}");
        }
    }

    /// Sequence numbers that run out in the middle of a call: the records sealed before are
    /// counted (the fuzz target once found the count missing while the records were in
    /// `out`), and the next call reports the exhaustion.
    #[test]
    fn seal_data_counts_the_records_sealed_before_the_sequence_runs_out() {
        let keys = || DirectionKeys::from_key_iv(&[9; 16], &[3; 12], u64::MAX - 2).unwrap();
        let mut layer =
            RecordLayer::new(TlsVersion::Tls13, KernelCipher::AesGcm128, keys(), keys());
        let data = vec![7u8; 3 * MAX_PLAINTEXT];
        let mut out = Vec::new();
        assert_eq!(
            layer.seal_data(&[&data[..]], usize::MAX, &mut out),
            Ok(2 * MAX_PLAINTEXT)
        );
        let record = 5 + MAX_PLAINTEXT + 1 + 16;
        assert_eq!(out.len(), 2 * record, "two records, nothing of the third");
        assert_eq!(
            layer.seal_data(&[&data[..]], usize::MAX, &mut out),
            Err(super::RecordError::SequenceExhausted)
        );
        assert_eq!(out.len(), 2 * record);
    }
}
