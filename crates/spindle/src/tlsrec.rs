//! spindle's own TLS record layer: rustls does the handshake, then the
//! connection's record protection is taken over here, the way kTLS takes
//! it over in the kernel, so that a response body byte can be read by the
//! kernel straight into the place it will be encrypted in (no user-space
//! copy before the AEAD, none after it).
//!
//! Why: with rustls's buffered `ServerConnection`, a body byte is copied
//! into rustls's plaintext queue by `Writer`, framed and encrypted into a
//! record of its own, and copied out again by `write_tls`: about four
//! memcpys per byte, 30% of the worker's time in memmove at 100 KiB over
//! HTTP/2. Here [`TlsLink::seal_in_place`] encrypts a record in the buffer
//! the disk read filled, and [`RecordLayout`] says where each record's
//! payload must land for that.
//!
//! How: the handshake runs on rustls's *unbuffered* connection (the caller
//! owns the ciphertext buffer, so the bytes after the client's Finished stay
//! ours) until it is complete and every handshake record, TLS 1.3 session
//! tickets included, has been encoded; then
//! `dangerous_into_kernel_connection` gives the traffic keys and sequence
//! numbers, and a `KernelConnection` that derives the next keys on a TLS 1.3
//! KeyUpdate. The configuration must allow that extraction
//! ([`record_config`]).
//!
//! No I/O: the caller appends what it received to an
//! input buffer, calls [`TlsLink::receive`], and sends what was appended to
//! its output buffer (and the records it sealed in place), in order. Both
//! any event loop can drive it.
//!
//! **Invariant (the caller's):** records reach the socket in the order
//! they were sealed, whether sealed in place or appended to an output
//! buffer (each carries the next sequence number; a KeyUpdate or an alert
//! that `receive` appends comes after every record sealed before it).
//! A loop keeps one queue of segments to send per connection and seals a
//! segment's records when it joins the queue.
//!
//! Hostile input never panics: a bad header, length, MAC, content type,
//! alert or handshake message ends the link with [`Fatal`], after the
//! matching alert was put in the output.

use std::ops::Range;
use std::sync::Arc;

use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, EncodeTlsData, InsufficientSizeError};
use rustls::{
    AlertDescription, ConnectionTrafficSecrets, ProtocolVersion, ServerConfig, SupportedCipherSuite,
};

/// The AEADs: from the crate of the crypto provider rustls uses
/// (`tls::provider`), so that one feature switches both.
#[cfg(feature = "aws-lc-rs")]
use aws_lc_rs::aead;
#[cfg(not(feature = "aws-lc-rs"))]
use ring::aead;

/// Most plaintext one record carries (RFC 8446 5.1, RFC 5246 6.2.1).
pub const MAX_PLAINTEXT: usize = 16_384;
/// A record's header: content type, version, length.
pub const HEADER_LEN: usize = 5;
/// Most ciphertext a TLS 1.3 record may carry (RFC 8446 5.2).
const MAX_CIPHERTEXT_13: usize = MAX_PLAINTEXT + 256;
/// Most ciphertext a TLS 1.2 record may carry (RFC 5246 6.2.3).
const MAX_CIPHERTEXT_12: usize = MAX_PLAINTEXT + 2048;
/// Most ciphertext bytes a connection may leave buffered (an incomplete
/// record, or during the handshake an incomplete handshake message, which
/// rustls bounds at 64 KiB) before it is failed.
pub const MAX_INBUF_BYTES: usize = 1 << 17;
/// The AEAD tag of every suite rustls offers.
const TAG_LEN: usize = 16;
/// TLS 1.2 AES-GCM's explicit nonce, sent before the ciphertext.
const EXPLICIT_NONCE_LEN: usize = 8;
/// A TLS 1.3 record's inner content type byte.
const INNER_TYPE_LEN: usize = 1;
/// The largest [`TlsLink::header_room`] of any suite.
pub const MAX_HEADER_ROOM: usize = HEADER_LEN + EXPLICIT_NONCE_LEN;
/// The largest [`TlsLink::tail_room`] of any suite.
pub const MAX_TAIL_ROOM: usize = INNER_TYPE_LEN + TAG_LEN;
/// How many records before the suite's confidentiality limit a TLS 1.3
/// link updates its sending key (a TLS 1.2 link closes instead): room for
/// every record the caller may seal in place between two calls of
/// [`TlsLink::rekey_if_due`] (1 Mi records, 16 GiB).
pub const KEY_UPDATE_MARGIN: u64 = 1 << 20;
/// KeyUpdates accepted in a row with no application data between them
/// (rustls's own bound: a peer looping on KeyUpdate costs us key
/// derivations for nothing).
const MAX_KEY_UPDATES_WITHOUT_DATA: u32 = 32;
/// Warning alerts accepted over a connection's life (rustls's, and
/// BoringSSL's, bound).
const MAX_WARNING_ALERTS: u32 = 4;
/// TLS 1.2 renegotiation attempts answered with a `no_renegotiation`
/// warning; the next one is fatal (rustls's policy, kept).
const MAX_RENEGOTIATION_REQUESTS: u32 = 1;
/// Encoded handshake records flushed after rustls failed a handshake (its
/// alert; there is one).
const MAX_ALERT_FLUSH: usize = 4;

const CT_ALERT: u8 = 21;
const CT_HANDSHAKE: u8 = 22;
const CT_APPLICATION_DATA: u8 = 23;
const HS_CLIENT_HELLO: u8 = 1;
const HS_KEY_UPDATE: u8 = 24;
const ALERT_WARNING: u8 = 1;
const ALERT_FATAL: u8 = 2;
const NONCE_LEN: usize = 12;
/// TLS 1.2's additional data: sequence number, type, version, length.
const TLS12_AAD_LEN: usize = 13;

/// A copy of `cfg` that lets a connection's secrets be extracted, which
/// [`TlsLink`] needs (rustls refuses otherwise). The ticketer and session
/// cache are the same `Arc`s, so resumption is shared with `cfg`'s other
/// connections. Build it once per configuration generation, not per
/// connection.
pub fn record_config(cfg: &ServerConfig) -> Arc<ServerConfig> {
    let mut cfg = cfg.clone();
    cfg.enable_secret_extraction = true;
    Arc::new(cfg)
}

/// What [`TlsLink::receive`] got done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The handshake goes on: send the output, receive more.
    Handshaking,
    /// The handshake completed in this call (ALPN is known now): the
    /// records after it were read and their plaintext handed on.
    Established,
    /// Records read; their plaintext handed on.
    Open,
    /// The peer sent close_notify: no more will come (we may still send).
    PeerClosed,
}

/// Why a link ended. Whatever alert could be sent is in the output by the
/// time this is returned: send it, then close the socket.
#[derive(Debug)]
pub enum Fatal {
    /// rustls failed the handshake (its alert is in the output).
    Handshake(rustls::Error),
    /// We failed the connection and sent `alert` (encrypted), unless our
    /// sending side had already closed.
    Alert {
        alert: AlertDescription,
        why: &'static str,
    },
    /// The peer sent this fatal alert; none goes back.
    PeerAlert(AlertDescription),
    /// More than [`MAX_INBUF_BYTES`] of ciphertext left buffered.
    Overflow,
    /// The sending key reached its suite's confidentiality limit: on TLS
    /// 1.2, which has no KeyUpdate (close_notify is in the output), or on
    /// TLS 1.3 by sealing in place with no
    /// [`rekey_if_due`](TlsLink::rekey_if_due) for
    /// [`KEY_UPDATE_MARGIN`] records.
    KeysWornOut,
    /// The caller's mistake: a record too long or without its room.
    Misuse(&'static str),
    /// The link had already ended, or is still in its handshake.
    NotOpen,
}

impl std::fmt::Display for Fatal {
    /// One line for the error log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatal::Handshake(e) => write!(f, "TLS handshake: {e}"),
            Fatal::Alert { alert, why } => write!(f, "TLS: {why} ({alert:?} sent)"),
            Fatal::PeerAlert(alert) => write!(f, "TLS: the peer sent {alert:?}"),
            Fatal::Overflow => write!(f, "TLS: over {MAX_INBUF_BYTES} bytes of input buffered"),
            Fatal::KeysWornOut => write!(f, "TLS: the sending key reached its record limit"),
            Fatal::Misuse(why) => write!(f, "TLS record layer misused: {why}"),
            Fatal::NotOpen => write!(f, "TLS: the link is not open"),
        }
    }
}

impl std::error::Error for Fatal {}

mod protect;
use protect::*;

/// Whether the peer may still send records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receiving {
    Open,
    PeerClosed,
}

/// Whether we may still send records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    Open,
    Closed,
}

/// Counters that bound what a peer may make us do for nothing.
#[derive(Debug, Default)]
struct Temper {
    key_updates_without_data: u32,
    warning_alerts: u32,
    renegotiation_requests: u32,
}

/// An established link: our record layer.
struct Records {
    sealer: Sealer,
    opener: Opener,
    /// rustls's half of the link: derives the next keys on a KeyUpdate.
    kernel: KernelConnection<ServerConnectionData>,
    /// Records one sending key may protect (the suite's
    /// `confidentiality_limit`).
    limit: u64,
    receiving: Receiving,
    sending: Sending,
    temper: Temper,
}

/// How a version and AEAD frame records.
fn framing(version: ProtocolVersion, secrets: &ConnectionTrafficSecrets) -> Option<Framing> {
    match (version, secrets) {
        (ProtocolVersion::TLSv1_3, _) => Some(Framing::Tls13),
        (ProtocolVersion::TLSv1_2, ConnectionTrafficSecrets::Chacha20Poly1305 { .. }) => {
            Some(Framing::Tls12Chacha)
        }
        (ProtocolVersion::TLSv1_2, _) => Some(Framing::Tls12Gcm),
        _ => None,
    }
}

/// The secrets rustls handed over, as this layer's state. Fails only if
/// rustls negotiated something it does not know (a new AEAD).
fn records(
    secrets: rustls::ExtractedSecrets,
    kernel: KernelConnection<ServerConnectionData>,
) -> Result<Records, rustls::Error> {
    let unknown = || rustls::Error::General("an AEAD the record layer does not know".into());
    let framing = framing(kernel.protocol_version(), &secrets.tx.1).ok_or_else(unknown)?;
    let limit = match kernel.negotiated_cipher_suite() {
        SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
        SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
    };
    Ok(Records {
        sealer: Sealer {
            framing,
            keys: Keys::new(secrets.tx).ok_or_else(unknown)?,
        },
        opener: Opener {
            framing,
            keys: Keys::new(secrets.rx).ok_or_else(unknown)?,
        },
        kernel,
        limit,
        receiving: Receiving::Open,
        sending: Sending::Open,
        temper: Temper::default(),
    })
}

impl Records {
    /// Reads the whole records in `inbuf[*start..]`, moving `start` past
    /// them. Anything after the peer's close_notify fails the link (RFC
    /// 8446 6.1 would ignore it; a client that goes on sending after its
    /// close is broken or hostile, and nothing it sends can be acted on).
    fn receive(
        &mut self,
        inbuf: &mut [u8],
        start: &mut usize,
        out: &mut Vec<u8>,
        plain: &mut impl FnMut(&[u8]),
    ) -> Result<Progress, Fatal> {
        while inbuf.len() > *start {
            if self.receiving == Receiving::PeerClosed {
                return Err(self.fail(
                    out,
                    AlertDescription::UnexpectedMessage,
                    "a record after close_notify",
                ));
            }
            let Some(header) = inbuf.get(*start..*start + HEADER_LEN) else {
                break;
            };
            let len = self
                .opener
                .check_header(header)
                .map_err(|(a, why)| self.fail(out, a, why))?;
            let end = *start + HEADER_LEN + len;
            let Some(rec) = inbuf.get_mut(*start..end) else {
                break;
            };
            *start = end;
            let (typ, range) = self
                .opener
                .open(rec)
                .map_err(|(a, why)| self.fail(out, a, why))?;
            self.dispatch(typ, &rec[range], out, plain)?;
        }
        Ok(match self.receiving {
            Receiving::Open => Progress::Open,
            Receiving::PeerClosed => Progress::PeerClosed,
        })
    }

    /// Acts on one record's plaintext.
    fn dispatch(
        &mut self,
        typ: u8,
        data: &[u8],
        out: &mut Vec<u8>,
        plain: &mut impl FnMut(&[u8]),
    ) -> Result<(), Fatal> {
        match typ {
            CT_APPLICATION_DATA => {
                self.temper.key_updates_without_data = 0;
                if !data.is_empty() {
                    plain(data);
                }
                Ok(())
            }
            CT_ALERT => self.alert(data, out),
            CT_HANDSHAKE => self.handshake(data, out),
            _ => Err(self.fail(
                out,
                AlertDescription::UnexpectedMessage,
                "a record of a content type not allowed after the handshake",
            )),
        }
    }

    /// An alert from the peer: close_notify ends its side; a warning is
    /// ignored (a few); anything else is the end (in TLS 1.3 every alert
    /// but close_notify and user_canceled is fatal, RFC 8446 6).
    fn alert(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), Fatal> {
        let &[level, desc] = data else {
            return Err(self.fail(out, AlertDescription::DecodeError, "a malformed alert"));
        };
        let desc = AlertDescription::from(desc);
        if !matches!(level, ALERT_WARNING | ALERT_FATAL) {
            return Err(self.fail(out, AlertDescription::IllegalParameter, "an alert level"));
        }
        if desc == AlertDescription::CloseNotify {
            self.receiving = Receiving::PeerClosed;
            return Ok(());
        }
        let warning = level == ALERT_WARNING
            && (desc == AlertDescription::UserCanceled || self.opener.framing != Framing::Tls13);
        if !warning {
            self.sending = Sending::Closed;
            return Err(Fatal::PeerAlert(desc));
        }
        self.temper.warning_alerts += 1;
        if self.temper.warning_alerts > MAX_WARNING_ALERTS {
            return Err(self.fail(
                out,
                AlertDescription::UnexpectedMessage,
                "too many warning alerts",
            ));
        }
        Ok(())
    }

    /// Handshake messages after the handshake: a TLS 1.3 KeyUpdate, or a
    /// TLS 1.2 renegotiation (refused). Each must be whole in its record
    /// (this layer does not join fragments: nobody splits a 5-byte
    /// KeyUpdate, and a ClientHello is refused whole or not).
    fn handshake(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> Result<(), Fatal> {
        if data.is_empty() {
            return Err(self.fail(
                out,
                AlertDescription::DecodeError,
                "an empty handshake record",
            ));
        }
        while let [typ, a, b, c, rest @ ..] = data {
            let len = u32::from_be_bytes([0, *a, *b, *c]) as usize;
            let Some((body, after)) = rest.split_at_checked(len) else {
                break;
            };
            data = after;
            match (self.opener.framing, *typ) {
                (Framing::Tls13, HS_KEY_UPDATE) if data.is_empty() => self.key_update(body, out)?,
                (Framing::Tls13, HS_KEY_UPDATE) => {
                    return Err(self.fail(
                        out,
                        AlertDescription::UnexpectedMessage,
                        "a KeyUpdate not at the end of its record",
                    ))
                }
                (Framing::Tls12Gcm | Framing::Tls12Chacha, HS_CLIENT_HELLO) => {
                    self.renegotiation(out)?
                }
                _ => {
                    return Err(self.fail(
                        out,
                        AlertDescription::UnexpectedMessage,
                        "a handshake message after the handshake",
                    ))
                }
            }
        }
        if !data.is_empty() {
            return Err(self.fail(
                out,
                AlertDescription::UnexpectedMessage,
                "a handshake message split across records",
            ));
        }
        Ok(())
    }

    /// The peer's TLS 1.3 KeyUpdate: its next records come under a new
    /// key; if it asks, ours go under a new one too, after a KeyUpdate of
    /// ours sent under the old one (RFC 8446 4.6.3).
    fn key_update(&mut self, body: &[u8], out: &mut Vec<u8>) -> Result<(), Fatal> {
        let requested = match body {
            [0] => false,
            [1] => true,
            [_] => {
                return Err(self.fail(
                    out,
                    AlertDescription::IllegalParameter,
                    "a KeyUpdate request",
                ))
            }
            _ => {
                return Err(self.fail(out, AlertDescription::DecodeError, "a malformed KeyUpdate"))
            }
        };
        self.temper.key_updates_without_data += 1;
        if self.temper.key_updates_without_data > MAX_KEY_UPDATES_WITHOUT_DATA {
            return Err(self.fail(
                out,
                AlertDescription::UnexpectedMessage,
                "too many KeyUpdates without data",
            ));
        }
        let keys = self.kernel.update_rx_secret().ok().and_then(Keys::new);
        let Some(keys) = keys else {
            return Err(self.fail(out, AlertDescription::InternalError, "no next receive key"));
        };
        self.opener.keys = keys;
        if requested && self.sending == Sending::Open {
            self.update_tx(out)?;
        }
        Ok(())
    }

    /// Sends our KeyUpdate (not asking for the peer's) and moves to the
    /// next sending key.
    fn update_tx(&mut self, out: &mut Vec<u8>) -> Result<(), Fatal> {
        const KEY_UPDATE_NOT_REQUESTED: [u8; 5] = [HS_KEY_UPDATE, 0, 0, 1, 0];
        self.sealer
            .seal_into(CT_HANDSHAKE, out, &KEY_UPDATE_NOT_REQUESTED)?;
        let keys = self.kernel.update_tx_secret().ok().and_then(Keys::new);
        let Some(keys) = keys else {
            return Err(self.fail(out, AlertDescription::InternalError, "no next send key"));
        };
        self.sealer.keys = keys;
        Ok(())
    }

    /// A TLS 1.2 ClientHello after the handshake: the first is answered
    /// with a `no_renegotiation` warning and ignored, as rustls does (the
    /// client may carry on with the session it has); the next is fatal.
    fn renegotiation(&mut self, out: &mut Vec<u8>) -> Result<(), Fatal> {
        self.temper.renegotiation_requests += 1;
        if self.temper.renegotiation_requests > MAX_RENEGOTIATION_REQUESTS {
            return Err(self.fail(
                out,
                AlertDescription::UnexpectedMessage,
                "renegotiation asked for again",
            ));
        }
        let alert = [ALERT_WARNING, u8::from(AlertDescription::NoRenegotiation)];
        self.send(CT_ALERT, out, &alert)
    }

    /// Appends a record of ours to `out`, if our side is still open.
    fn send(&mut self, typ: u8, out: &mut Vec<u8>, data: &[u8]) -> Result<(), Fatal> {
        match self.sending {
            Sending::Open => self.sealer.seal_into(typ, out, data),
            Sending::Closed => Err(Fatal::NotOpen),
        }
    }

    /// Ends the link from our side: the fatal `alert`, if we can still
    /// send, and the error to return.
    fn fail(&mut self, out: &mut Vec<u8>, alert: AlertDescription, why: &'static str) -> Fatal {
        let _ = self.send(CT_ALERT, out, &[ALERT_FATAL, u8::from(alert)]);
        self.sending = Sending::Closed;
        Fatal::Alert { alert, why }
    }

    /// The sequence number from which the sending key is worn out enough
    /// to replace (TLS 1.3) or to stop (TLS 1.2).
    fn soft_limit(&self) -> u64 {
        self.limit - KEY_UPDATE_MARGIN.min(self.limit / 2)
    }

    fn rekey_if_due(&mut self, out: &mut Vec<u8>) -> Result<(), Fatal> {
        if self.sending == Sending::Closed {
            return Err(Fatal::NotOpen);
        }
        if self.sealer.keys.seq < self.soft_limit() {
            return Ok(());
        }
        match self.sealer.framing {
            Framing::Tls13 => self.update_tx(out),
            Framing::Tls12Gcm | Framing::Tls12Chacha => {
                self.close_notify(out);
                Err(Fatal::KeysWornOut)
            }
        }
    }

    fn seal_in_place(&mut self, rec: &mut [u8], len: usize) -> Result<usize, Fatal> {
        if self.sending == Sending::Closed {
            return Err(Fatal::NotOpen);
        }
        if len > MAX_PLAINTEXT {
            return Err(Fatal::Misuse("more than MAX_PLAINTEXT in one record"));
        }
        if self.sealer.keys.seq >= self.limit {
            return Err(Fatal::KeysWornOut);
        }
        self.sealer.seal(CT_APPLICATION_DATA, rec, len)
    }

    fn seal_into(&mut self, out: &mut Vec<u8>, plain: &[u8]) -> Result<(), Fatal> {
        for chunk in plain.chunks(MAX_PLAINTEXT) {
            self.rekey_if_due(out)?;
            self.send(CT_APPLICATION_DATA, out, chunk)?;
        }
        Ok(())
    }

    fn close_notify(&mut self, out: &mut Vec<u8>) {
        let close_notify = [ALERT_WARNING, u8::from(AlertDescription::CloseNotify)];
        let _ = self.send(CT_ALERT, out, &close_notify);
        self.sending = Sending::Closed;
    }
}

/// Where the handshake stands after the input so far.
enum Driven {
    NeedInput,
    /// Complete, every handshake record encoded: take over.
    Complete,
    PeerClosed,
}

/// What to do after one of rustls's states.
enum Step {
    Again,
    Stop(Driven),
    /// `WriteTraffic`: complete, unless rustls only allows 0.5-RTT data.
    MayWrite,
}

/// Appends one of rustls's handshake records to `out` (it has encrypted
/// it already, if that was due).
fn encode(
    enc: &mut EncodeTlsData<'_, ServerConnectionData>,
    out: &mut Vec<u8>,
) -> Result<(), rustls::Error> {
    let need = match enc.encode(&mut []) {
        Ok(_) => return Ok(()),
        Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => {
            required_size
        }
        Err(e) => return Err(rustls::Error::General(format!("handshake record: {e}"))),
    };
    let at = out.len();
    out.resize(at + need, 0);
    let n = enc
        .encode(&mut out[at..])
        .map_err(|e| rustls::Error::General(format!("handshake record: {e}")))?;
    out.truncate(at + n);
    Ok(())
}

/// Runs the handshake over `inbuf[*start..]` as far as it goes, moving
/// `start` past what rustls consumed. Application data that rustls
/// decrypted itself (records in the same flight as the client's Finished)
/// goes to `plain`.
fn drive(
    conn: &mut UnbufferedServerConnection,
    inbuf: &mut [u8],
    start: &mut usize,
    out: &mut Vec<u8>,
    plain: &mut impl FnMut(&[u8]),
) -> Result<Driven, rustls::Error> {
    loop {
        let status = conn.process_tls_records(&mut inbuf[*start..]);
        let mut discard = status.discard;
        let step = match status.state? {
            ConnectionState::EncodeTlsData(mut enc) => {
                encode(&mut enc, out).map(|_| Step::Again)?
            }
            // The caller sends `out`, in order, after this call.
            ConnectionState::TransmitTlsData(tx) => {
                tx.done();
                Step::Again
            }
            ConnectionState::BlockedHandshake => Step::Stop(Driven::NeedInput),
            ConnectionState::WriteTraffic(_) => Step::MayWrite,
            ConnectionState::ReadTraffic(mut rd) => {
                while let Some(rec) = rd.next_record() {
                    let rec = rec?;
                    discard += rec.discard;
                    plain(rec.payload);
                }
                Step::Again
            }
            ConnectionState::PeerClosed | ConnectionState::Closed => Step::Stop(Driven::PeerClosed),
            // Early data is off in spindle's configuration (it could be
            // replayed); rustls would not offer it.
            ConnectionState::ReadEarlyData(_) => {
                return Err(rustls::Error::General("early data".into()))
            }
            _ => return Err(rustls::Error::General("an unknown rustls state".into())),
        };
        *start += discard;
        match step {
            Step::Again => {}
            Step::Stop(driven) => return Ok(driven),
            Step::MayWrite if conn.is_handshaking() => return Ok(Driven::NeedInput),
            Step::MayWrite => return Ok(Driven::Complete),
        }
    }
}

/// After rustls failed the handshake: the alert it queued, into `out`.
/// Only while rustls has records queued: those come before it looks at
/// the input (which it must not, here: its deframer keeps positions in the
/// caller's buffer, and an empty one makes it panic).
fn flush_alert(conn: &mut UnbufferedServerConnection, out: &mut Vec<u8>) {
    for _ in 0..MAX_ALERT_FLUSH {
        if !conn.wants_write() {
            return;
        }
        let status = conn.process_tls_records(&mut []);
        match status.state {
            Ok(ConnectionState::EncodeTlsData(mut enc)) => {
                if encode(&mut enc, out).is_err() {
                    return;
                }
            }
            _ => return,
        }
    }
}

/// A link's state.
enum State {
    /// rustls runs the handshake.
    Handshaking(Box<UnbufferedServerConnection>),
    /// Our record layer runs the link.
    Open(Box<Records>),
    /// Ended: a fatal error, or the peer closed during the handshake.
    Closed,
}

/// One HTTPS connection's TLS: rustls's handshake, then our records.
pub struct TlsLink {
    state: State,
    /// The protocol ALPN chose, kept at the takeover (the kernel
    /// connection does not keep it).
    alpn: Option<Vec<u8>>,
}

impl TlsLink {
    /// A link for a new connection. `cfg` must allow secret extraction
    /// (build it with [`record_config`]).
    pub fn new(cfg: &Arc<ServerConfig>) -> Result<TlsLink, rustls::Error> {
        if !cfg.enable_secret_extraction {
            return Err(rustls::Error::General(
                "the record layer needs enable_secret_extraction (tlsrec::record_config)".into(),
            ));
        }
        Ok(TlsLink {
            state: State::Handshaking(Box::new(UnbufferedServerConnection::new(cfg.clone())?)),
            alpn: None,
        })
    }

    /// Ciphertext received: the caller appended it to `inbuf`; the bytes
    /// used are removed from its front (an incomplete record stays).
    /// Handshake records put records to send in `out`; after the
    /// handshake, application data is decrypted in place in `inbuf` and
    /// handed to `plain`, record by record. On `Err`, the alert to send (if
    /// any) is in `out`, and the link is closed.
    pub fn receive(
        &mut self,
        inbuf: &mut Vec<u8>,
        out: &mut Vec<u8>,
        mut plain: impl FnMut(&[u8]),
    ) -> Result<Progress, Fatal> {
        let mut start = 0;
        let got = self.receive_from(inbuf, &mut start, out, &mut plain);
        inbuf.drain(..start);
        let got = match got {
            Ok(_) if inbuf.len() > MAX_INBUF_BYTES => Err(Fatal::Overflow),
            got => got,
        };
        if got.is_err() {
            self.state = State::Closed;
        }
        got
    }

    fn receive_from(
        &mut self,
        inbuf: &mut [u8],
        start: &mut usize,
        out: &mut Vec<u8>,
        plain: &mut impl FnMut(&[u8]),
    ) -> Result<Progress, Fatal> {
        let mut progress = Progress::Open;
        if let State::Handshaking(conn) = &mut self.state {
            match drive(conn, inbuf, start, out, plain) {
                Ok(Driven::NeedInput) => return Ok(Progress::Handshaking),
                // close_notify in the client's last flight, after its
                // request: the handshake is complete, and the answer can
                // still go (a half-close).
                Ok(Driven::PeerClosed) if !conn.is_handshaking() => {
                    self.take_over()?;
                    if let State::Open(records) = &mut self.state {
                        records.receiving = Receiving::PeerClosed;
                    }
                    return Ok(Progress::PeerClosed);
                }
                Ok(Driven::PeerClosed) => {
                    self.state = State::Closed;
                    return Ok(Progress::PeerClosed);
                }
                Ok(Driven::Complete) => self.take_over()?,
                Err(e) => {
                    flush_alert(conn, out);
                    return Err(Fatal::Handshake(e));
                }
            }
            progress = Progress::Established;
        }
        match &mut self.state {
            State::Open(records) => match records.receive(inbuf, start, out, plain)? {
                Progress::Open => Ok(progress),
                other => Ok(other),
            },
            State::Handshaking(_) | State::Closed => Err(Fatal::NotOpen),
        }
    }

    /// The handshake is complete: rustls hands over the keys.
    fn take_over(&mut self) -> Result<(), Fatal> {
        let State::Handshaking(conn) = std::mem::replace(&mut self.state, State::Closed) else {
            return Err(Fatal::NotOpen);
        };
        self.alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
        let (secrets, kernel) = conn
            .dangerous_into_kernel_connection()
            .map_err(Fatal::Handshake)?;
        self.state = State::Open(Box::new(
            records(secrets, kernel).map_err(Fatal::Handshake)?,
        ));
        Ok(())
    }

    pub fn is_handshaking(&self) -> bool {
        matches!(self.state, State::Handshaking(_))
    }

    /// Whether records can be sealed (the handshake is over and neither a
    /// fatal error nor our close_notify has ended the link).
    pub fn is_open(&self) -> bool {
        matches!(&self.state, State::Open(r) if r.sending == Sending::Open)
    }

    /// The protocol ALPN chose (`h2`, `http/1.1`, ...), once known.
    pub fn alpn(&self) -> Option<&[u8]> {
        match &self.state {
            State::Handshaking(conn) => conn.alpn_protocol(),
            State::Open(_) | State::Closed => self.alpn.as_deref(),
        }
    }

    /// The protocol version, after the handshake.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        match &self.state {
            State::Open(r) => Some(r.kernel.protocol_version()),
            State::Handshaking(_) | State::Closed => None,
        }
    }

    /// The cipher suite, after the handshake.
    pub fn cipher_suite(&self) -> Option<rustls::CipherSuite> {
        match &self.state {
            State::Open(r) => Some(r.kernel.negotiated_cipher_suite().suite()),
            State::Handshaking(_) | State::Closed => None,
        }
    }

    fn framing(&self) -> Option<Framing> {
        match &self.state {
            State::Open(r) => Some(r.sealer.framing),
            State::Handshaking(_) | State::Closed => None,
        }
    }

    /// Room a record needs before its plaintext: 5, or 13 for TLS 1.2
    /// AES-GCM's explicit nonce ([`MAX_HEADER_ROOM`] before the handshake
    /// is over).
    pub fn header_room(&self) -> usize {
        self.framing().map_or(MAX_HEADER_ROOM, Framing::header_room)
    }

    /// Room a record needs after its plaintext: 17 for TLS 1.3 (content
    /// type and tag), 16 for TLS 1.2 ([`MAX_TAIL_ROOM`] before the
    /// handshake is over).
    pub fn tail_room(&self) -> usize {
        self.framing().map_or(MAX_TAIL_ROOM, Framing::tail_room)
    }

    /// The zero-copy path: `rec` holds [`header_room`](Self::header_room)
    /// bytes of room, then `len` plaintext bytes, then
    /// [`tail_room`](Self::tail_room) bytes of room (more is ignored);
    /// writes the record's header, encrypts the plaintext in place and
    /// returns the record's length (`header_room + len + tail_room`).
    /// `len` is at most [`MAX_PLAINTEXT`]. Call
    /// [`rekey_if_due`](Self::rekey_if_due) before each batch.
    pub fn seal_in_place(&mut self, rec: &mut [u8], len: usize) -> Result<usize, Fatal> {
        match &mut self.state {
            State::Open(r) => r.seal_in_place(rec, len),
            State::Handshaking(_) | State::Closed => Err(Fatal::NotOpen),
        }
    }

    /// The copying path, for small things (response heads, HTTP/2
    /// control frames): appends records of `plain` to `out`, split at
    /// [`MAX_PLAINTEXT`] (one copy into `out`, then encryption in place).
    /// Updates the sending key first when it is due.
    pub fn seal_into(&mut self, out: &mut Vec<u8>, plain: &[u8]) -> Result<(), Fatal> {
        match &mut self.state {
            State::Open(r) => r.seal_into(out, plain),
            State::Handshaking(_) | State::Closed => Err(Fatal::NotOpen),
        }
    }

    /// When the sending key nears its suite's confidentiality limit
    /// (within [`KEY_UPDATE_MARGIN`] records): on TLS 1.3, appends a
    /// KeyUpdate to `out` and moves to the next key; on TLS 1.2, appends
    /// close_notify and returns [`Fatal::KeysWornOut`]. Records sealed in
    /// place after this call must go out after `out`. A loop calls it
    /// before each batch of [`seal_in_place`](Self::seal_in_place) (it
    /// costs a comparison).
    pub fn rekey_if_due(&mut self, out: &mut Vec<u8>) -> Result<(), Fatal> {
        match &mut self.state {
            State::Open(r) => r.rekey_if_due(out),
            State::Handshaking(_) | State::Closed => Err(Fatal::NotOpen),
        }
    }

    /// Appends close_notify to `out` and ends our sending side (nothing
    /// during the handshake: the caller just closes).
    pub fn close_notify(&mut self, out: &mut Vec<u8>) {
        if let State::Open(r) = &mut self.state {
            r.close_notify(out);
        }
    }
}

mod layout;
pub use layout::{record_slots, RecordLayout, RecordSlot, RecordSlots};

#[cfg(test)]
mod tests;
