//! A rule's `redirect`: its status, its target, and the `Location` a
//! request gets.

use super::REDIRECT_STATUSES;

/// A `redirect = "301 https://example.org{path}"`: its status and its
/// target, where `{path}` and `{query}` are replaced by the request's, as
/// received (still percent-encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub status: u16,
    target: String,
}

impl Redirect {
    /// Reads `STATUS TARGET`. The target must be absolute
    /// (`http://host...`, `https://host...`) or a path (`/...`, or
    /// `{path}...`), and
    /// printable ASCII without spaces.
    pub fn parse(s: &str) -> Result<Redirect, String> {
        let shown = s.escape_debug();
        let usage = format!(
            "redirect \"{shown}\": write it as \"STATUS TARGET\", STATUS one of 301, 302, 307, 308 and TARGET https://host/... or /..., e.g. \"301 https://example.org{{path}}\""
        );
        let Some((status, target)) = s.trim().split_once(' ') else {
            return Err(usage);
        };
        let target = target.trim();
        let status: u16 = status.parse().map_err(|_| usage.clone())?;
        if !REDIRECT_STATUSES.contains(&status) {
            return Err(usage);
        }
        if target.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(format!(
                "redirect \"{shown}\": the target holds a space, a control character or a non-ASCII byte (percent-encode it)"
            ));
        }
        let lower = target.to_ascii_lowercase();
        let host = lower
            .strip_prefix("https://")
            .or_else(|| lower.strip_prefix("http://"));
        let ok = match host {
            // A host, which `{path}` cannot supply.
            Some(rest) => rest
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'['),
            // A path, not `//host` (a scheme-relative URL); `{path}`
            // always starts with `/` (and is kept from starting with two).
            None => {
                (target.starts_with('/') && !target.starts_with("//"))
                    || target.starts_with("{path}")
            }
        };
        if !ok {
            return Err(usage);
        }
        Ok(Redirect {
            status,
            target: target.to_string(),
        })
    }

    /// The `Location` for a request whose target's path is `path` and
    /// query `query` (without `?`), both as received. `?{query}` with no
    /// query leaves no `?`. Bytes outside printable ASCII are
    /// percent-encoded (the request parser lets none in; this keeps the
    /// header sound whatever it lets in). A `{path}` that opens the
    /// target is reduced to one leading `/`, so that a path such as
    /// `//evil.example` or `/\evil.example` cannot make the location name
    /// another host.
    pub fn location(&self, path: &[u8], query: &[u8]) -> String {
        let mut out = String::with_capacity(self.target.len() + path.len() + query.len());
        let mut rest = self.target.as_str();
        while let Some(i) = rest.find('{') {
            let (before, from) = rest.split_at(i);
            if let Some(after) = from.strip_prefix("{path}") {
                out.push_str(before);
                let mut p = path;
                if out.is_empty() {
                    let n = p.iter().take_while(|&&b| b == b'/' || b == b'\\').count();
                    if n > 0 {
                        out.push('/');
                        p = &p[n..];
                    }
                }
                push_encoded(&mut out, p);
                rest = after;
            } else if let Some(after) = from.strip_prefix("{query}") {
                match before.strip_suffix('?') {
                    Some(b) if query.is_empty() => out.push_str(b),
                    _ => out.push_str(before),
                }
                push_encoded(&mut out, query);
                rest = after;
            } else {
                out.push_str(before);
                out.push('{');
                rest = &from[1..];
            }
        }
        out.push_str(rest);
        out
    }
}

/// Appends `bytes`, percent-encoding those outside printable ASCII.
fn push_encoded(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        if (0x21..=0x7e).contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}
