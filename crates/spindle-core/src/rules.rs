//! Response rules by path (`[[rules]]` in the config file): a
//! `Cache-Control`, extra header fields (CORS, security headers) and a
//! `Content-Type` for the files whose path matches a glob; and who may
//! fetch them ([`Rules::check`]): client addresses (`allow`, `deny`),
//! `Referer`, signed links, passwords (`auth`), redirects and a fallback
//! file.
//!
//! Globs are matched against the path from the root with a leading `/`
//! (`/assets/app.js`; a directory's index is `/docs/index.html`), with
//! `globset`'s syntax: `*` and `?` stay within one path segment, `**`
//! crosses segments, `{a,b}` and `[a-z]` work. Every matching rule
//! applies, in the order of the file: header fields accumulate, and a
//! later rule's `Cache-Control` or `Content-Type` replaces an earlier
//! one's (so put general rules first and exceptions after them).

use std::ffi::{CString, OsStr};
use std::net::IpAddr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use globset::{Candidate, Glob, GlobBuilder, GlobSet, GlobSetBuilder};

use crate::access::{Referers, SecureLink};
use crate::auth::Auth;
use crate::fields::Fields;
use crate::proxy::Cidr;

mod redirect;
pub use redirect::Redirect;

/// Most rules in one configuration.
pub const MAX_RULES: usize = 256;

/// One rule, as configured (header fields already checked by the caller,
/// and parsed: [`Fields::from_lines`]).
#[derive(Debug, Clone, Default)]
pub struct Rule {
    pub pattern: String,
    pub cache_control: Option<String>,
    pub content_type: Option<String>,
    pub headers: Fields,
    /// Clients let in (`allow`): where given, every other client is
    /// refused.
    pub allow: Vec<Cidr>,
    /// Clients refused (`deny`).
    pub deny: Vec<Cidr>,
    /// Answer with a redirect instead of a file (`redirect`).
    pub redirect: Option<Redirect>,
    /// Served with 200 where the path names no file (`fallback`): a
    /// path beneath the root, without its leading `/`.
    pub fallback: Option<CString>,
    /// The `Referer` values that may fetch (`referers`).
    pub referers: Option<Referers>,
    /// Only signed links that have not expired may fetch (`secure-link`).
    pub secure_link: Option<SecureLink>,
    /// Only these users may fetch (`auth`, with `realm`).
    pub auth: Option<Arc<Auth>>,
}

impl Rule {
    /// Whether the rule says who gets the file or what answers it, not
    /// only how it is answered.
    fn decides(&self) -> bool {
        !self.allow.is_empty()
            || !self.deny.is_empty()
            || self.redirect.is_some()
            || self.fallback.is_some()
            || self.referers.is_some()
            || self.secure_link.is_some()
            || self.auth.is_some()
    }

    /// Whether the rule adds to the response: `Cache-Control`,
    /// `Content-Type` or header fields.
    fn shapes(&self) -> bool {
        self.cache_control.is_some() || self.content_type.is_some() || !self.headers.is_empty()
    }
}

/// The compiled rules of a server.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// The globs of the rules that [shape](Rule::shapes) a response, and
    /// their indices in `rules` ([`Rules::apply`]).
    set: GlobSet,
    shaping_idx: Vec<usize>,
    rules: Vec<Rule>,
    /// The globs of the rules that [decide](Rule::decides), and their
    /// indices in `rules`: a request that matches none of them (every
    /// request, on a server without such rules) costs one test.
    deciding: GlobSet,
    deciding_idx: Vec<usize>,
    /// Each rule's literal start (see [`literal_prefix`]), and the
    /// deciding rules': a path under none of them meets no rule, found
    /// without building a glob candidate.
    prefixes: Vec<Vec<u8>>,
    deciding_prefixes: Vec<Vec<u8>>,
    /// Every deciding glob is `PREFIX/**` ([`is_simple`]): `check` needs
    /// no glob matching; the same for the shaping globs and `apply`.
    deciding_simple: bool,
    shaping_simple: bool,
    by_address: bool,
}

/// The literal start of a glob, up to its first special character: a
/// path that does not start with it cannot match. Empty for `**...`.
fn literal_prefix(pattern: &str) -> Vec<u8> {
    let end = pattern
        .find(['*', '?', '[', '{', '\\'])
        .unwrap_or(pattern.len());
    pattern.as_bytes()[..end].to_vec()
}

/// Whether `/rel_path` starts with one of `prefixes`.
fn under_any(prefixes: &[Vec<u8>], rel_path: &[u8]) -> bool {
    prefixes.iter().any(|x| under(x, rel_path))
}

/// What [`Rules::check`] looks at in a request besides its path.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked<'a> {
    /// The client (`None`: unknown, which an address rule refuses).
    pub client: Option<IpAddr>,
    /// The target's path and query (without `?`), as received.
    pub raw_path: &'a [u8],
    pub query: &'a [u8],
    /// The `Referer` field, if any.
    pub referer: Option<&'a [u8]>,
}

/// What the rules that match a path decide before any file is opened.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// Look for the file; where it is not found (404), serve `fallback`
    /// instead, if some. With `auth`, only once the request's credentials
    /// are a user's of it.
    Serve {
        fallback: Option<&'a CString>,
        auth: Option<&'a Arc<Auth>>,
    },
    /// Refuse with this status, for this reason.
    Refuse(u16, Refusal),
    /// Redirect: the status and the `Location`.
    Redirect(u16, String),
}

/// Why a request was refused (the metrics count refusals by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `allow` / `deny` (or no client address known).
    Address = 0,
    /// `referers`.
    Referer,
    /// `secure-link`: no signature, or a wrong one.
    Signature,
    /// `secure-link`: a signed link past its time (410).
    Expired,
    /// `auth`: credentials that are not a user's, or malformed (401; a
    /// request without any is asked for them, not counted).
    Password,
}

/// Every [`Refusal`], in order, by its metrics name.
pub const REFUSALS: [&str; 5] = ["address", "referer", "signature", "expired", "password"];

/// The statuses a `redirect` may use.
pub const REDIRECT_STATUSES: [u16; 4] = [301, 302, 307, 308];

/// What the rules that match one path say.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied<'a> {
    pub cache_control: Option<&'a str>,
    pub content_type: Option<&'a str>,
    /// The rules' header fields, in rule order.
    pub headers: Vec<&'a Fields>,
}

/// What the matching rules decided so far, in file order.
#[derive(Default)]
struct Decided<'a> {
    redirect: Option<&'a Redirect>,
    fallback: Option<&'a CString>,
    auth: Option<&'a Arc<Auth>>,
}

impl<'a> Decided<'a> {
    /// Takes one matching rule: its refusal, if the request meets one;
    /// else what it says for later.
    fn add(&mut self, r: &'a Rule, rel_path: &[u8], asked: &Asked) -> Option<Verdict<'a>> {
        if !r.allow.is_empty() || !r.deny.is_empty() {
            let Some(ip) = asked.client else {
                return Some(Verdict::Refuse(403, Refusal::Address));
            };
            let denied = r.deny.iter().any(|c| c.contains(ip));
            let allowed = r.allow.is_empty() || r.allow.iter().any(|c| c.contains(ip));
            if denied || !allowed {
                return Some(Verdict::Refuse(403, Refusal::Address));
            }
        }
        if let Some(refs) = &r.referers {
            if !refs.allows(asked.referer) {
                return Some(Verdict::Refuse(403, Refusal::Referer));
            }
        }
        if let Some(link) = &r.secure_link {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            if let Err(status) = link.verify(&slash_path(rel_path), asked.query, now) {
                let why = match status {
                    410 => Refusal::Expired,
                    _ => Refusal::Signature,
                };
                return Some(Verdict::Refuse(status, why));
            }
        }
        if r.redirect.is_some() {
            self.redirect = r.redirect.as_ref();
        }
        if r.fallback.is_some() {
            self.fallback = r.fallback.as_ref();
        }
        if r.auth.is_some() {
            self.auth = r.auth.as_ref();
        }
        None
    }

    fn verdict(self, asked: &Asked) -> Verdict<'a> {
        match self.redirect {
            Some(r) => Verdict::Redirect(r.status, r.location(asked.raw_path, asked.query)),
            None => Verdict::Serve {
                fallback: self.fallback,
                auth: self.auth,
            },
        }
    }
}

/// `/` and `rel_path`: the path globs are matched against.
fn slash_path(rel_path: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(rel_path.len() + 1);
    p.push(b'/');
    p.extend_from_slice(rel_path);
    p
}

/// Whether a glob is `PREFIX/**` with no special character in PREFIX:
/// then `/rel_path` matches it exactly when it starts with `PREFIX/`
/// (globset's answer, checked by a test).
fn is_simple(pattern: &str) -> bool {
    pattern.strip_suffix("**").is_some_and(|prefix| {
        prefix.ends_with('/') && literal_prefix(pattern).len() == prefix.len()
    })
}

/// Whether `/rel_path` starts with `prefix`.
fn under(prefix: &[u8], rel_path: &[u8]) -> bool {
    match prefix.split_first() {
        None => true,
        Some((b'/', rest)) => rel_path.starts_with(rest),
        Some(_) => false,
    }
}

impl Rules {
    /// Compiles the globs. A bad one is an error that names it.
    pub fn new(rules: Vec<Rule>) -> Result<Rules, String> {
        if rules.len() > MAX_RULES {
            return Err(format!("rules: {} rules; at most {MAX_RULES}", rules.len()));
        }
        let mut b = GlobSetBuilder::new();
        let mut d = GlobSetBuilder::new();
        let mut deciding_idx = Vec::new();
        let mut shaping_idx = Vec::new();
        for (i, r) in rules.iter().enumerate() {
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
            if r.decides() {
                d.add(g.clone());
                deciding_idx.push(i);
            }
            if r.shapes() {
                b.add(g);
                shaping_idx.push(i);
            }
        }
        let set = b.build().map_err(|e| format!("rules: {e}"))?;
        let deciding = d.build().map_err(|e| format!("rules: {e}"))?;
        let by_address = rules
            .iter()
            .any(|r| !r.allow.is_empty() || !r.deny.is_empty());
        let prefixes = shaping_idx
            .iter()
            .map(|&i| literal_prefix(&rules[i].pattern))
            .collect();
        let deciding_prefixes = deciding_idx
            .iter()
            .map(|&i| literal_prefix(&rules[i].pattern))
            .collect();
        let deciding_simple = deciding_idx.iter().all(|&i| is_simple(&rules[i].pattern));
        let shaping_simple = shaping_idx.iter().all(|&i| is_simple(&rules[i].pattern));
        Ok(Rules {
            set,
            shaping_idx,
            deciding_simple,
            shaping_simple,
            rules,
            deciding,
            deciding_idx,
            prefixes,
            deciding_prefixes,
            by_address,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether some rule asks for a password (`auth`).
    pub fn has_auth(&self) -> bool {
        self.rules.iter().any(|r| r.auth.is_some())
    }

    /// Whether some rule decides by the client's address (`allow`,
    /// `deny`): only then need a driver tell a session its peer.
    pub fn by_address(&self) -> bool {
        self.by_address
    }

    /// What the rules for `rel_path` (as for [`Rules::apply`]) decide
    /// for the request `asked`. Every matching rule's refusals are checked
    /// (addresses, `referers`, then `secure-link`: 403, or 410 for a signed
    /// link past its time; any refusal refuses); then the last
    /// matching `redirect` answers (before any password is asked for, as
    /// nginx's `return` does); else the file is looked for, with the
    /// last matching `fallback`, once the last matching `auth` is
    /// satisfied.
    pub fn check(&self, rel_path: &[u8], asked: &Asked) -> Verdict<'_> {
        let mut d = Decided::default();
        if !under_any(&self.deciding_prefixes, rel_path) {
            return d.verdict(asked);
        }
        if self.deciding_simple {
            // Every deciding glob is `PREFIX/**`: a path is under it or not.
            for (k, &i) in self.deciding_idx.iter().enumerate() {
                if under(&self.deciding_prefixes[k], rel_path) {
                    if let Some(v) = d.add(&self.rules[i], rel_path, asked) {
                        return v;
                    }
                }
            }
            return d.verdict(asked);
        }
        let p = slash_path(rel_path);
        let candidate = Candidate::new(OsStr::from_bytes(&p));
        if !self.deciding.is_match_candidate(&candidate) {
            return d.verdict(asked);
        }
        for i in self.deciding.matches_candidate(&candidate) {
            if let Some(v) = d.add(&self.rules[self.deciding_idx[i]], rel_path, asked) {
                return v;
            }
        }
        d.verdict(asked)
    }

    /// The rules for `rel_path` (relative to the root, no leading `/`).
    pub fn apply(&self, rel_path: &[u8]) -> Applied<'_> {
        let mut out = Applied::default();
        if !under_any(&self.prefixes, rel_path) {
            return out;
        }
        let rules = &self.rules;
        let mut take = |i: usize| {
            let r = &rules[i];
            if let Some(c) = &r.cache_control {
                out.cache_control = Some(c);
            }
            if let Some(t) = &r.content_type {
                out.content_type = Some(t);
            }
            if !r.headers.is_empty() {
                out.headers.push(&r.headers);
            }
        };
        if self.shaping_simple {
            for (k, &i) in self.shaping_idx.iter().enumerate() {
                if under(&self.prefixes[k], rel_path) {
                    take(i);
                }
            }
            return out;
        }
        let p = slash_path(rel_path);
        let candidate = Candidate::new(OsStr::from_bytes(&p));
        // Most requests match no rule: one test, no list of matches.
        if !self.set.is_match_candidate(&candidate) {
            return out;
        }
        // GlobSet gives the matching indices in ascending order.
        for i in self.set.matches_candidate(&candidate) {
            take(self.shaping_idx[i]);
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
            headers: Fields::from_lines(h.as_bytes()),
            ..Rule::default()
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
        assert_eq!(a.headers, vec![&Fields::from_lines(b"X-A: 1\r\n")]);
        // `*` stays within a segment.
        let a = r.apply(b"assets/sub/app.wasm");
        assert_eq!(a.content_type, None);
        assert_eq!(a.cache_control, Some("max-age=31536000, immutable"));
        let a = r.apply(b"index.html");
        assert_eq!(a.cache_control, Some("no-cache"));
        assert_eq!(
            a.headers,
            vec![&Fields::from_lines(b"X-Frame-Options: DENY\r\n")]
        );
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

    /// A request for `raw_path`, no query, from nobody known.
    fn at(raw_path: &[u8]) -> Asked<'_> {
        Asked {
            raw_path,
            ..Asked::default()
        }
    }

    #[test]
    fn referers_refuse_after_addresses() {
        let rules = Rules::new(vec![Rule {
            referers: Some(Referers::parse(&["none".into(), "*.example.org".into()]).unwrap()),
            ..rule("/img/**", None, None, "")
        }])
        .unwrap();
        let with = |referer: Option<&'static [u8]>| Asked {
            referer,
            ..at(b"/img/a.png")
        };
        let serve = Verdict::Serve {
            fallback: None,
            auth: None,
        };
        assert_eq!(rules.check(b"img/a.png", &with(None)), serve);
        assert_eq!(
            rules.check(b"img/a.png", &with(Some(b"https://www.example.org/"))),
            serve
        );
        assert_eq!(
            rules.check(b"img/a.png", &with(Some(b"https://evil.test/"))),
            Verdict::Refuse(403, Refusal::Referer)
        );
        assert_eq!(
            rules.check(b"a.png", &with(Some(b"https://evil.test/"))),
            serve
        );
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|c| Cidr::parse(c).unwrap()).collect()
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn allow_and_deny_by_address() {
        let r = Rules::new(vec![
            rule("/**", Some("no-cache"), None, ""),
            Rule {
                allow: cidrs(&["10.0.0.0/8", "::1"]),
                deny: cidrs(&["10.9.0.0/16"]),
                ..rule("/private/**", None, None, "")
            },
            Rule {
                deny: cidrs(&["192.0.2.7"]),
                ..rule("/**", None, None, "")
            },
        ])
        .unwrap();
        assert!(r.by_address());
        let v = |path: &[u8], client| {
            r.check(
                path,
                &Asked {
                    client,
                    ..Asked::default()
                },
            )
        };
        let serve = Verdict::Serve {
            fallback: None,
            auth: None,
        };
        assert_eq!(v(b"private/a.txt", ip("10.1.2.3")), serve);
        assert_eq!(v(b"private/a.txt", ip("::ffff:10.1.2.3")), serve);
        assert_eq!(v(b"private/a.txt", ip("::1")), serve);
        assert_eq!(
            v(b"private/a.txt", ip("10.9.0.1")),
            Verdict::Refuse(403, Refusal::Address)
        );
        assert_eq!(
            v(b"private/a.txt", ip("11.0.0.1")),
            Verdict::Refuse(403, Refusal::Address)
        );
        assert_eq!(
            v(b"private/index.html", ip("127.0.0.1")),
            Verdict::Refuse(403, Refusal::Address)
        );
        assert_eq!(v(b"public.txt", ip("11.0.0.1")), serve);
        // Every matching rule counts: the later deny of all paths too.
        assert_eq!(
            v(b"public.txt", ip("192.0.2.7")),
            Verdict::Refuse(403, Refusal::Address)
        );
        // An unknown client is refused where an address rule matches.
        assert_eq!(
            v(b"public.txt", None),
            Verdict::Refuse(403, Refusal::Address)
        );
        // Rules without such keys need no address.
        let plain = Rules::new(vec![rule("/**", Some("no-cache"), None, "")]).unwrap();
        assert!(!plain.by_address());
        assert_eq!(plain.check(b"a", &Asked::default()), serve);
    }

    #[test]
    fn redirects_substitute_path_and_query() {
        let red = |s: &str| Redirect::parse(s).unwrap();
        let r = red("301 https://example.org{path}?{query}");
        assert_eq!(r.status, 301);
        assert_eq!(
            r.location(b"/a%20b/c", b"x=1"),
            "https://example.org/a%20b/c?x=1"
        );
        // No query: no `?`.
        assert_eq!(r.location(b"/a", b""), "https://example.org/a");
        // `//evil.example` stays beneath the configured host.
        assert_eq!(
            r.location(b"//evil.example", b""),
            "https://example.org//evil.example"
        );
        // A relative target cannot be turned into another host's URL.
        let rel = red("308 {path}");
        assert_eq!(rel.location(b"//evil.example/x", b""), "/evil.example/x");
        assert_eq!(rel.location(b"/\\evil.example", b""), "/evil.example");
        assert_eq!(rel.location(b"/ok", b""), "/ok");
        // Bytes that cannot go in a header are encoded.
        assert_eq!(rel.location(b"/a\r\nX: y", b""), "/a%0D%0AX:%20y");
        assert_eq!(
            red("302 /new/{nothing}").location(b"/a", b""),
            "/new/{nothing}"
        );
        for bad in [
            "301",
            "200 /x",
            "303 /x",
            "301 example.org/x",
            "301 //evil.example{path}",
            "301 https://{path}",
            "301 https:///x",
            "301 ftp://example.org/",
            "301 /a b",
            "301 /a\nb",
            "x /a",
        ] {
            let e = Redirect::parse(bad).unwrap_err();
            assert!(e.contains("redirect") && !e.contains('\n'), "{bad}: {e}");
        }
        let rules = Rules::new(vec![
            Rule {
                redirect: Some(red("301 https://old.example{path}")),
                ..rule("/old/**", None, None, "")
            },
            Rule {
                redirect: Some(red("302 /new/")),
                ..rule("/old/moved/*", None, None, "")
            },
        ])
        .unwrap();
        assert_eq!(
            rules.check(b"old/a", &at(b"/old/a")),
            Verdict::Redirect(301, "https://old.example/old/a".into())
        );
        // The last matching rule's redirect answers.
        assert_eq!(
            rules.check(b"old/moved/a", &at(b"/old//moved/a")),
            Verdict::Redirect(302, "/new/".into())
        );
        assert_eq!(
            rules.check(b"new/a", &at(b"/new/a")),
            Verdict::Serve {
                fallback: None,
                auth: None,
            }
        );
    }

    #[test]
    fn fallback_is_the_last_matching() {
        let fb = |p: &str| Some(CString::new(p).unwrap());
        let rules = Rules::new(vec![
            Rule {
                fallback: fb("index.html"),
                ..rule("/**", None, None, "")
            },
            Rule {
                fallback: fb("admin/index.html"),
                ..rule("/admin/**", None, None, "")
            },
        ])
        .unwrap();
        assert_eq!(
            rules.check(b"admin/users/7", &at(b"/admin/users/7")),
            Verdict::Serve {
                fallback: fb("admin/index.html").as_ref(),
                auth: None,
            }
        );
        assert_eq!(
            rules.check(b"about", &at(b"/about")),
            Verdict::Serve {
                fallback: fb("index.html").as_ref(),
                auth: None,
            }
        );
    }

    #[test]
    fn literal_prefixes_rule_out_paths_without_a_glob_test() {
        assert_eq!(literal_prefix("/private/**"), b"/private/");
        assert_eq!(literal_prefix("/**/*.mp4"), b"/");
        assert_eq!(literal_prefix("**/x"), b"");
        assert_eq!(literal_prefix("/a/{b,c}/d"), b"/a/");
        assert_eq!(literal_prefix("/a\\*b"), b"/a");
        let p = |v: &[&str]| v.iter().map(|x| literal_prefix(x)).collect::<Vec<_>>();
        assert!(under_any(&p(&["/private/**"]), b"private/a"));
        assert!(!under_any(&p(&["/private/**"]), b"privat"));
        assert!(!under_any(&p(&["/private/**"]), b"public/a"));
        assert!(under_any(&p(&["/private/**", "/**/*.mp4"]), b"x.mp4"));
        assert!(under_any(&p(&["**/x"]), b"a/x"));
        assert!(!under_any(&[], b"a"));
    }

    #[test]
    fn a_simple_glob_matches_as_globset_does() {
        assert!(is_simple("/private/**"));
        assert!(is_simple("/**"));
        assert!(!is_simple("/private/**/*.mp4"));
        assert!(!is_simple("/a*/**"));
        assert!(!is_simple("/private**"));
        assert!(!is_simple("**"));
        let paths: [&[u8]; 9] = [
            b"private/a",
            b"private/a/b",
            b"private/",
            b"private",
            b"privateer/a",
            b"x/private/a",
            b"index.html",
            b"a",
            b"",
        ];
        for pattern in ["/private/**", "/**", "/a/b/**"] {
            let g = GlobBuilder::new(pattern)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .unwrap()
                .compile_matcher();
            let prefix = literal_prefix(pattern);
            for rel in paths {
                let p = slash_path(rel);
                assert_eq!(
                    under(&prefix, rel),
                    g.is_match(OsStr::from_bytes(&p)),
                    "{pattern} {}",
                    String::from_utf8_lossy(rel)
                );
            }
        }
    }
}
