//! ACME HTTP-01 answers (RFC 8555 §8.3), kept in memory: the server's ACME
//! client puts a token's key authorization here while the CA checks it, and
//! a session on a plain connection answers
//! `GET /.well-known/acme-challenge/TOKEN` from it, never from the document
//! root. No I/O: a read of a short list under a lock that the writer holds
//! only to push or remove one entry.

use std::sync::RwLock;

/// Most tokens held at once (one per name being validated).
pub const MAX_TOKENS: usize = 1024;
/// Longest token accepted (RFC 8555 asks for at least 128 bits of
/// base64url; CAs send 43 characters).
pub const MAX_TOKEN_LEN: usize = 256;

/// The HTTP-01 tokens being validated, and their key authorizations.
#[derive(Debug, Default)]
pub struct Http01Tokens {
    tokens: RwLock<Vec<(String, String)>>,
}

impl Http01Tokens {
    /// Answers `token` with `key_authorization` until [`remove`] (the
    /// oldest goes beyond [`MAX_TOKENS`]). A token of bytes other than
    /// base64url's, or too long, is refused.
    ///
    /// [`remove`]: Http01Tokens::remove
    pub fn insert(&self, token: &str, key_authorization: &str) -> Result<(), String> {
        if token.is_empty()
            || token.len() > MAX_TOKEN_LEN
            || !token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("ACME token {token:?} is not base64url"));
        }
        let mut t = self.tokens.write().unwrap_or_else(|p| p.into_inner());
        t.retain(|(k, _)| k != token);
        if t.len() >= MAX_TOKENS {
            t.remove(0);
        }
        t.push((token.to_string(), key_authorization.to_string()));
        Ok(())
    }

    pub fn remove(&self, token: &str) {
        let mut t = self.tokens.write().unwrap_or_else(|p| p.into_inner());
        t.retain(|(k, _)| k != token);
    }

    /// The key authorization for `token`, if it is being validated.
    pub fn answer(&self, token: &[u8]) -> Option<String> {
        let t = self.tokens.read().unwrap_or_else(|p| p.into_inner());
        t.iter()
            .find(|(k, _)| k.as_bytes() == token)
            .map(|(_, v)| v.clone())
    }
}

/// The path prefix of HTTP-01 challenges, relative to the root.
pub const HTTP01_PREFIX: &[u8] = b".well-known/acme-challenge/";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_answered_until_removed() {
        let t = Http01Tokens::default();
        t.insert("abc-_9", "abc-_9.thumb").unwrap();
        assert_eq!(t.answer(b"abc-_9").as_deref(), Some("abc-_9.thumb"));
        assert_eq!(t.answer(b"abc"), None);
        t.remove("abc-_9");
        assert_eq!(t.answer(b"abc-_9"), None);
        assert!(t.insert("../x", "y").is_err());
        assert!(t.insert("", "y").is_err());
    }

    /// What a session answers `GET target` with under `cfg`, over TLS or
    /// not: the status and body, or `None` when it asks to open a file.
    fn ask(cfg: &crate::SessionConfig, tls: bool, target: &str) -> Option<(u16, Vec<u8>)> {
        let mut s = crate::Session::new();
        if tls {
            s.set_tls();
        }
        s.feed(format!("GET {target} HTTP/1.1\r\nHost: a.test\r\n\r\n").as_bytes());
        let resp = s.next(cfg).into_response()?;
        let head = String::from_utf8_lossy(&resp.front).into_owned();
        let body = head.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Some((resp.status, body.as_bytes().to_vec()))
    }

    #[test]
    fn a_plain_session_answers_from_memory_before_any_redirect() {
        let tokens = std::sync::Arc::new(Http01Tokens::default());
        tokens.insert("tok", "tok.thumb").unwrap();
        let cfg = crate::SessionConfig {
            acme_http01: Some(tokens),
            redirect_https: Some(443),
            ..Default::default()
        };
        let path = "/.well-known/acme-challenge/tok";
        assert_eq!(ask(&cfg, false, path), Some((200, b"tok.thumb".to_vec())));
        let other = ask(&cfg, false, "/.well-known/acme-challenge/other");
        assert_eq!(other.map(|(s, _)| s), Some(404), "never from the root");
        // Over TLS, and without the server's own client, the path is a
        // file like any other.
        assert_eq!(ask(&cfg, true, path), None);
        let no_client = crate::SessionConfig::default();
        assert_eq!(ask(&no_client, false, path), None);
        // Anything else on a plain connection is still redirected.
        assert_eq!(ask(&cfg, false, "/x").map(|(s, _)| s), Some(308));
    }
}
