//! QUIC's configuration from spindle's: TLS from the HTTPS certificates
//! (the same resolver, ACME's included, and the same tickets), the
//! transport's limits from [`super`]'s constants, and per worker an
//! endpoint issuing [`super::cid::WorkerCids`].

use std::sync::Arc;
use std::time::Duration;

use quinn_proto::crypto::rustls::QuicServerConfig;
use quinn_proto::{EndpointConfig, IdleTimeout, ServerConfig, TransportConfig, VarInt};

use super::cid::{WorkerCids, CID_LEN};
use super::*;

/// The TLS of QUIC connections, beside the HTTPS one it is built from:
/// TLS 1.3 alone (RFC 9001 §4.2), ALPN `h3` alone, no 0-RTT (early data
/// is replayable, and a static server gains a round trip at most), the
/// same certificate resolver (so SNI, reloads and ACME certificates hold
/// for HTTP/3 as for HTTPS) and the same session tickets.
pub fn quic_tls(https: &rustls::ServerConfig) -> Result<Arc<QuicServerConfig>, String> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("QUIC's TLS: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(https.cert_resolver.clone());
    cfg.alpn_protocols = vec![ALPN_H3.to_vec()];
    cfg.max_early_data_size = 0;
    cfg.ignore_client_order = true;
    cfg.session_storage = https.session_storage.clone();
    cfg.ticketer = https.ticketer.clone();
    let quic = QuicServerConfig::try_from(Arc::new(cfg))
        .map_err(|e| format!("QUIC's TLS: {e} (the provider lacks TLS13_AES_128_GCM_SHA256)"))?;
    Ok(Arc::new(quic))
}

/// The transport's limits, each one of [`super`]'s constants.
pub fn transport() -> TransportConfig {
    let mut t = TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(MAX_REQUEST_STREAMS))
        .max_concurrent_uni_streams(VarInt::from_u32(MAX_CLIENT_UNI_STREAMS))
        .max_idle_timeout(Some(
            IdleTimeout::try_from(IDLE_TIMEOUT).expect("an idle timeout QUIC can carry"),
        ))
        .stream_receive_window(VarInt::from_u32(STREAM_RECEIVE_WINDOW))
        .receive_window(VarInt::from_u32(CONNECTION_RECEIVE_WINDOW))
        .send_window(SEND_WINDOW)
        .datagram_receive_buffer_size(None)
        .enable_segmentation_offload(true);
    t
}

/// A server configuration for new connections: `tls` from [`quic_tls`],
/// Retry tokens sealed with `token_key` (one per process, so that any
/// worker can check another's).
pub fn server(tls: Arc<QuicServerConfig>, token_key: &[u8; 32]) -> Arc<ServerConfig> {
    let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(token_key);
    let mut s = ServerConfig::new(tls, Arc::new(prk));
    s.transport_config(Arc::new(transport()))
        .retry_token_lifetime(RETRY_TOKEN_LIFETIME)
        .max_incoming(MAX_HANDSHAKES)
        .incoming_buffer_size(INCOMING_BUFFER_BYTES)
        .incoming_buffer_size_total(INCOMING_BUFFER_BYTES_TOTAL);
    Arc::new(s)
}

/// The endpoint of worker `worker` (its socket's index in the group):
/// connection IDs naming it, stateless resets keyed by `reset_key` (one
/// per process, so that a reset from any worker is valid).
pub fn endpoint(worker: usize, generation: u8, reset_key: &[u8; 32]) -> EndpointConfig {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset_key);
    let mut e = EndpointConfig::new(Arc::new(key));
    e.cid_generator(move || Box::new(WorkerCids::new(worker, generation)))
        .min_reset_interval(Duration::from_millis(20));
    debug_assert_eq!(CID_LEN, 8);
    e
}
