//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B).
//!
//! The code is canonical: codes of one length are consecutive in symbol
//! order, and each length's first code follows the previous length's last.
//! So the table below holds only each symbol's code length (Appendix B's
//! `len` column, symbols 0-255 and EOS); the codes themselves, and the
//! tables the decoder walks, are computed from it at compile time. The
//! unit tests check the computed codes against Appendix B's and the
//! decoder against Appendix C's Huffman examples (in `hpack`).

/// The end-of-string symbol: never valid inside a string.
const EOS: usize = 256;

/// Shortest and longest code lengths in the table.
const MIN_LEN: usize = 5;
const MAX_LEN: usize = 30;

/// Padding at the end of a string is at most this many bits (§5.2).
const MAX_PADDING_BITS: u32 = 7;

/// Code length of each symbol (RFC 7541 Appendix B), EOS last.
const LENS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// The tables derived from [`LENS`].
struct Code {
    /// The code of each symbol, right-aligned.
    code: [u32; 257],
    /// Symbols ordered by (length, symbol).
    sorted: [u16; 257],
    /// For each length: its first code, how many codes it has, and where
    /// its symbols start in `sorted`.
    first: [u32; MAX_LEN + 1],
    count: [u32; MAX_LEN + 1],
    start: [u32; MAX_LEN + 1],
}

const fn build() -> Code {
    let mut c = Code {
        code: [0; 257],
        sorted: [0; 257],
        first: [0; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        start: [0; MAX_LEN + 1],
    };
    let mut next: u32 = 0;
    let mut placed: usize = 0;
    let mut len = MIN_LEN;
    while len <= MAX_LEN {
        c.first[len] = next;
        c.start[len] = placed as u32;
        let mut sym = 0;
        while sym < 257 {
            if LENS[sym] as usize == len {
                c.code[sym] = next;
                c.sorted[placed] = sym as u16;
                placed += 1;
                next += 1;
                c.count[len] += 1;
            }
            sym += 1;
        }
        next <<= 1;
        len += 1;
    }
    assert!(placed == 257, "every symbol has a length in range");
    c
}

static CODE: Code = build();

/// Bytes `src` takes Huffman-encoded.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| usize::from(LENS[usize::from(b)])).sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-encoded to `out`, padded with 1 bits (the EOS
/// prefix) to a whole byte.
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let len = u32::from(LENS[usize::from(b)]);
        acc = (acc << len) | u64::from(CODE.code[usize::from(b)]);
        bits += len;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(((acc << pad) | ((1u64 << pad) - 1)) as u8);
    }
}

/// Why a Huffman string is refused (each is a COMPRESSION_ERROR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HuffmanError {
    /// The EOS symbol inside the string.
    Eos,
    /// More than 7 bits of padding, or padding that is not all 1 bits.
    BadPadding,
}

/// Appends the decoding of `src` to `out`. `out` grows by at most
/// `src.len() * 8 / 5` bytes (the shortest code is 5 bits).
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let mut code: u32 = 0;
    let mut len: usize = 0;
    for &byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            if len < MIN_LEN {
                continue;
            }
            let off = code.wrapping_sub(CODE.first[len]);
            if code >= CODE.first[len] && off < CODE.count[len] {
                let sym = usize::from(CODE.sorted[(CODE.start[len] + off) as usize]);
                if sym == EOS {
                    return Err(HuffmanError::Eos);
                }
                out.push(sym as u8);
                code = 0;
                len = 0;
            } else if len >= MAX_LEN {
                // Every 30-bit pattern is a code or a prefix of none: the
                // only one left undecoded is past EOS, which is all ones.
                return Err(HuffmanError::Eos);
            }
        }
    }
    // What is left must be a prefix of EOS (all ones), at most 7 bits.
    if len as u32 > MAX_PADDING_BITS || code != (1u32 << len) - 1 {
        return Err(HuffmanError::BadPadding);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The computed codes are Appendix B's (a sample from each end and
    /// the middle of the table, and EOS).
    #[test]
    fn codes_match_appendix_b() {
        let expect: [(usize, u32, u8); 10] = [
            (0, 0x1ff8, 13),
            (1, 0x7fffd8, 23),
            (9, 0xffffea, 24),
            (10, 0x3ffffffc, 30),
            (b' ' as usize, 0x14, 6),
            (b'0' as usize, 0x0, 5),
            (b'a' as usize, 0x3, 5),
            (b'z' as usize, 0x7b, 7),
            (255, 0x3ffffee, 26),
            (EOS, 0x3fffffff, 30),
        ];
        for (sym, code, len) in expect {
            assert_eq!((CODE.code[sym], LENS[sym]), (code, len), "symbol {sym}");
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        assert_eq!(enc.len(), encoded_len(&all));
        let mut dec = Vec::new();
        decode(&enc, &mut dec).unwrap();
        assert_eq!(dec, all);
    }

    #[test]
    fn eos_and_bad_padding_are_refused() {
        // EOS (30 ones) then padding.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()),
            Err(HuffmanError::Eos)
        );
        // 'a' (00011) then 3 padding bits of zeros.
        assert_eq!(
            decode(&[0x18], &mut Vec::new()),
            Err(HuffmanError::BadPadding)
        );
        // 'a' then 8 bits of ones: padding longer than 7 bits.
        assert_eq!(
            decode(&[0x1f, 0xff], &mut Vec::new()),
            Err(HuffmanError::BadPadding)
        );
        // 'a' and 3 one bits: fine.
        let mut out = Vec::new();
        decode(&[0x1f], &mut out).unwrap();
        assert_eq!(out, b"a");
    }
}
