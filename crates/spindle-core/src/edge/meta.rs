//! What the edge keeps of one version of an origin object ([`Meta`]), how
//! it pins every slice of a response to that version ([`Version`]), and
//! how long it stays fresh (RFC 9111 for a shared cache, RFC 5861's
//! `stale-if-error`: [`Freshness`]).

use crate::date;

/// The origin's fields the edge keeps and sends on to clients. Hop-by-hop
/// fields (`Connection`, `Keep-Alive`, `Transfer-Encoding`, ...), framing
/// (`Content-Length`, `Content-Range`, `Accept-Ranges`: the edge answers
/// ranges itself) and everything else are dropped.
pub const KEPT_FIELDS: [&str; 7] = [
    "content-type",
    "etag",
    "last-modified",
    "cache-control",
    "expires",
    "content-disposition",
    "content-language",
];

/// The most bytes of kept fields one object may carry; an origin that
/// sends more is answered 502, as a malformed one.
pub const MAX_KEPT_BYTES: usize = 8 * 1024;

/// One version of an origin object: every slice of one response must
/// carry the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub length: u64,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

impl Version {
    /// The precondition that pins a slice fetch to this version: `If-Match`
    /// with a strong ETag, else `If-Unmodified-Since` with the
    /// Last-Modified date, else none (then the length and the validators
    /// on the answer are all that is checked, by [`Version::same`]).
    pub fn precondition(&self) -> Option<(&'static str, &str)> {
        match (&self.etag, &self.last_modified) {
            (Some(e), _) if !e.starts_with("W/") => Some(("if-match", e)),
            (_, Some(lm)) => Some(("if-unmodified-since", lm)),
            _ => None,
        }
    }

    /// Whether a slice's answer (its complete length from `Content-Range`
    /// and its validators) is of this version. An answer without a
    /// validator the version has is not: it could be any version.
    pub fn same(&self, other: &Version) -> bool {
        self.length == other.length
            && self.etag == other.etag
            && (self.etag.is_some() || self.last_modified == other.last_modified)
    }
}

/// How long a stored response may be used without asking the origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    /// `no-store` or `private` (a shared cache must not keep it): serve
    /// it through, never store it.
    pub store: bool,
    /// Seconds it is fresh from when it was fetched; 0 with `no-cache`
    /// (revalidate every time).
    pub lifetime: u64,
    /// Seconds past that it may still be served while the origin fails
    /// (`stale-if-error`, else the configured default; capped by the
    /// configured limit). 0 with `must-revalidate` or `proxy-revalidate`.
    pub stale_if_error: u64,
}

impl Freshness {
    /// Whether a copy fetched (or revalidated) at `fetched` may be served
    /// at `now` without asking the origin.
    pub fn fresh(&self, fetched: i64, now: i64) -> bool {
        now < fetched.saturating_add(self.lifetime as i64)
    }

    /// Whether it may be served at `now` because the origin failed.
    pub fn stale_usable(&self, fetched: i64, now: i64) -> bool {
        now < fetched.saturating_add((self.lifetime + self.stale_if_error) as i64)
    }

    /// From the origin's `Cache-Control`, `Expires` and `Date`; `default`
    /// seconds when none of them says (nginx's `proxy_cache_valid`),
    /// `stale_default` and `stale_max` for `stale-if-error`.
    pub fn of(
        cache_control: Option<&str>,
        expires: Option<&str>,
        date_field: Option<&str>,
        default: u64,
        stale_default: u64,
        stale_max: u64,
    ) -> Freshness {
        let mut f = Freshness {
            store: true,
            lifetime: default,
            stale_if_error: stale_default.min(stale_max),
        };
        let (mut max_age, mut s_maxage, mut revalidate) = (None, None, false);
        for d in cache_control.unwrap_or("").split(',') {
            let (name, value) = match d.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                None => (d.trim(), None),
            };
            let secs = value.and_then(|v| v.parse::<u64>().ok());
            match name.to_ascii_lowercase().as_str() {
                "no-store" | "private" => f.store = false,
                "no-cache" => s_maxage = Some(0),
                "max-age" => max_age = max_age.or(secs),
                "s-maxage" => s_maxage = s_maxage.or(secs),
                "must-revalidate" | "proxy-revalidate" => revalidate = true,
                "stale-if-error" => {
                    if let Some(s) = secs {
                        f.stale_if_error = s.min(stale_max);
                    }
                }
                _ => {}
            }
        }
        if revalidate {
            f.stale_if_error = 0;
        }
        f.lifetime = match (s_maxage.or(max_age), expires) {
            (Some(s), _) => s,
            (None, Some(e)) => {
                let e = date::parse(e.as_bytes()).unwrap_or(0);
                let d = date_field.and_then(|d| date::parse(d.as_bytes()));
                // An invalid Expires (0) means already expired.
                d.map_or(0, |d| (e - d).max(0) as u64)
            }
            (None, None) => default,
        };
        f
    }
}

/// What the edge keeps of one stored object: its version, its kept
/// fields, when it was fetched and until when it is fresh. Written beside
/// its slices as a small text record (`Meta::to_text`), read back
/// strictly: a record that does not parse is a miss, never a guess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub version: Version,
    /// Kept fields, names lowercase, in [`KEPT_FIELDS`]' order.
    pub fields: Vec<(String, String)>,
    /// Unix seconds it was fetched (or last revalidated).
    pub fetched: i64,
    pub freshness: Freshness,
}

const MAGIC: &str = "spindle-edge-meta 1";

impl Meta {
    /// Whether it may be served at Unix time `now` without asking the
    /// origin.
    pub fn fresh(&self, now: i64) -> bool {
        self.freshness.fresh(self.fetched, now)
    }

    /// Whether it may be served at `now` because the origin failed.
    pub fn stale_usable(&self, now: i64) -> bool {
        self.freshness.stale_usable(self.fetched, now)
    }

    pub fn to_text(&self) -> String {
        let v = &self.version;
        let mut s = format!(
            "{MAGIC}\nlength {}\nfetched {}\nlifetime {}\nstale-if-error {}\n",
            v.length, self.fetched, self.freshness.lifetime, self.freshness.stale_if_error
        );
        if let Some(e) = &v.etag {
            s.push_str(&format!("etag {e}\n"));
        }
        if let Some(lm) = &v.last_modified {
            s.push_str(&format!("last-modified {lm}\n"));
        }
        for (n, val) in &self.fields {
            s.push_str(&format!("field {n} {val}\n"));
        }
        s.push_str("end\n");
        s
    }

    /// A record read back; None if it is torn, from another format, or
    /// holds a value a header cannot carry.
    pub fn from_text(text: &str) -> Option<Meta> {
        let mut lines = text.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let mut m = Meta {
            version: Version {
                length: u64::MAX,
                etag: None,
                last_modified: None,
            },
            fields: Vec::new(),
            fetched: i64::MIN,
            freshness: Freshness {
                store: true,
                lifetime: 0,
                stale_if_error: 0,
            },
        };
        let mut ended = false;
        for line in lines {
            if ended
                || !line
                    .bytes()
                    .all(|b| b == b'\t' || (b' '..0x7f).contains(&b))
            {
                return None;
            }
            if line == "end" {
                ended = true;
                continue;
            }
            let (key, value) = line.split_once(' ')?;
            match key {
                "length" => m.version.length = value.parse().ok()?,
                "fetched" => m.fetched = value.parse().ok()?,
                "lifetime" => m.freshness.lifetime = value.parse().ok()?,
                "stale-if-error" => m.freshness.stale_if_error = value.parse().ok()?,
                "etag" => m.version.etag = Some(value.into()),
                "last-modified" => m.version.last_modified = Some(value.into()),
                "field" => {
                    let (n, v) = value.split_once(' ')?;
                    if !KEPT_FIELDS.contains(&n) {
                        return None;
                    }
                    m.fields.push((n.into(), v.into()));
                }
                _ => return None,
            }
        }
        let whole = ended && m.version.length != u64::MAX && m.fetched != i64::MIN;
        whole.then_some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(cc: Option<&str>, exp: Option<&str>, date: Option<&str>) -> Freshness {
        Freshness::of(cc, exp, date, 600, 60, 3600)
    }

    #[test]
    fn freshness_follows_rfc_9111_for_a_shared_cache() {
        assert_eq!(f(None, None, None).lifetime, 600);
        assert_eq!(f(Some("max-age=30"), None, None).lifetime, 30);
        assert_eq!(f(Some("max-age=30, s-maxage=90"), None, None).lifetime, 90);
        assert_eq!(f(Some("public, no-cache"), None, None).lifetime, 0);
        assert!(!f(Some("private, max-age=30"), None, None).store);
        assert!(!f(Some("No-Store"), None, None).store);
        let d = "Sun, 06 Nov 1994 08:49:37 GMT";
        let e = "Sun, 06 Nov 1994 08:50:37 GMT";
        assert_eq!(f(None, Some(e), Some(d)).lifetime, 60);
        assert_eq!(f(None, Some("0"), Some(d)).lifetime, 0);
        assert_eq!(f(Some("max-age=5"), Some(e), Some(d)).lifetime, 5);
    }

    #[test]
    fn stale_if_error_is_bounded_and_revalidation_forbids_it() {
        assert_eq!(f(None, None, None).stale_if_error, 60);
        assert_eq!(
            f(Some("stale-if-error=120"), None, None).stale_if_error,
            120
        );
        assert_eq!(
            f(Some("stale-if-error=99999"), None, None).stale_if_error,
            3600
        );
        assert_eq!(
            f(Some("must-revalidate, stale-if-error=120"), None, None).stale_if_error,
            0
        );
        assert_eq!(
            f(Some("stale-if-error=120, proxy-revalidate"), None, None).stale_if_error,
            0
        );
    }

    #[test]
    fn a_version_pins_slices_by_strong_etag_else_date() {
        let mut v = Version {
            length: 10,
            etag: Some("\"a\"".into()),
            last_modified: Some("Sun, 06 Nov 1994 08:49:37 GMT".into()),
        };
        assert_eq!(v.precondition(), Some(("if-match", "\"a\"")));
        let mut other = v.clone();
        assert!(v.same(&other));
        other.etag = Some("\"b\"".into());
        assert!(!v.same(&other));
        other = v.clone();
        other.length = 11;
        assert!(!v.same(&other));
        v.etag = Some("W/\"a\"".into());
        assert_eq!(v.precondition().unwrap().0, "if-unmodified-since");
        v.etag = None;
        other = v.clone();
        other.last_modified = None;
        assert!(!v.same(&other));
        v.last_modified = None;
        assert_eq!(v.precondition(), None);
    }

    #[test]
    fn a_record_round_trips_and_a_torn_one_is_refused() {
        let m = Meta {
            version: Version {
                length: 700_000_000,
                etag: Some("\"5f-61\"".into()),
                last_modified: Some("Sun, 06 Nov 1994 08:49:37 GMT".into()),
            },
            fields: vec![
                ("content-type".into(), "video/mp4".into()),
                ("cache-control".into(), "max-age=60".into()),
            ],
            fetched: 1_764_000_000,
            freshness: f(Some("max-age=60"), None, None),
        };
        let t = m.to_text();
        assert_eq!(Meta::from_text(&t), Some(m.clone()));
        assert!(m.fresh(1_764_000_059) && !m.fresh(1_764_000_060));
        assert!(m.stale_usable(1_764_000_119) && !m.stale_usable(1_764_000_120));
        // Torn anywhere before its end: refused.
        for cut in 0..t.len() - 4 {
            assert_eq!(Meta::from_text(&t[..cut]), None, "cut at {cut}");
        }
        assert_eq!(
            Meta::from_text(&t.replace("content-type", "x-secret")),
            None
        );
        assert_eq!(Meta::from_text(&t.replace("video/mp4", "a\rb")), None);
        assert_eq!(Meta::from_text(&format!("{t}length 1\n")), None);
    }
}
