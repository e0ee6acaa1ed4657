//! Checks of a request's own fields that `[[rules]]` may ask for (see
//! [`crate::rules::Rules::check`]): `referers`, nginx's `valid_referers`;
//! and `secure-link`, signed links that expire.

use base64::Engine;

/// Most entries in one `referers` list.
pub const MAX_REFERERS: usize = 64;

/// A `referers = ["none", "blocked", "*.example.org", ...]` list: the
/// `Referer` values that may fetch, as nginx's `valid_referers`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Referers {
    /// `none`: no `Referer` field.
    none: bool,
    /// `blocked`: a `Referer` that does not start with `http://` or
    /// `https://` (a proxy or firewall blanked it).
    blocked: bool,
    names: Vec<RefererName>,
}

/// A server name (exact, `*.suffix` or `prefix.*`) and an optional path
/// prefix the referring page must start with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RefererName {
    host: Host,
    path: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Exact(String),
    /// `*.example.org`: stored as `.example.org`.
    Suffix(String),
    /// `example.*`: stored as `example.`.
    Prefix(String),
}

impl Referers {
    /// Reads the list. Host names are letters, digits, `-` and `.`, with
    /// one `*` at the start (`*.example.org`) or the end (`example.*`),
    /// and may be followed by a path prefix (`example.org/gallery/`).
    /// nginx's `server_names` and regular expressions (`~...`) are refused
    /// with a word on what to write instead.
    pub fn parse(list: &[String]) -> Result<Referers, String> {
        if list.is_empty() {
            return Err(
                "referers: an empty list refuses every request; name what may fetch, e.g. [\"none\", \"*.example.org\"]"
                    .into(),
            );
        }
        if list.len() > MAX_REFERERS {
            return Err(format!(
                "referers: {} entries; at most {MAX_REFERERS}",
                list.len()
            ));
        }
        let mut out = Referers::default();
        for item in list {
            let shown = item.escape_debug();
            match item.as_str() {
                "none" => out.none = true,
                "blocked" => out.blocked = true,
                "server_names" => {
                    return Err(
                        "referers: \"server_names\" is not supported; list the names".into(),
                    )
                }
                s if s.starts_with('~') => {
                    return Err(format!(
                        "referers: \"{shown}\": regular expressions are not supported; use *.example.org or example.*"
                    ))
                }
                s => {
                    let (host, path) = match s.find('/') {
                        Some(i) => (&s[..i], &s[i..]),
                        None => (s, ""),
                    };
                    let host = host.to_ascii_lowercase();
                    let (host, bare) = if let Some(rest) = host.strip_prefix("*.") {
                        (Host::Suffix(format!(".{rest}")), rest.to_string())
                    } else if let Some(rest) = host.strip_suffix(".*") {
                        (Host::Prefix(format!("{rest}.")), rest.to_string())
                    } else {
                        (Host::Exact(host.clone()), host)
                    };
                    let name_ok = !bare.is_empty()
                        && bare.split('.').all(|l| {
                            !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                        });
                    if !name_ok || path.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
                        return Err(format!(
                            "referers: \"{shown}\": write \"none\", \"blocked\", or a host name (example.org, *.example.org, example.*) with an optional path (example.org/gallery/)"
                        ));
                    }
                    out.names.push(RefererName {
                        host,
                        path: path.to_string(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Whether a request with this `Referer` (`None`: absent) may fetch.
    /// The referring URL's host is compared without case and without its
    /// port; its path must start with the entry's path, if any.
    pub fn allows(&self, referer: Option<&[u8]>) -> bool {
        let Some(r) = referer else {
            return self.none;
        };
        let Some(rest) = crate::path::strip_http_scheme(r) else {
            return self.blocked;
        };
        let end = rest
            .iter()
            .position(|&b| matches!(b, b'/' | b':' | b'?' | b'#'))
            .unwrap_or(rest.len());
        let host = &rest[..end];
        // A user name (`http://example.org@evil.example/`) or any other
        // byte outside a DNS name matches nothing.
        if host.is_empty()
            || !host
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            return false;
        }
        let host = host.to_ascii_lowercase();
        let host = host.strip_suffix(b".").unwrap_or(&host);
        let path_start = rest[end..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(&b""[..], |i| &rest[end + i..]);
        self.names.iter().any(|n| {
            let host_ok = match &n.host {
                Host::Exact(h) => host == h.as_bytes(),
                Host::Suffix(s) => host.len() > s.len() && host.ends_with(s.as_bytes()),
                Host::Prefix(p) => host.len() > p.len() && host.starts_with(p.as_bytes()),
            };
            host_ok && path_start.starts_with(n.path.as_bytes())
        })
    }
}

/// The length of an HMAC-SHA256, and of its unpadded base64url form.
const SIG_LEN: usize = 32;
const SIG_B64_LEN: usize = 43;

/// Most digits in `expires` (every 19-digit number fits a `u64`).
const MAX_EXPIRES_DIGITS: usize = 19;

/// A `secure-link` secret: a request must carry `?expires=UNIX&sig=SIG`,
/// SIG being the HMAC-SHA256 keyed with the secret over the path as rules
/// see it (decoded and normalised, a directory's as `/dir/index.html`),
/// a newline and `expires` as written, in unpadded base64url.
#[derive(Debug, Clone)]
pub struct SecureLink {
    key: ring::hmac::Key,
}

impl SecureLink {
    /// The key from a secret file's contents: its final newline is not
    /// part of the secret. An empty secret is an error.
    pub fn new(file: &[u8]) -> Result<SecureLink, String> {
        let secret = file.strip_suffix(b"\n").unwrap_or(file);
        if secret.is_empty() {
            return Err("the secret is empty".into());
        }
        Ok(SecureLink {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret),
        })
    }

    /// Checks a request for `path` (with its leading `/`) with `query`
    /// (without `?`) at `now` (Unix seconds): `Err(403)` when `expires` or
    /// `sig` is missing, malformed or does not match (compared in
    /// constant time), `Err(410)` for a good signature whose time has
    /// passed. The first `expires` and `sig` parameters count.
    pub fn verify(&self, path: &[u8], query: &[u8], now: u64) -> Result<(), u16> {
        let param = |name: &[u8]| {
            query.split(|&b| b == b'&').find_map(|p| {
                p.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix(b"="))
            })
        };
        let (Some(expires), Some(sig)) = (param(b"expires"), param(b"sig")) else {
            return Err(403);
        };
        if expires.is_empty()
            || expires.len() > MAX_EXPIRES_DIGITS
            || !expires.iter().all(u8::is_ascii_digit)
            || sig.len() != SIG_B64_LEN
        {
            return Err(403);
        }
        let mut mac = [0u8; SIG_LEN + 2];
        match base64::engine::general_purpose::URL_SAFE_NO_PAD.decode_slice(sig, &mut mac) {
            Ok(SIG_LEN) => {}
            _ => return Err(403),
        }
        let mut msg = Vec::with_capacity(path.len() + 1 + expires.len());
        msg.extend_from_slice(path);
        msg.push(b'\n');
        msg.extend_from_slice(expires);
        if ring::hmac::verify(&self.key, &msg, &mac[..SIG_LEN]).is_err() {
            return Err(403);
        }
        // Only digits, at most 19 of them: this cannot fail.
        let expires: u64 = std::str::from_utf8(expires)
            .ok()
            .and_then(|e| e.parse().ok())
            .ok_or(403u16)?;
        if expires < now {
            return Err(410);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(list: &[&str]) -> Referers {
        Referers::parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn referers_as_nginx_valid_referers() {
        let r = refs(&["none", "*.example.org", "cdn.*", "www.site.test/gallery/"]);
        let ok = |v: &str| r.allows(Some(v.as_bytes()));
        assert!(r.allows(None));
        assert!(ok("https://www.example.org/page"));
        assert!(ok("HTTP://A.B.EXAMPLE.ORG:8443/x"));
        assert!(ok("https://a.example.org"));
        assert!(ok("https://a.example.org."));
        assert!(!ok("https://example.org/"), "*. needs a subdomain");
        assert!(!ok("https://evilexample.org/"));
        assert!(ok("http://cdn.example.com/"));
        assert!(ok("http://cdn.co.uk/x"));
        assert!(!ok("http://cdn/"));
        assert!(!ok("http://www.cdn.com/"));
        assert!(ok("https://www.site.test/gallery/a.html"));
        assert!(ok("https://www.site.test:8080/gallery/"));
        assert!(!ok("https://www.site.test/other/"));
        assert!(!ok("https://www.site.test"));
        // `blocked` not given: a blanked value is refused.
        assert!(!ok(""));
        assert!(!ok("XXXXXXXXXXXXXXX"));
        // A user name cannot pass for the host.
        assert!(!ok("https://a.example.org@evil.test/"));
        assert!(!ok("https://cdn.evil@x/"));
        let b = refs(&["blocked"]);
        assert!(!b.allows(None));
        assert!(b.allows(Some(b"")));
        assert!(b.allows(Some(b"XXXX:XXXXXXX")));
        assert!(!b.allows(Some(b"https://a.test/")));
    }

    #[test]
    fn bad_referer_lists_are_named() {
        for (list, needle) in [
            (&[][..], "empty list"),
            (&["server_names"][..], "not supported"),
            (&["~\\.google\\."][..], "regular expressions"),
            (&["*"][..], "host name"),
            (&["*.*"][..], "host name"),
            (&["exa mple.org"][..], "host name"),
            (&["example.org/a b"][..], "host name"),
            (&["http://example.org/"][..], "host name"),
            (&["a..b"][..], "host name"),
        ] {
            let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
            let e = Referers::parse(&list).unwrap_err();
            assert!(e.contains(needle) && !e.contains('\n'), "{list:?}: {e}");
        }
    }

    /// The signature a link needs, as the README's openssl line makes it.
    fn sign(secret: &[u8], path: &str, expires: &str) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
        let tag = ring::hmac::sign(&key, format!("{path}\n{expires}").as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag.as_ref())
    }

    #[test]
    fn secure_links() {
        let link = SecureLink::new(b"s3cret\n").unwrap();
        let now = 1_800_000_000;
        let sig = sign(b"s3cret", "/v/a.mp4", "1800000100");
        let q = |s: &str| link.verify(b"/v/a.mp4", s.as_bytes(), now);
        assert_eq!(q(&format!("expires=1800000100&sig={sig}")), Ok(()));
        assert_eq!(q(&format!("sig={sig}&x=1&expires=1800000100")), Ok(()));
        // Only the final newline is not part of the secret.
        let other = SecureLink::new(b"s3cret\n\n").unwrap();
        assert_eq!(
            other.verify(
                b"/v/a.mp4",
                format!("expires=1800000100&sig={sig}").as_bytes(),
                now
            ),
            Err(403)
        );
        // Another path, another time, a missing part: 403.
        assert_eq!(
            link.verify(
                b"/v/b.mp4",
                format!("expires=1800000100&sig={sig}").as_bytes(),
                now
            ),
            Err(403)
        );
        assert_eq!(q(&format!("expires=1800000101&sig={sig}")), Err(403));
        assert_eq!(q(&format!("sig={sig}")), Err(403));
        assert_eq!(q("expires=1800000100"), Err(403));
        assert_eq!(q(""), Err(403));
        // Wrong length, padding, a byte outside base64url, a number that
        // is not one.
        assert_eq!(
            q(&format!("expires=1800000100&sig={}", &sig[..42])),
            Err(403)
        );
        assert_eq!(q(&format!("expires=1800000100&sig={sig}=")), Err(403));
        assert_eq!(
            q(&format!("expires=1800000100&sig={}A", &sig[..42])),
            Err(403)
        );
        let plus = sig.replace('-', "+").replace('_', "/");
        if plus != sig {
            assert_eq!(q(&format!("expires=1800000100&sig={plus}")), Err(403));
        }
        for e in [
            "",
            "-1",
            "+1800000100",
            "18e8",
            "1800000100.0",
            "99999999999999999999",
        ] {
            let s = sign(b"s3cret", "/v/a.mp4", e);
            assert_eq!(q(&format!("expires={e}&sig={s}")), Err(403), "{e:?}");
        }
        // Signed but past: 410; far future: fine.
        let old = sign(b"s3cret", "/v/a.mp4", "1799999999");
        assert_eq!(q(&format!("expires=1799999999&sig={old}")), Err(410));
        let far = sign(b"s3cret", "/v/a.mp4", "9999999999999999999");
        assert_eq!(q(&format!("expires=9999999999999999999&sig={far}")), Ok(()));
        assert!(SecureLink::new(b"\n").is_err());
        assert!(SecureLink::new(b"").is_err());
    }
}
