//! Record protection: each suite's framing, its keys and nonces, and
//! sealing and opening a record in place.

use super::*;

/// How records are framed, which fixes the room around the plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// Type and length outside, the real content type inside, nonce from
    /// the IV and the sequence number.
    Tls13,
    /// An 8-byte explicit nonce before the ciphertext (RFC 5288).
    Tls12Gcm,
    /// The nonce from the IV and the sequence number (RFC 7905).
    Tls12Chacha,
}

impl Framing {
    pub(super) fn header_room(self) -> usize {
        match self {
            Framing::Tls12Gcm => HEADER_LEN + EXPLICIT_NONCE_LEN,
            Framing::Tls13 | Framing::Tls12Chacha => HEADER_LEN,
        }
    }

    pub(super) fn tail_room(self) -> usize {
        match self {
            Framing::Tls13 => INNER_TYPE_LEN + TAG_LEN,
            Framing::Tls12Gcm | Framing::Tls12Chacha => TAG_LEN,
        }
    }

    pub(super) fn max_ciphertext(self) -> usize {
        match self {
            Framing::Tls13 => MAX_CIPHERTEXT_13,
            Framing::Tls12Gcm | Framing::Tls12Chacha => MAX_CIPHERTEXT_12,
        }
    }
}

/// One direction's AEAD key, its fixed IV and the next sequence number.
pub(super) struct Keys {
    pub(super) key: aead::LessSafeKey,
    pub(super) iv: [u8; NONCE_LEN],
    pub(super) seq: u64,
}

impl Keys {
    /// The keys of rustls's extracted `(sequence number, secrets)`; `None`
    /// for an AEAD this layer does not know.
    pub(super) fn new((seq, secrets): (u64, ConnectionTrafficSecrets)) -> Option<Keys> {
        let (alg, key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => return None,
        };
        let key = aead::UnboundKey::new(alg, key.as_ref()).ok()?;
        Some(Keys {
            key: aead::LessSafeKey::new(key),
            iv: iv.as_ref().try_into().ok()?,
            seq,
        })
    }

    /// The IV with the sequence number XORed into its last 8 bytes (RFC
    /// 8446 5.3; RFC 7905; rustls's TLS 1.2 GCM nonces too).
    pub(super) fn nonce(&self) -> [u8; NONCE_LEN] {
        let mut nonce = self.iv;
        for (n, s) in nonce[NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *n ^= s;
        }
        nonce
    }
}

/// TLS 1.2's additional data (RFC 5246 6.2.3.3).
pub(super) fn tls12_aad(seq: u64, typ: u8, len: usize) -> [u8; TLS12_AAD_LEN] {
    let mut aad = [0; TLS12_AAD_LEN];
    aad[..8].copy_from_slice(&seq.to_be_bytes());
    aad[8] = typ;
    aad[9..11].copy_from_slice(&[3, 3]);
    aad[11..].copy_from_slice(&(len as u16).to_be_bytes());
    aad
}

/// Encrypts records in place with one direction's keys.
pub(super) struct Sealer {
    pub(super) framing: Framing,
    pub(super) keys: Keys,
}

impl Sealer {
    /// `rec` holds header room, `len` plaintext bytes of content type
    /// `typ`, and tail room: writes the header, encrypts in place and
    /// returns the record's length. Checks no limit: the callers do.
    pub(super) fn seal(&mut self, typ: u8, rec: &mut [u8], len: usize) -> Result<usize, Fatal> {
        let (head, tail) = (self.framing.header_room(), self.framing.tail_room());
        let total = head + len + tail;
        let rec = rec
            .get_mut(..total)
            .ok_or(Fatal::Misuse("no room around the plaintext"))?;
        if self.keys.seq == u64::MAX {
            // The next record could not have a number of its own.
            return Err(Fatal::KeysWornOut);
        }
        let nonce = self.keys.nonce();
        let body = (total - HEADER_LEN) as u16;
        let outer = match self.framing {
            Framing::Tls13 => CT_APPLICATION_DATA,
            Framing::Tls12Gcm | Framing::Tls12Chacha => typ,
        };
        rec[0] = outer;
        rec[1..3].copy_from_slice(&[3, 3]);
        rec[3..HEADER_LEN].copy_from_slice(&body.to_be_bytes());
        let mut aad = [0; TLS12_AAD_LEN];
        let (sealed, aad_len) = match self.framing {
            Framing::Tls13 => {
                rec[head + len] = typ;
                aad[..HEADER_LEN].copy_from_slice(&rec[..HEADER_LEN]);
                (head..head + len + INNER_TYPE_LEN, HEADER_LEN)
            }
            Framing::Tls12Gcm | Framing::Tls12Chacha => {
                if self.framing == Framing::Tls12Gcm {
                    rec[HEADER_LEN..head].copy_from_slice(&nonce[NONCE_LEN - 8..]);
                }
                aad = tls12_aad(self.keys.seq, typ, len);
                (head..head + len, TLS12_AAD_LEN)
            }
        };
        let tag = self
            .keys
            .key
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(&aad[..aad_len]),
                &mut rec[sealed.clone()],
            )
            .map_err(|_| Fatal::Misuse("the AEAD refused to seal"))?;
        rec[sealed.end..sealed.end + TAG_LEN].copy_from_slice(tag.as_ref());
        self.keys.seq += 1;
        Ok(total)
    }

    /// Appends a record of `data` to `out`: the one copy of the copying
    /// path, then encryption in place there.
    pub(super) fn seal_into(
        &mut self,
        typ: u8,
        out: &mut Vec<u8>,
        data: &[u8],
    ) -> Result<(), Fatal> {
        let at = out.len();
        let (head, tail) = (self.framing.header_room(), self.framing.tail_room());
        out.reserve(head + data.len() + tail);
        out.extend_from_slice(&[0; MAX_HEADER_ROOM][..head]);
        out.extend_from_slice(data);
        out.extend_from_slice(&[0; MAX_TAIL_ROOM][..tail]);
        match self.seal(typ, &mut out[at..], data.len()) {
            Ok(_) => Ok(()),
            Err(e) => {
                out.truncate(at);
                Err(e)
            }
        }
    }
}

/// The content type and the plaintext's place in a record opened in place.
type Opened = (u8, Range<usize>);

/// Decrypts records in place with the other direction's keys.
pub(super) struct Opener {
    pub(super) framing: Framing,
    pub(super) keys: Keys,
}

impl Opener {
    /// Checks a record's header before its body is awaited (so an
    /// oversized record fails at once) and returns the body's length.
    pub(super) fn check_header(
        &self,
        header: &[u8],
    ) -> Result<usize, (AlertDescription, &'static str)> {
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        let allowed = match self.framing {
            Framing::Tls13 => header[0] == CT_APPLICATION_DATA,
            Framing::Tls12Gcm | Framing::Tls12Chacha => {
                matches!(header[0], CT_ALERT | CT_HANDSHAKE | CT_APPLICATION_DATA)
            }
        };
        if !allowed {
            return Err((
                AlertDescription::UnexpectedMessage,
                "a record of a content type not allowed after the handshake",
            ));
        }
        if header[1..3] != [3, 3] {
            return Err((
                AlertDescription::ProtocolVersion,
                "a record not of TLS 1.2 or 1.3",
            ));
        }
        if len > self.framing.max_ciphertext() {
            return Err((AlertDescription::RecordOverflow, "an oversized record"));
        }
        Ok(len)
    }

    /// Opens a whole record (header included) in place: its content type
    /// and where its plaintext now is in `rec`.
    pub(super) fn open(
        &mut self,
        rec: &mut [u8],
    ) -> Result<Opened, (AlertDescription, &'static str)> {
        const BAD_MAC: (AlertDescription, &str) = (
            AlertDescription::BadRecordMac,
            "a record failed authentication",
        );
        let head = self.framing.header_room();
        let sealed_len = rec.len().checked_sub(head + TAG_LEN).ok_or(BAD_MAC)?;
        let mut nonce = self.keys.nonce();
        let aad = match self.framing {
            Framing::Tls13 => {
                let mut aad = [0; TLS12_AAD_LEN];
                aad[..HEADER_LEN].copy_from_slice(&rec[..HEADER_LEN]);
                aad
            }
            Framing::Tls12Gcm | Framing::Tls12Chacha => {
                if self.framing == Framing::Tls12Gcm {
                    nonce[NONCE_LEN - 8..].copy_from_slice(&rec[HEADER_LEN..head]);
                }
                tls12_aad(self.keys.seq, rec[0], sealed_len)
            }
        };
        let aad_len = match self.framing {
            Framing::Tls13 => HEADER_LEN,
            Framing::Tls12Gcm | Framing::Tls12Chacha => TLS12_AAD_LEN,
        };
        self.keys
            .key
            .open_in_place(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(&aad[..aad_len]),
                &mut rec[head..],
            )
            .map_err(|_| BAD_MAC)?;
        self.keys.seq = self.keys.seq.checked_add(1).ok_or((
            AlertDescription::InternalError,
            "the receive sequence number wrapped",
        ))?;
        let (typ, plain) = match self.framing {
            // Padding included, at most 2^14 + 1 (RFC 8446 5.4).
            Framing::Tls13 if sealed_len > MAX_PLAINTEXT + INNER_TYPE_LEN => {
                return Err((AlertDescription::RecordOverflow, "an oversized plaintext"))
            }
            Framing::Tls13 => inner_plaintext(&rec[head..head + sealed_len]).ok_or((
                AlertDescription::UnexpectedMessage,
                "a TLS 1.3 record with no content type",
            ))?,
            Framing::Tls12Gcm | Framing::Tls12Chacha => (rec[0], 0..sealed_len),
        };
        if plain.len() > MAX_PLAINTEXT {
            return Err((AlertDescription::RecordOverflow, "an oversized plaintext"));
        }
        Ok((typ, head + plain.start..head + plain.end))
    }
}

/// TLS 1.3's inner plaintext: content, the content type, zero padding.
pub(super) fn inner_plaintext(inner: &[u8]) -> Option<Opened> {
    let at = inner.iter().rposition(|&b| b != 0)?;
    Some((inner[at], 0..at))
}
