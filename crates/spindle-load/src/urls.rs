//! The URL file (one `http://` or `https://` URL per line) and the source-IP file.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;

/// Longest URL line accepted.
pub const MAX_URL_LEN: usize = 8_192;
/// Most URLs a URL file may hold.
pub const MAX_URLS: usize = 10_000_000;
/// Most source addresses a `-sip` file may hold.
pub const MAX_SIPS: usize = 100_000;

/// One parsed URL.
#[derive(Debug, Clone, PartialEq)]
pub struct Url {
    /// The line as written, for error messages.
    pub text: String,
    pub host: String,
    pub port: u16,
    /// Path and query, always starting with `/`.
    pub path: String,
    /// `https://`: the connection speaks TLS (see tls.rs).
    pub tls: bool,
    /// `user:password@` before the host: the `Authorization` field's
    /// value it makes (`Basic` and the base64 of `user:password`).
    pub authorization: Option<String>,
    /// A fragment `#bytes=FIRST-[LAST]`: sent as a `Range` field (the
    /// value after `bytes=`). Any other fragment is dropped, as a
    /// browser drops it.
    pub range: Option<String>,
}

impl Url {
    /// The `Host:` header value: the host, with the port unless it is the scheme's
    /// default (80, or 443 for https).
    pub fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Parse one `http://[user:password@]host[:port][/path]` or `https://...`
/// URL. The user and password are sent as Basic credentials (RFC 7617),
/// percent-decoded.
pub fn parse_url(s: &str) -> Result<Url, String> {
    if s.len() > MAX_URL_LEN {
        return Err(format!("URL longer than {MAX_URL_LEN} bytes"));
    }
    let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
    let tls = lower.starts_with("https://");
    if !tls && !lower.starts_with("http://") {
        return Err(format!(
            "cannot parse URL (want http://host[:port]/path or https://...): {s}"
        ));
    }
    let rest = &s[if tls { 8 } else { 7 }..];
    let (rest, range) = match rest.split_once('#') {
        Some((r, frag)) => (r, range_of(frag).map_err(|e| format!("{e}: {s}"))?),
        None => (rest, None),
    };
    if rest.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "cannot parse URL (white space or control character in it): {s}"
        ));
    }
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    let (authorization, authority) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            use base64::Engine;
            let plain = percent_decode(userinfo)
                .ok_or_else(|| format!("cannot parse URL (bad %-escape in user info): {s}"))?;
            let b64 = base64::engine::general_purpose::STANDARD.encode(plain);
            (Some(format!("Basic {b64}")), host)
        }
        None => (None, authority),
    };
    let (host, port) = if let Some(r) = authority.strip_prefix('[') {
        let (h, after) = r
            .split_once(']')
            .ok_or_else(|| format!("cannot parse URL (unclosed '['): {s}"))?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("cannot parse URL (bad IPv6 address): {s}"));
        }
        match after {
            "" => (h, None),
            a => match a.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None => return Err(format!("cannot parse URL (junk after ']'): {s}")),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(format!("cannot parse URL (no host): {s}"));
    }
    let port = match port {
        None if tls => 443,
        None => 80,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(format!("cannot parse URL (bad port '{p}'): {s}")),
        },
    };
    Ok(Url {
        text: s.to_string(),
        host: host.to_string(),
        port,
        path,
        tls,
        authorization,
        range,
    })
}

/// The range a fragment asks for: `bytes=FIRST-` or `bytes=FIRST-LAST`
/// (FIRST <= LAST); `None` for any other fragment.
fn range_of(frag: &str) -> Result<Option<String>, String> {
    let Some(spec) = frag.strip_prefix("bytes=") else {
        return Ok(None);
    };
    let bad = || format!("cannot parse URL (bad #bytes=FIRST-[LAST] range '{spec}')");
    let (first, last) = spec.split_once('-').ok_or_else(bad)?;
    let first: u64 = first.parse().map_err(|_| bad())?;
    if !last.is_empty() {
        let last: u64 = last.parse().map_err(|_| bad())?;
        if last < first {
            return Err(bad());
        }
    }
    Ok(Some(spec.to_string()))
}

/// `%HH` escapes decoded; `None` for a malformed one.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Parse the text of a URL file. `name` is used in error messages.
pub fn parse_url_file(name: &str, text: &str) -> Result<Vec<Url>, String> {
    let mut urls = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            return Err(format!("{name}:{}: empty line", n + 1));
        }
        if urls.len() >= MAX_URLS {
            return Err(format!("{name}: more than {MAX_URLS} URLs"));
        }
        let url = parse_url(line.trim()).map_err(|e| format!("{name}:{}: {e}", n + 1))?;
        urls.push(url);
    }
    if urls.is_empty() {
        return Err(format!("{name}: no URLs in the file"));
    }
    Ok(urls)
}

/// Read and parse a URL file.
pub fn load_url_file(path: &Path) -> Result<Vec<Url>, String> {
    let name = path.display().to_string();
    let text = std::fs::read(path).map_err(|e| format!("{name}: {e}"))?;
    let text = String::from_utf8(text).map_err(|_| format!("{name}: not UTF-8 text"))?;
    parse_url_file(&name, &text)
}

/// Read a `-sip` file: one IP address per line.
pub fn load_sip_file(path: &Path) -> Result<Vec<IpAddr>, String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    let mut ips = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            return Err(format!("{name}:{}: empty line", n + 1));
        }
        if ips.len() >= MAX_SIPS {
            return Err(format!("{name}: more than {MAX_SIPS} addresses"));
        }
        let ip = line
            .parse::<IpAddr>()
            .map_err(|_| format!("{name}:{}: cannot convert source IP address {line}", n + 1))?;
        ips.push(ip);
    }
    if ips.is_empty() {
        return Err(format!("{name}: no addresses in the file"));
    }
    Ok(ips)
}

/// Resolve host names to socket addresses, each distinct host once,
/// preferring IPv4 as http_load does.
pub struct Resolver {
    cache: HashMap<(String, u16), SocketAddr>,
}

impl Default for Resolver {
    fn default() -> Self {
        Self::new()
    }
}

impl Resolver {
    pub fn new() -> Self {
        Resolver {
            cache: HashMap::new(),
        }
    }

    pub fn resolve(&mut self, host: &str, port: u16) -> Result<SocketAddr, String> {
        if let Some(a) = self.cache.get(&(host.to_string(), port)) {
            return Ok(*a);
        }
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve host {host}: {e}"))?
            .collect();
        let addr = addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or_else(|| addrs.first())
            .copied()
            .ok_or_else(|| format!("no address found for host {host}"))?;
        self.cache.insert((host.to_string(), port), addr);
        Ok(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = parse_url("http://127.0.0.1:8080/files-1/2").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8080, "/files-1/2")
        );
        assert_eq!(u.host_header(), "127.0.0.1:8080");
        let u = parse_url("http://localhost").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/"));
        assert_eq!(u.host_header(), "localhost");
        let u = parse_url("http://[::1]:81/x?y=1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 81, "/x?y=1")
        );
        assert_eq!(u.host_header(), "[::1]:81");
        let u = parse_url("http://h?q").unwrap();
        assert_eq!(u.path, "/?q");
        assert_eq!(u.authorization, None);
        // User info: Basic credentials, percent-decoded.
        let u = parse_url("http://alice:s%40cret@[::1]:81/x").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 81));
        assert_eq!(u.authorization.as_deref(), Some("Basic YWxpY2U6c0BjcmV0"));
        assert!(parse_url("http://a:%zz@h/").is_err());
        // A fragment: a range to ask for, or dropped.
        let u = parse_url("http://h/v.mp4#bytes=100-").unwrap();
        assert_eq!(
            (u.path.as_str(), u.range.as_deref()),
            ("/v.mp4", Some("100-"))
        );
        let u = parse_url("http://h/v.mp4#bytes=0-1023").unwrap();
        assert_eq!(u.range.as_deref(), Some("0-1023"));
        let u = parse_url("http://h/page#top").unwrap();
        assert_eq!((u.path.as_str(), u.range), ("/page", None));
        for bad in ["#bytes=", "#bytes=-5", "#bytes=9-1", "#bytes=x-"] {
            assert!(parse_url(&format!("http://h/v{bad}")).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in [
            "ftp://x/",
            "http://",
            "http://:80/",
            "http://h:0/",
            "http://h:99999/",
            "http://h:x/",
            "http://h /a",
            "http://[::1/",
            "http://u:p@/",
            "/just/a/path",
        ] {
            assert!(parse_url(bad).is_err(), "{bad} should not parse");
        }
        assert!(parse_url("https://").is_err());
    }

    #[test]
    fn parses_https_urls() {
        let u = parse_url("https://example/a").unwrap();
        assert!(u.tls);
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("example", 443, "/a")
        );
        assert_eq!(u.host_header(), "example");
        let u = parse_url("HTTPS://127.0.0.1:8443").unwrap();
        assert_eq!((u.port, u.host_header().as_str()), (8443, "127.0.0.1:8443"));
        // 443 is no default for plain http, nor 80 for https.
        assert_eq!(parse_url("http://h:443/").unwrap().host_header(), "h:443");
        assert_eq!(parse_url("https://h:80/").unwrap().host_header(), "h:80");
        assert!(!parse_url("http://h/").unwrap().tls);
    }

    #[test]
    fn url_file_errors_name_the_line() {
        let e = parse_url_file("f", "http://a/\n\nhttp://b/\n").unwrap_err();
        assert_eq!(e, "f:2: empty line");
        let e = parse_url_file("f", "http://a/\nnope\n").unwrap_err();
        assert!(e.starts_with("f:2: cannot parse URL"), "{e}");
        assert!(parse_url_file("f", "").is_err());
        assert_eq!(
            parse_url_file("f", "http://a/\r\nhttp://b/").unwrap().len(),
            2
        );
    }
}
