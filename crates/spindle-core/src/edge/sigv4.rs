//! AWS Signature Version 4 for the edge's GETs to an S3-compatible origin
//! (Amazon S3, Garage, MinIO, Ceph RGW), in the `Authorization` header.
//! <https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html>
//!
//! The signer takes the time as an argument and makes no system call; the
//! fetcher passes the wall clock. Secrets never appear in `Debug` output
//! or in any error message.

use std::fmt;

use ring::{digest, hmac};

/// The SHA-256 of an empty body, which a GET's `x-amz-content-sha256`
/// carries (S3 also takes `UNSIGNED-PAYLOAD`; the hash is what AWS's own
/// examples use, and every store checks it the same way).
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// An access key, its secret, and a session token if the key is a
/// temporary one.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    secret_key: String,
    token: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Credentials {
    /// Credentials from their parts; an error (naming no secret) if a part
    /// is empty or holds a character a header cannot carry.
    pub fn new(access_key: &str, secret_key: &str, token: Option<&str>) -> Result<Self, String> {
        let bad = |s: &str| s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic());
        if bad(access_key) {
            return Err("the access key is empty or holds a space or control character".into());
        }
        if bad(secret_key) {
            return Err(format!(
                "the secret key of {access_key} is empty or holds a space or control character"
            ));
        }
        if token.is_some_and(bad) {
            return Err(format!(
                "the session token of {access_key} is empty or holds a space or control character"
            ));
        }
        Ok(Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            token: token.map(Into::into),
        })
    }

    /// From the usual environment variables (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), read through `var`.
    /// None if the first two are not both set.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Result<Self, String>> {
        let key = var("AWS_ACCESS_KEY_ID")?;
        let secret = var("AWS_SECRET_ACCESS_KEY")?;
        let token = var("AWS_SESSION_TOKEN").filter(|t| !t.is_empty());
        Some(Credentials::new(&key, &secret, token.as_deref()))
    }

    /// From the text of an AWS shared credentials file (INI: `[profile]`
    /// sections of `aws_access_key_id`, `aws_secret_access_key` and
    /// optionally `aws_session_token`).
    pub fn from_file(text: &str, profile: &str) -> Result<Self, String> {
        let mut section = None::<&str>;
        let (mut key, mut secret, mut token) = (None, None, None);
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = Some(name.trim());
                continue;
            }
            if section != Some(profile) {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(format!("a line of profile [{profile}] has no '='"));
            };
            match k.trim() {
                "aws_access_key_id" => key = Some(v.trim()),
                "aws_secret_access_key" => secret = Some(v.trim()),
                "aws_session_token" => token = Some(v.trim()),
                _ => {}
            }
        }
        match (key, secret) {
            (Some(k), Some(s)) => Credentials::new(k, s, token),
            _ => Err(format!(
                "no profile [{profile}] with aws_access_key_id and aws_secret_access_key"
            )),
        }
    }
}

/// Signs requests for one region and service with one key.
#[derive(Debug, Clone)]
pub struct Signer {
    credentials: Credentials,
    region: String,
    service: String,
}

impl Signer {
    /// A signer for `service` (`s3`) in `region` (`us-east-1`; Garage's
    /// own default is `garage`).
    pub fn new(credentials: Credentials, region: &str, service: &str) -> Signer {
        Signer {
            credentials,
            region: region.into(),
            service: service.into(),
        }
    }

    /// The fields to add to a GET (or HEAD) of `path` (the object's path
    /// as bytes, not yet percent-encoded: `/bucket/key` for path-style
    /// addressing) on `host` (as the `Host` field will carry it, with the
    /// port if not the scheme's), sent at Unix time `now`. `fields` are the
    /// other fields to sign (`range`, `if-match`, ...), names in any case.
    /// Returns `x-amz-date`, `x-amz-content-sha256`, the session token if
    /// any, and `authorization`.
    pub fn sign(
        &self,
        method: &str,
        host: &str,
        path: &[u8],
        fields: &[(&str, &str)],
        now: i64,
    ) -> Vec<(&'static str, String)> {
        let amz_date = amz_date(now);
        let day = &amz_date[..8];
        let mut signed: Vec<(String, String)> = fields
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), canonical_value(v)))
            .collect();
        signed.push(("host".into(), canonical_value(host)));
        signed.push(("x-amz-content-sha256".into(), EMPTY_SHA256.into()));
        signed.push(("x-amz-date".into(), amz_date.clone()));
        if let Some(t) = &self.credentials.token {
            signed.push(("x-amz-security-token".into(), t.clone()));
        }
        signed.sort();
        let names = signed
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(";");
        let request = canonical_request(method, path, &signed, &names);
        let scope = format!("{day}/{}/{}/aws4_request", self.region, self.service);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(digest::digest(&digest::SHA256, request.as_bytes()).as_ref())
        );
        let signature = hex(&mac(&self.signing_key(day), to_sign.as_bytes()));
        let mut out = vec![
            ("x-amz-date", amz_date),
            ("x-amz-content-sha256", EMPTY_SHA256.to_string()),
        ];
        if let Some(t) = &self.credentials.token {
            out.push(("x-amz-security-token", t.clone()));
        }
        out.push((
            "authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={names}, Signature={signature}",
                self.credentials.access_key
            ),
        ));
        out
    }

    fn signing_key(&self, day: &str) -> Vec<u8> {
        let k = format!("AWS4{}", self.credentials.secret_key);
        let k = mac(k.as_bytes(), day.as_bytes());
        let k = mac(&k, self.region.as_bytes());
        let k = mac(&k, self.service.as_bytes());
        mac(&k, b"aws4_request")
    }
}

/// The canonical request: method, the encoded path, no query, each signed
/// field as `name:value`, the names, the payload's hash.
fn canonical_request(
    method: &str,
    path: &[u8],
    signed: &[(String, String)],
    names: &str,
) -> String {
    let mut s = format!("{method}\n{}\n\n", encode_path(path));
    for (n, v) in signed {
        s.push_str(n);
        s.push(':');
        s.push_str(v);
        s.push('\n');
    }
    s.push('\n');
    s.push_str(names);
    s.push('\n');
    s.push_str(EMPTY_SHA256);
    s
}

/// S3's URI encoding of a path: every byte but the unreserved ones and
/// `/` as `%XY`, once (S3 does not encode twice).
pub fn encode_path(path: &[u8]) -> String {
    let mut s = String::with_capacity(path.len());
    for &b in path {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// A field value as signed: trimmed, runs of spaces as one.
fn canonical_value(v: &str) -> String {
    v.split_ascii_whitespace().collect::<Vec<_>>().join(" ")
}

/// `YYYYMMDDTHHMMSSZ`, UTC.
pub fn amz_date(unix: i64) -> String {
    let (y, mo, d, h, mi, s) = crate::date::civil(unix);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::sign(&key, data).as_ref().to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2013-05-24T00:00:00Z, the time of AWS's examples.
    const MAY_24_2013: i64 = 1_369_353_600;

    fn example() -> Signer {
        let c = Credentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            None,
        )
        .unwrap();
        Signer::new(c, "us-east-1", "s3")
    }

    /// AWS's worked example "GET Object" (the first 10 bytes of
    /// examplebucket/test.txt), signature as AWS publishes it.
    #[test]
    fn aws_get_object_example() {
        let out = example().sign(
            "GET",
            "examplebucket.s3.amazonaws.com",
            b"/test.txt",
            &[("Range", "bytes=0-9")],
            MAY_24_2013,
        );
        assert_eq!(out[0], ("x-amz-date", "20130524T000000Z".to_string()));
        assert_eq!(out[1].1, EMPTY_SHA256);
        assert_eq!(
            out[2].1,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    /// The same example's intermediate string to sign, as AWS prints it.
    #[test]
    fn aws_example_canonical_request_hashes_as_published() {
        let signed = vec![
            (
                "host".to_string(),
                "examplebucket.s3.amazonaws.com".to_string(),
            ),
            ("range".to_string(), "bytes=0-9".to_string()),
            ("x-amz-content-sha256".to_string(), EMPTY_SHA256.to_string()),
            ("x-amz-date".to_string(), "20130524T000000Z".to_string()),
        ];
        let r = canonical_request(
            "GET",
            b"/test.txt",
            &signed,
            "host;range;x-amz-content-sha256;x-amz-date",
        );
        assert_eq!(
            hex(digest::digest(&digest::SHA256, r.as_bytes()).as_ref()),
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
        );
    }

    #[test]
    fn a_session_token_is_signed_and_sent() {
        let c = Credentials::new("AKID", "SECRET", Some("TOKEN")).unwrap();
        let out = Signer::new(c, "garage", "s3").sign("GET", "h:3900", b"/b/k", &[], MAY_24_2013);
        assert_eq!(out[2], ("x-amz-security-token", "TOKEN".to_string()));
        assert!(out[3]
            .1
            .contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"));
    }

    #[test]
    fn paths_are_encoded_once() {
        assert_eq!(encode_path(b"/b/a b/%41~x.y_z-"), "/b/a%20b/%2541~x.y_z-");
        assert_eq!(encode_path("/é".as_bytes()), "/%C3%A9");
        assert_eq!(canonical_value("  a   b "), "a b");
        assert_eq!(amz_date(0), "19700101T000000Z");
    }

    #[test]
    fn credentials_from_file_and_env_and_never_in_debug() {
        let text = "[default]\naws_access_key_id = A\naws_secret_access_key = S\n\n[edge]\n\
                    aws_access_key_id=GK1\naws_secret_access_key=s3cr3t\n";
        let c = Credentials::from_file(text, "edge").unwrap();
        assert_eq!(c.access_key, "GK1");
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("s3cr3t"), "{dbg}");
        let e = Credentials::from_file(text, "nope").unwrap_err();
        assert!(e.contains("[nope]"));
        assert!(
            Credentials::from_file("[x]\naws_access_key_id=A\naws_secret_access_key=a b", "x")
                .unwrap_err()
                .contains("secret key of A")
        );
        let env = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("K".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("S".to_string()),
            _ => None,
        };
        assert_eq!(
            Credentials::from_env(env).unwrap().unwrap(),
            Credentials::new("K", "S", None).unwrap()
        );
        assert!(Credentials::from_env(|_| None).is_none());
    }
}
