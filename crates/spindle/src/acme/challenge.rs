//! Answers to the CA's challenges while an order runs: HTTP-01 tokens
//! (kept in `spindle_core::challenge::Http01Tokens`, read by sessions on
//! plain connections) and TLS-ALPN-01 certificates (RFC 8737), read by the
//! TLS certificate resolver (`tls.rs`) for a ClientHello that offers only
//! the ALPN protocol `acme-tls/1`.

use std::sync::{Arc, Mutex, OnceLock};

use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use super::der;

/// The ALPN protocol of TLS-ALPN-01 validation.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";
/// Most TLS-ALPN-01 certificates held at once (one per name validated).
pub const MAX_ALPN_CERTS: usize = 1024;

/// Which challenge an order answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// On the TLS listener: a certificate chosen by ALPN `acme-tls/1`.
    TlsAlpn01,
    /// On a plain listener: `/.well-known/acme-challenge/TOKEN`.
    Http01,
}

impl Kind {
    /// Its name in the ACME protocol.
    pub fn name(self) -> &'static str {
        match self {
            Kind::TlsAlpn01 => "tls-alpn-01",
            Kind::Http01 => "http-01",
        }
    }
}

/// TLS-ALPN-01 certificates by name.
#[derive(Debug, Default)]
pub struct TlsAlpnCerts {
    certs: Mutex<Vec<(String, Arc<CertifiedKey>)>>,
}

static TLS_ALPN: OnceLock<TlsAlpnCerts> = OnceLock::new();

/// Every TLS-ALPN-01 certificate of this process.
pub fn tls_alpn_certs() -> &'static TlsAlpnCerts {
    TLS_ALPN.get_or_init(Default::default)
}

impl TlsAlpnCerts {
    /// Makes and holds the certificate that answers `name`'s challenge
    /// with `key_authorization`, until [`remove`](TlsAlpnCerts::remove).
    pub fn insert(&self, name: &str, key_authorization: &str, now: i64) -> Result<(), String> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(|_| "cannot generate a TLS-ALPN-01 key")?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|_| "cannot read the TLS-ALPN-01 key")?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key_authorization.as_bytes());
        let mut serial = [0u8; 16];
        rng.fill(&mut serial).map_err(|_| "no random serial")?;
        let cert = der::tls_alpn_cert(
            name,
            digest.as_ref(),
            pair.public_key().as_ref(),
            serial,
            now,
            |tbs| {
                pair.sign(&rng, tbs)
                    .map(|s| s.as_ref().to_vec())
                    .map_err(|_| "cannot sign the TLS-ALPN-01 certificate".to_string())
            },
        )?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8.as_ref().to_vec()));
        let signing = crate::tls::provider()
            .key_provider
            .load_private_key(key)
            .map_err(|e| format!("TLS-ALPN-01 key: {e}"))?;
        let certified = Arc::new(CertifiedKey::new(vec![CertificateDer::from(cert)], signing));
        let mut certs = self.certs.lock().unwrap_or_else(|p| p.into_inner());
        certs.retain(|(n, _)| n != name);
        if certs.len() >= MAX_ALPN_CERTS {
            certs.remove(0);
        }
        certs.push((name.to_string(), certified));
        Ok(())
    }

    pub fn remove(&self, name: &str) {
        let mut certs = self.certs.lock().unwrap_or_else(|p| p.into_inner());
        certs.retain(|(n, _)| n != name);
    }

    /// The certificate for a validation handshake to `name`.
    pub fn get(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let certs = self.certs.lock().unwrap_or_else(|p| p.into_inner());
        certs
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, k)| k.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_per_name_until_removed() {
        let c = TlsAlpnCerts::default();
        c.insert("a.test", "tok.thumb", 1_795_739_700).unwrap();
        let k = c.get("A.test").expect("made");
        let info = der::cert_info(&k.cert[0]).unwrap();
        assert_eq!(info.names, vec!["a.test".to_string()]);
        // The key's public half is the certificate's (webpki's own check
        // refuses the critical acmeIdentifier, which only a CA reads).
        let spki = k.key.public_key().expect("an ECDSA key has one");
        let cert: &[u8] = k.cert[0].as_ref();
        assert!(cert.windows(spki.len()).any(|w| w == spki.as_ref()));
        c.remove("a.test");
        assert!(c.get("a.test").is_none());
    }
}
