//! Response rules by path (`[[rules]]` in the config file): a
//! `Cache-Control`, extra header fields (CORS, security headers) and a
//! `Content-Type` for the files whose path matches a glob.
//!
//! Globs are matched against the path from the root with a leading `/`
//! (`/assets/app.js`; a directory's index is `/docs/index.html`), with
//! `globset`'s syntax: `*` and `?` stay within one path segment, `**`
//! crosses segments, `{a,b}` and `[a-z]` work. Every matching rule
//! applies, in the order of the file: header fields accumulate, and a
//! later rule's `Cache-Control` or `Content-Type` replaces an earlier
//! one's (so put general rules first and exceptions after them).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use globset::{Candidate, Glob, GlobBuilder, GlobSet, GlobSetBuilder};

/// Most rules in one configuration.
pub const MAX_RULES: usize = 256;

/// One rule, as configured (header fields already checked and rendered
/// for the wire by the caller: `Name: value\r\n` each).
#[derive(Debug, Clone, Default)]
pub struct Rule {
    pub pattern: String,
    pub cache_control: Option<String>,
    pub content_type: Option<String>,
    pub headers: Vec<u8>,
}

/// The compiled rules of a server.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    set: GlobSet,
    rules: Vec<Rule>,
}

/// What the rules that match one path say.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied<'a> {
    pub cache_control: Option<&'a str>,
    pub content_type: Option<&'a str>,
    /// Wire-ready header fields, in rule order.
    pub headers: Vec<&'a [u8]>,
}

impl Rules {
    /// Compiles the globs. A bad one is an error that names it.
    pub fn new(rules: Vec<Rule>) -> Result<Rules, String> {
        if rules.len() > MAX_RULES {
            return Err(format!("rules: {} rules; at most {MAX_RULES}", rules.len()));
        }
        let mut b = GlobSetBuilder::new();
        for r in &rules {
            if !r.pattern.starts_with('/') && !r.pattern.starts_with("**") {
                return Err(format!(
                    "rules: match {:?} must start with / (paths are matched from the root, e.g. \"/assets/**\")",
                    r.pattern
                ));
            }
            let g: Glob = GlobBuilder::new(&r.pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| format!("rules: bad match {:?}: {e}", r.pattern))?;
            b.add(g);
        }
        let set = b.build().map_err(|e| format!("rules: {e}"))?;
        Ok(Rules { set, rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules for `rel_path` (relative to the root, no leading `/`).
    pub fn apply(&self, rel_path: &[u8]) -> Applied<'_> {
        let mut out = Applied::default();
        if self.rules.is_empty() {
            return out;
        }
        let mut p = Vec::with_capacity(rel_path.len() + 1);
        p.push(b'/');
        p.extend_from_slice(rel_path);
        let candidate = Candidate::new(OsStr::from_bytes(&p));
        // Most requests match no rule: one test, no list of matches.
        if !self.set.is_match_candidate(&candidate) {
            return out;
        }
        // GlobSet gives the matching indices in ascending order.
        for i in self.set.matches_candidate(&candidate) {
            let r = &self.rules[i];
            if let Some(c) = &r.cache_control {
                out.cache_control = Some(c);
            }
            if let Some(t) = &r.content_type {
                out.content_type = Some(t);
            }
            if !r.headers.is_empty() {
                out.headers.push(&r.headers);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pattern: &str, cc: Option<&str>, ct: Option<&str>, h: &str) -> Rule {
        Rule {
            pattern: pattern.into(),
            cache_control: cc.map(Into::into),
            content_type: ct.map(Into::into),
            headers: h.as_bytes().to_vec(),
        }
    }

    #[test]
    fn globs_and_order() {
        let r = Rules::new(vec![
            rule("/**", Some("no-cache"), None, ""),
            rule(
                "/assets/**",
                Some("max-age=31536000, immutable"),
                None,
                "X-A: 1\r\n",
            ),
            rule("/assets/*.wasm", None, Some("application/wasm"), ""),
            rule("/*.{html,htm}", None, None, "X-Frame-Options: DENY\r\n"),
        ])
        .unwrap();
        let a = r.apply(b"assets/app.wasm");
        assert_eq!(a.cache_control, Some("max-age=31536000, immutable"));
        assert_eq!(a.content_type, Some("application/wasm"));
        assert_eq!(a.headers, vec![&b"X-A: 1\r\n"[..]]);
        // `*` stays within a segment.
        let a = r.apply(b"assets/sub/app.wasm");
        assert_eq!(a.content_type, None);
        assert_eq!(a.cache_control, Some("max-age=31536000, immutable"));
        let a = r.apply(b"index.html");
        assert_eq!(a.cache_control, Some("no-cache"));
        assert_eq!(a.headers, vec![&b"X-Frame-Options: DENY\r\n"[..]]);
        assert_eq!(r.apply(b"docs/index.html").headers.len(), 0);
        // Names that are not UTF-8 are matched too.
        assert_eq!(
            r.apply(b"assets/\xff.bin").cache_control,
            Some("max-age=31536000, immutable")
        );
        assert_eq!(Rules::default().apply(b"x"), Applied::default());
    }

    #[test]
    fn bad_globs_are_named() {
        let e = Rules::new(vec![rule("/a/[z-", None, None, "")]).unwrap_err();
        assert!(e.contains("bad match \"/a/[z-\""), "{e}");
        let e = Rules::new(vec![rule("assets/*", None, None, "")]).unwrap_err();
        assert!(e.contains("must start with /"), "{e}");
        let many = vec![rule("/x", None, None, ""); MAX_RULES + 1];
        assert!(Rules::new(many).unwrap_err().contains("at most"));
    }
}
