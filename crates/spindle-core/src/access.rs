//! Checks of a request's own fields that `[[rules]]` may ask for (see
//! [`crate::rules::Rules::check`]): `referers`, nginx's `valid_referers`.

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
}
