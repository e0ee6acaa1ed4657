//! An ACME client (RFC 8555), blocking, for the ACME thread only: the
//! directory, nonces, JWS (ES256 over a P-256 account key), the account,
//! and one order from `newOrder` to the downloaded chain. Every request
//! has a deadline, every response a size cap, every poll a count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P256_SHA256_FIXED_SIGNING,
};
use serde_json::{json, Value};
use spindle_core::challenge::Http01Tokens;

use super::challenge::{Kind, TlsAlpnCerts};
use super::der;

/// Longest any one HTTP exchange with the CA may take.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response body read from the CA (a chain is a few KiB).
pub const MAX_RESPONSE_BYTES: u64 = 1 << 20;
/// `badNonce` answers retried for one request before it fails (RFC 8555
/// §6.5: the client should retry with the nonce the error carried).
pub const MAX_NONCE_RETRIES: u32 = 20;
/// Polls of one authorization or order before the attempt fails.
pub const MAX_POLLS: u32 = 120;
/// Time between polls, unless the CA asks for longer by `Retry-After`
/// (capped at [`MAX_POLL_WAIT`]).
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
pub const MAX_POLL_WAIT: Duration = Duration::from_secs(10);
/// Most authorizations one order may bring (one per name; Let's Encrypt
/// allows 100 names a certificate).
pub const MAX_AUTHORIZATIONS: usize = 100;

/// A key for JWS: the account key, ES256.
pub struct AccountKey {
    pair: EcdsaKeyPair,
    /// The public key as a JWK, members in lexical order (RFC 7638), so
    /// that it is also the thumbprint's input.
    jwk: String,
    thumbprint: String,
}

impl AccountKey {
    /// A new P-256 key, as PKCS#8 DER.
    pub fn generate() -> Result<Vec<u8>, String> {
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .map(|d| d.as_ref().to_vec())
            .map_err(|_| "cannot generate a P-256 key".to_string())
    }

    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<AccountKey, String> {
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8,
            &SystemRandom::new(),
        )
        .map_err(|e| format!("account key: not a P-256 PKCS#8 key ({e})"))?;
        let point = pair.public_key().as_ref();
        let (x, y) = (&point[1..33], &point[33..65]);
        let jwk = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            URL_SAFE_NO_PAD.encode(x),
            URL_SAFE_NO_PAD.encode(y)
        );
        let digest = ring::digest::digest(&ring::digest::SHA256, jwk.as_bytes());
        Ok(AccountKey {
            pair,
            thumbprint: URL_SAFE_NO_PAD.encode(digest.as_ref()),
            jwk,
        })
    }

    /// A challenge's key authorization (RFC 8555 §8.1).
    pub fn key_authorization(&self, token: &str) -> String {
        format!("{token}.{}", self.thumbprint)
    }

    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        self.pair
            .sign(&SystemRandom::new(), msg)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| "ECDSA signing failed".to_string())
    }
}

/// The URLs of a CA's directory that the client uses.
struct Directory {
    new_nonce: String,
    new_account: String,
    new_order: String,
}

/// An answer from the CA.
struct Reply {
    location: Option<String>,
    retry_after: Option<Duration>,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Result<Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("CA sent bad JSON: {e}"))
    }
}

/// What an order needs of the server: where each kind of answer goes
/// (`None`: no listener for it), and the kind to try first.
pub struct Challenges<'a> {
    pub http01: Option<&'a Http01Tokens>,
    pub tls_alpn01: Option<&'a TlsAlpnCerts>,
    pub prefer: Kind,
}

impl Challenges<'_> {
    /// The kinds this server can answer, preferred first.
    fn kinds(&self) -> impl Iterator<Item = Kind> + '_ {
        let other = match self.prefer {
            Kind::TlsAlpn01 => Kind::Http01,
            Kind::Http01 => Kind::TlsAlpn01,
        };
        [self.prefer, other].into_iter().filter(|k| match k {
            Kind::Http01 => self.http01.is_some(),
            Kind::TlsAlpn01 => self.tls_alpn01.is_some(),
        })
    }
}

/// An issued certificate: the chain and its key, both PEM, and the
/// challenge that was answered (the last, if the order had several).
pub struct Issued {
    pub chain_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub by: Option<Kind>,
}

/// Takes an answer down when the attempt that put it up ends.
struct Unpublish<'a> {
    ch: &'a Challenges<'a>,
    kind: Kind,
    token: &'a str,
    name: &'a str,
}

impl Drop for Unpublish<'_> {
    fn drop(&mut self) {
        match self.kind {
            Kind::Http01 => {
                if let Some(t) = self.ch.http01 {
                    t.remove(self.token)
                }
            }
            Kind::TlsAlpn01 => {
                if let Some(c) = self.ch.tls_alpn01 {
                    c.remove(self.name)
                }
            }
        }
    }
}

/// A client of one CA directory, with one account.
pub struct Client {
    agent: ureq::Agent,
    directory_url: String,
    dir: Option<Directory>,
    key: AccountKey,
    /// The account's URL (the JWS `kid`), once registered or found.
    kid: Option<String>,
    nonce: Option<String>,
}

impl Client {
    /// `roots`: the certificates trusted for the directory's TLS (DER).
    pub fn new(
        directory_url: &str,
        roots: Vec<Vec<u8>>,
        key: AccountKey,
        kid: Option<String>,
    ) -> Client {
        let roots = roots
            .iter()
            .map(|d| ureq::tls::Certificate::from_der(d).to_owned())
            .collect();
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
            .unversioned_rustls_crypto_provider(crate::tls::provider())
            .build();
        let agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_global(Some(HTTP_TIMEOUT))
            .http_status_as_error(false)
            .user_agent(concat!("spindle/", env!("CARGO_PKG_VERSION"), " (ACME)"))
            .build()
            .into();
        Client {
            agent,
            directory_url: directory_url.to_string(),
            dir: None,
            key,
            kid,
            nonce: None,
        }
    }

    /// Forgets the directory and the nonce (kept: the key and account).
    pub fn forget_session(&mut self) {
        self.dir = None;
        self.nonce = None;
    }

    pub fn account_url(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    fn directory(&mut self) -> Result<&Directory, String> {
        if self.dir.is_none() {
            let mut resp = self
                .agent
                .get(&self.directory_url)
                .call()
                .map_err(|e| format!("directory {}: {e}", self.directory_url))?;
            if !resp.status().is_success() {
                return Err(format!(
                    "directory {}: HTTP {}",
                    self.directory_url,
                    resp.status()
                ));
            }
            let body = read_body(resp.body_mut())?;
            let v: Value = serde_json::from_slice(&body)
                .map_err(|e| format!("directory {}: {e}", self.directory_url))?;
            let url = |k: &str| {
                v[k].as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("directory {} has no {k}", self.directory_url))
            };
            self.dir = Some(Directory {
                new_nonce: url("newNonce")?,
                new_account: url("newAccount")?,
                new_order: url("newOrder")?,
            });
        }
        Ok(self.dir.as_ref().expect("just set"))
    }

    fn fresh_nonce(&mut self) -> Result<String, String> {
        if let Some(n) = self.nonce.take() {
            return Ok(n);
        }
        let url = self.directory()?.new_nonce.clone();
        let resp = self
            .agent
            .head(&url)
            .call()
            .map_err(|e| format!("newNonce: {e}"))?;
        header(&resp, "replay-nonce").ok_or_else(|| "newNonce: no Replay-Nonce".to_string())
    }

    /// A JWS-signed POST; `payload` `None` is POST-as-GET. A `badNonce`
    /// is retried with a fresh nonce; any other error status is `Err`,
    /// with the CA's problem detail.
    fn post(&mut self, url: &str, payload: Option<&Value>) -> Result<Reply, String> {
        let payload = match payload {
            Some(v) => URL_SAFE_NO_PAD.encode(v.to_string()),
            None => String::new(),
        };
        for _ in 0..=MAX_NONCE_RETRIES {
            let nonce = self.fresh_nonce()?;
            let mut protected = json!({"alg": "ES256", "nonce": nonce, "url": url});
            match &self.kid {
                Some(kid) => protected["kid"] = json!(kid),
                None => {
                    protected["jwk"] = serde_json::from_str(&self.key.jwk).expect("JWK is JSON")
                }
            }
            let protected = URL_SAFE_NO_PAD.encode(protected.to_string());
            let sig = self.key.sign(format!("{protected}.{payload}").as_bytes())?;
            let body = json!({
                "protected": protected,
                "payload": payload,
                "signature": URL_SAFE_NO_PAD.encode(sig),
            })
            .to_string();
            let mut resp = self
                .agent
                .post(url)
                .header("Content-Type", "application/jose+json")
                .send(body.as_bytes())
                .map_err(|e| format!("POST {url}: {e}"))?;
            self.nonce = header(&resp, "replay-nonce");
            let status = resp.status();
            let reply = Reply {
                location: header(&resp, "location"),
                retry_after: header(&resp, "retry-after")
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .map(|s| Duration::from_secs(s).min(MAX_POLL_WAIT)),
                body: read_body(resp.body_mut())?,
            };
            if status.is_success() {
                return Ok(reply);
            }
            let problem = reply.json().unwrap_or(Value::Null);
            let kind = problem["type"].as_str().unwrap_or("");
            if kind == "urn:ietf:params:acme:error:badNonce" {
                continue;
            }
            if kind == "urn:ietf:params:acme:error:accountDoesNotExist" {
                // The CA forgot the account (a test CA restarted): the
                // next attempt registers the key again.
                self.kid = None;
            }
            return Err(format!(
                "POST {url}: HTTP {status} {kind} {}",
                problem["detail"].as_str().unwrap_or("")
            ));
        }
        Err(format!(
            "POST {url}: {MAX_NONCE_RETRIES} nonces in a row refused (badNonce)"
        ))
    }

    /// Registers the account, or finds it by its key (a 200 for a key
    /// already known); afterwards [`account_url`](Client::account_url).
    pub fn ensure_account(&mut self, email: Option<&str>) -> Result<(), String> {
        if self.kid.is_some() {
            return Ok(());
        }
        let url = self.directory()?.new_account.clone();
        let mut req = json!({"termsOfServiceAgreed": true});
        if let Some(e) = email {
            req["contact"] = json!([format!("mailto:{e}")]);
        }
        let reply = self.post(&url, Some(&req))?;
        self.kid = Some(
            reply
                .location
                .ok_or("newAccount: no Location for the account")?,
        );
        Ok(())
    }

    /// Orders a certificate for `names` and returns it with its new key:
    /// every authorization answered by HTTP-01, then the CSR, then the
    /// chain.
    pub fn order(&mut self, names: &[String], ch: &Challenges) -> Result<Issued, String> {
        let url = self.directory()?.new_order.clone();
        let ids: Vec<Value> = names
            .iter()
            .map(|n| json!({"type": "dns", "value": n}))
            .collect();
        let reply = self.post(&url, Some(&json!({ "identifiers": ids })))?;
        let order_url = reply.location.clone().ok_or("newOrder: no Location")?;
        let order = reply.json()?;
        let authzs: Vec<String> = order["authorizations"]
            .as_array()
            .ok_or("newOrder: no authorizations")?
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
        if authzs.len() > MAX_AUTHORIZATIONS {
            return Err(format!("newOrder: {} authorizations", authzs.len()));
        }
        let finalize = order["finalize"]
            .as_str()
            .ok_or("newOrder: no finalize URL")?
            .to_string();
        let mut by = None;
        for a in &authzs {
            by = self.authorize(a, ch)?.or(by);
        }
        // The certificate's key, and the request for it.
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(|_| "cannot generate a certificate key")?;
        let cert_key =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
                .map_err(|_| "cannot read the new certificate key")?;
        let csr = der::csr(names, cert_key.public_key().as_ref(), |info| {
            cert_key
                .sign(&rng, info)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| "cannot sign the certificate request".to_string())
        })?;
        let mut order = self
            .post(
                &finalize,
                Some(&json!({"csr": URL_SAFE_NO_PAD.encode(&csr)})),
            )?
            .json()?;
        let mut polls = 0;
        while order["status"] != "valid" {
            match order["status"].as_str() {
                Some("processing") | Some("ready") | Some("pending") => {}
                s => {
                    return Err(format!(
                        "order for {}: {} {}",
                        names.join(","),
                        s.unwrap_or("(no status)"),
                        order["error"]
                    ))
                }
            }
            polls += 1;
            if polls > MAX_POLLS {
                return Err(format!("order for {}: still processing", names.join(",")));
            }
            std::thread::sleep(POLL_INTERVAL);
            let r = self.post(&order_url, None)?;
            order = r.json()?;
        }
        let cert_url = order["certificate"]
            .as_str()
            .ok_or("order is valid but names no certificate")?
            .to_string();
        let chain_pem = self.post(&cert_url, None)?.body;
        if !chain_pem.starts_with(b"-----BEGIN CERTIFICATE-----") {
            return Err("the CA's certificate is not PEM".into());
        }
        Ok(Issued {
            chain_pem,
            key_pem: pem("PRIVATE KEY", pkcs8.as_ref()),
            by,
        })
    }

    /// Answers one authorization (unless it is valid already) and waits
    /// for the CA's verdict; the kind of challenge answered.
    fn authorize(&mut self, url: &str, ch: &Challenges) -> Result<Option<Kind>, String> {
        let authz = self.post(url, None)?.json()?;
        let name = authz["identifier"]["value"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        if authz["status"] == "valid" {
            return Ok(None);
        }
        let offered = authz["challenges"].as_array().cloned().unwrap_or_default();
        let (kind, challenge) = ch
            .kinds()
            .find_map(|k| {
                offered
                    .iter()
                    .find(|c| c["type"] == k.name())
                    .map(|c| (k, c))
            })
            .ok_or_else(|| {
                format!("{name}: the CA offers no challenge this server can answer (tls-alpn-01 on --tls-listen, http-01 on --listen)")
            })?;
        let token = challenge["token"]
            .as_str()
            .ok_or_else(|| format!("{name}: challenge without a token"))?
            .to_string();
        let challenge_url = challenge["url"]
            .as_str()
            .ok_or_else(|| format!("{name}: challenge without a URL"))?
            .to_string();
        let key_authorization = self.key.key_authorization(&token);
        match kind {
            Kind::Http01 => ch
                .http01
                .expect("kinds() offers it")
                .insert(&token, &key_authorization)?,
            Kind::TlsAlpn01 => ch.tls_alpn01.expect("kinds() offers it").insert(
                &name,
                &key_authorization,
                super::now(),
            )?,
        }
        // The answer goes when this attempt does, whatever its end.
        let _unpublish = Unpublish {
            ch,
            kind,
            token: &token,
            name: &name,
        };
        self.post(&challenge_url, Some(&json!({})))?;
        let started = Instant::now();
        for _ in 0..MAX_POLLS {
            let reply = self.post(url, None)?;
            let authz = reply.json()?;
            match authz["status"].as_str() {
                Some("valid") => return Ok(Some(kind)),
                Some("pending") | Some("processing") => {}
                s => {
                    let why = authz["challenges"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find_map(|c| c["error"]["detail"].as_str())
                        .unwrap_or("");
                    return Err(format!(
                        "{name}: authorization {} by {} {why}",
                        s.unwrap_or("(no status)"),
                        kind.name()
                    ));
                }
            }
            std::thread::sleep(reply.retry_after.unwrap_or(POLL_INTERVAL));
        }
        Err(format!(
            "{name}: authorization still pending after {:.0?}",
            started.elapsed()
        ))
    }
}

fn header(resp: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn read_body(body: &mut ureq::Body) -> Result<Vec<u8>, String> {
    body.with_config()
        .limit(MAX_RESPONSE_BYTES)
        .read_to_vec()
        .map_err(|e| format!("reading the CA's answer: {e}"))
}

/// DER as PEM, 64 columns.
pub fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwk_and_thumbprint_follow_rfc7638() {
        let key = AccountKey::from_pkcs8(&AccountKey::generate().unwrap()).unwrap();
        assert!(key.jwk.starts_with(r#"{"crv":"P-256","kty":"EC","x":""#));
        assert_eq!(key.thumbprint.len(), 43);
        assert!(key.key_authorization("tok").starts_with("tok."));
        let sig = key.sign(b"x").unwrap();
        assert_eq!(sig.len(), 64, "ES256 is r||s, 32 bytes each");
    }

    #[test]
    fn pem_wraps() {
        let p = String::from_utf8(pem("X", &[0u8; 100])).unwrap();
        assert!(p.starts_with("-----BEGIN X-----\n") && p.ends_with("-----END X-----\n"));
        assert!(p.lines().all(|l| l.len() <= 64));
    }
}
