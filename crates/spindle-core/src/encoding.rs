//! Precompressed sidecars: which `Content-Encoding` to serve.
//!
//! With `precompressed = ["br", "zstd", "gzip"]`, a request for `app.js`
//! whose `Accept-Encoding` allows brotli is answered from `app.js.br` if
//! that file exists and is no older than `app.js`, with
//! `Content-Encoding: br`. Nothing is compressed on the fly. This module
//! only parses and negotiates; the session asks the driver to open the
//! candidates in turn ([`crate::Session::opened`]).

/// A content coding spindle can serve from a sidecar file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Br,
    Zstd,
    Gzip,
}

/// The most `Accept-Encoding` list elements looked at; the rest are
/// ignored, so a long header costs a bounded amount of work.
pub const MAX_ACCEPT_ENCODING_ITEMS: usize = 32;

impl Encoding {
    /// Every coding, in the default order of preference (smallest first).
    pub const ALL: [Encoding; 3] = [Encoding::Br, Encoding::Zstd, Encoding::Gzip];

    /// The coding's token in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Br => "br",
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
        }
    }

    /// The file name suffix of its sidecar.
    pub fn suffix(self) -> &'static str {
        match self {
            Encoding::Br => ".br",
            Encoding::Zstd => ".zst",
            Encoding::Gzip => ".gz",
        }
    }

    /// From a configuration name: the token, or the suffix without its dot
    /// (`zst`, `gz`).
    pub fn from_name(name: &str) -> Option<Encoding> {
        match name.trim().to_ascii_lowercase().as_str() {
            "br" | "brotli" => Some(Encoding::Br),
            "zstd" | "zst" => Some(Encoding::Zstd),
            "gzip" | "gz" => Some(Encoding::Gzip),
            _ => None,
        }
    }
}

/// The codings of `offered` (the server's order of preference) that an
/// `Accept-Encoding` value allows, best first: by the client's q-value,
/// then by the server's order. No header, an empty one, or one that is
/// garbage allows none (the identity is always acceptable and is the
/// fallback). `*` covers codings the header does not name; `q=0` refuses.
/// `x-gzip` counts as `gzip` (RFC 9110 §8.4.1.3).
pub fn negotiate(accept: Option<&[u8]>, offered: &[Encoding]) -> Vec<Encoding> {
    let Some(accept) = accept else {
        return Vec::new();
    };
    // q-values in thousandths; None: not named.
    let mut named: [Option<u16>; 3] = [None; 3];
    let mut star: Option<u16> = None;
    for item in accept.split(|&b| b == b',').take(MAX_ACCEPT_ENCODING_ITEMS) {
        let mut parts = item.split(|&b| b == b';');
        let token = trim(parts.next().unwrap_or(b""));
        if token.is_empty() {
            continue;
        }
        let mut q = Some(1000);
        for p in parts {
            let p = trim(p);
            if p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=") {
                q = parse_q(trim(&p[2..]));
            }
        }
        // A malformed q-value makes the element meaningless: skip it.
        let Some(q) = q else { continue };
        let slot = if token == b"*" {
            &mut star
        } else if let Some(e) = Encoding::ALL.iter().position(|e| {
            token.eq_ignore_ascii_case(e.token().as_bytes())
                || (*e == Encoding::Gzip && token.eq_ignore_ascii_case(b"x-gzip"))
        }) {
            &mut named[e]
        } else {
            continue;
        };
        // Named twice: the higher value wins (lenient, as browsers never do it).
        *slot = Some(slot.map_or(q, |old| old.max(q)));
    }
    let mut out: Vec<(u16, usize, Encoding)> = offered
        .iter()
        .enumerate()
        .filter_map(|(rank, &e)| {
            let i = Encoding::ALL.iter().position(|x| *x == e).expect("known");
            let q = named[i].or(star)?;
            (q > 0).then_some((q, rank, e))
        })
        .collect();
    out.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    out.into_iter().map(|(_, _, e)| e).collect()
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// An RFC 9110 qvalue (`0`, `0.5`, `1.000`) in thousandths.
fn parse_q(v: &[u8]) -> Option<u16> {
    match v {
        [b'0'] => Some(0),
        [b'1'] => Some(1000),
        [b'1', b'.', rest @ ..] if rest.len() <= 3 && rest.iter().all(|&b| b == b'0') => Some(1000),
        [b'0', b'.', rest @ ..] if rest.len() <= 3 && rest.iter().all(u8::is_ascii_digit) => {
            let mut n = 0u16;
            for i in 0..3 {
                n = n * 10 + rest.get(i).map_or(0, |d| u16::from(d - b'0'));
            }
            Some(n)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Encoding::*;

    fn n(v: &str) -> Vec<Encoding> {
        negotiate(Some(v.as_bytes()), &Encoding::ALL)
    }

    #[test]
    fn browsers() {
        assert_eq!(n("gzip, deflate, br, zstd"), vec![Br, Zstd, Gzip]);
        assert_eq!(n("gzip, deflate"), vec![Gzip]);
        assert_eq!(n("identity"), vec![]);
        assert_eq!(negotiate(None, &Encoding::ALL), vec![]);
        // Chrome's media requests.
        assert_eq!(n("identity;q=1, *;q=0"), vec![]);
    }

    #[test]
    fn q_values_then_server_order() {
        assert_eq!(n("gzip;q=1, br;q=0.5"), vec![Gzip, Br]);
        assert_eq!(n("br;q=0, gzip"), vec![Gzip]);
        assert_eq!(n("*"), vec![Br, Zstd, Gzip]);
        assert_eq!(n("*;q=0.1, gzip;q=0.2"), vec![Gzip, Br, Zstd]);
        assert_eq!(n("*, br;q=0"), vec![Zstd, Gzip]);
        assert_eq!(n("GZIP ; Q=0.001"), vec![Gzip]);
        assert_eq!(n("x-gzip"), vec![Gzip]);
        // Only what the server offers, in its order.
        assert_eq!(negotiate(Some(b"br, gzip"), &[Gzip, Br]), vec![Gzip, Br]);
        assert_eq!(negotiate(Some(b"br"), &[Gzip]), vec![]);
    }

    #[test]
    fn garbage_allows_nothing_it_does_not_name() {
        assert_eq!(n(""), vec![]);
        assert_eq!(n(",,, ;;; ="), vec![]);
        assert_eq!(n("br;q=2"), vec![]);
        assert_eq!(n("br;q=0.5000"), vec![]);
        assert_eq!(n("br;q=-1, gzip"), vec![Gzip]);
        assert_eq!(n("br;q=abc"), vec![]);
        assert_eq!(n("\u{7f}\u{1}gzip"), vec![]);
        let long = "x, ".repeat(10_000) + "gzip";
        assert_eq!(n(&long), vec![], "elements past the cap are ignored");
    }

    #[test]
    fn qvalues() {
        assert_eq!(parse_q(b"0"), Some(0));
        assert_eq!(parse_q(b"0.5"), Some(500));
        assert_eq!(parse_q(b"0.05"), Some(50));
        assert_eq!(parse_q(b"0.123"), Some(123));
        assert_eq!(parse_q(b"1.000"), Some(1000));
        assert_eq!(parse_q(b"1.001"), None);
        assert_eq!(parse_q(b"0."), Some(0));
        assert_eq!(parse_q(b""), None);
    }

    #[test]
    fn names() {
        assert_eq!(Encoding::from_name("zst"), Some(Zstd));
        assert_eq!(Encoding::from_name(" GZIP "), Some(Gzip));
        assert_eq!(Encoding::from_name("deflate"), None);
    }
}
