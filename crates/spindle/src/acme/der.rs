//! The few DER structures ACME needs, written and read by hand: a PKCS#10
//! certificate request for a P-256 key and some DNS names, and, from a
//! certificate, its validity and its DNS names. Bounded and panic-free on
//! any input: a reader that meets something unexpected returns `None`.

/// Object identifiers, as DER contents.
const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const OID_EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// The longest common name X.509 allows (ub-common-name).
const MAX_COMMON_NAME: usize = 64;

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const UTF8_STRING: u8 = 0x0c;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
/// `[2] IMPLICIT IA5String`: a GeneralName's dNSName.
const DNS_NAME: u8 = 0x82;

/// One TLV: `tag`, its length, `contents`.
pub fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = contents.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes = n.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(contents);
    out
}

fn seq(parts: &[&[u8]]) -> Vec<u8> {
    tlv(SEQUENCE, &parts.concat())
}

fn bits(contents: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8]; // no unused bits
    v.extend_from_slice(contents);
    tlv(BIT_STRING, &v)
}

/// A P-256 public key (an uncompressed point) as SubjectPublicKeyInfo.
pub fn p256_spki(point: &[u8]) -> Vec<u8> {
    seq(&[
        &seq(&[&tlv(OID, OID_EC_PUBLIC_KEY), &tlv(OID, OID_P256)]),
        &bits(point),
    ])
}

/// The subjectAltName extension's value: GeneralNames of dNSNames.
pub fn san_value(names: &[String]) -> Vec<u8> {
    let names: Vec<u8> = names
        .iter()
        .flat_map(|n| tlv(DNS_NAME, n.as_bytes()))
        .collect();
    tlv(SEQUENCE, &names)
}

/// One Extension: its OID, critical or not, its value.
pub fn extension(oid: &[u8], critical: bool, value: &[u8]) -> Vec<u8> {
    let crit = if critical {
        vec![0x01, 0x01, 0xff]
    } else {
        Vec::new()
    };
    seq(&[&tlv(OID, oid), &crit, &tlv(OCTET_STRING, value)])
}

/// A certificate request for `names` (the first also its common name,
/// when short enough), signed by `sign` (ECDSA P-256 SHA-256, ASN.1).
pub fn csr(
    names: &[String],
    point: &[u8],
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, String>,
) -> Result<Vec<u8>, String> {
    let subject = match names.first() {
        Some(n) if n.len() <= MAX_COMMON_NAME => seq(&[&tlv(
            SET,
            &seq(&[&tlv(OID, OID_COMMON_NAME), &tlv(UTF8_STRING, n.as_bytes())]),
        )]),
        _ => seq(&[]),
    };
    let extensions = seq(&[&extension(OID_SUBJECT_ALT_NAME, false, &san_value(names))]);
    let attribute = seq(&[&tlv(OID, OID_EXTENSION_REQUEST), &tlv(SET, &extensions)]);
    let info = seq(&[
        &tlv(INTEGER, &[0]),
        &subject,
        &p256_spki(point),
        &tlv(0xa0, &attribute),
    ]);
    let sig = sign(&info)?;
    Ok(seq(&[
        &info,
        &seq(&[&tlv(OID, OID_ECDSA_SHA256)]),
        &bits(&sig),
    ]))
}

/// `id-pe-acmeIdentifier` (RFC 8737 §6.1).
const OID_ACME_IDENTIFIER: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f];

/// A UTCTime (years 1950 to 2049) for Unix seconds.
fn utc_time(t: i64) -> Vec<u8> {
    let (y, m, d, h, mi, s) = spindle_core::date::civil(t);
    let text = format!("{:02}{m:02}{d:02}{h:02}{mi:02}{s:02}Z", y.rem_euclid(100));
    tlv(UTC_TIME, text.as_bytes())
}

/// The TLS-ALPN-01 certificate for `name` (RFC 8737 §3): self-signed,
/// `name` its only subjectAltName, and the critical acmeIdentifier
/// extension holding the SHA-256 of the key authorization; valid from
/// `now` less a day to `now` plus a week. `serial`: 16 random bytes.
pub fn tls_alpn_cert(
    name: &str,
    digest: &[u8],
    point: &[u8],
    serial: [u8; 16],
    now: i64,
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, String>,
) -> Result<Vec<u8>, String> {
    let mut serial = serial;
    serial[0] = (serial[0] & 0x7f) | 0x01; // positive, no leading zero
    let dn = seq(&[&tlv(
        SET,
        &seq(&[
            &tlv(OID, OID_COMMON_NAME),
            &tlv(UTF8_STRING, b"ACME TLS-ALPN-01"),
        ]),
    )]);
    let alg = seq(&[&tlv(OID, OID_ECDSA_SHA256)]);
    let extensions = seq(&[
        &extension(OID_SUBJECT_ALT_NAME, false, &san_value(&[name.to_string()])),
        &extension(OID_ACME_IDENTIFIER, true, &tlv(OCTET_STRING, digest)),
    ]);
    let tbs = seq(&[
        &tlv(0xa0, &tlv(INTEGER, &[2])),
        &tlv(INTEGER, &serial),
        &alg,
        &dn,
        &seq(&[&utc_time(now - 86_400), &utc_time(now + 7 * 86_400)]),
        &dn,
        &p256_spki(point),
        &tlv(0xa3, &extensions),
    ]);
    let sig = sign(&tbs)?;
    Ok(seq(&[&tbs, &alg, &bits(&sig)]))
}

/// A DER reader over a slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The next TLV: its tag and contents.
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.0.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            (len, &rest[n..])
        };
        if rest.len() < len {
            return None;
        }
        self.0 = &rest[len..];
        Some((tag, &rest[..len]))
    }

    fn expect(&mut self, tag: u8) -> Option<&'a [u8]> {
        match self.next()? {
            (t, c) if t == tag => Some(c),
            _ => None,
        }
    }
}

/// What the server needs of an issued certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Validity, in Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// Its subjectAltName's DNS names.
    pub names: Vec<String>,
}

/// Reads a certificate's validity and DNS names.
pub fn cert_info(der: &[u8]) -> Option<CertInfo> {
    let mut cert = Reader(Reader(der).expect(SEQUENCE)?);
    let mut tbs = Reader(cert.expect(SEQUENCE)?);
    let (mut tag, _) = tbs.next()?;
    if tag == 0xa0 {
        tag = tbs.next()?.0; // the serial number follows the version
    }
    if tag != INTEGER {
        return None;
    }
    tbs.expect(SEQUENCE)?; // signature algorithm
    tbs.expect(SEQUENCE)?; // issuer
    let mut validity = Reader(tbs.expect(SEQUENCE)?);
    let not_before = time(validity.next()?)?;
    let not_after = time(validity.next()?)?;
    tbs.expect(SEQUENCE)?; // subject
    tbs.expect(SEQUENCE)?; // subject public key info
    let mut names = Vec::new();
    while let Some((tag, contents)) = tbs.next() {
        if tag != 0xa3 {
            continue; // issuer or subject unique ID
        }
        let mut exts = Reader(Reader(contents).expect(SEQUENCE)?);
        while let Some((_, ext)) = exts.next() {
            let mut ext = Reader(ext);
            if ext.expect(OID)? != OID_SUBJECT_ALT_NAME {
                continue;
            }
            let (mut tag, mut value) = ext.next()?;
            if tag == 0x01 {
                (tag, value) = ext.next()?; // critical
            }
            if tag != OCTET_STRING {
                return None;
            }
            let mut general = Reader(Reader(value).expect(SEQUENCE)?);
            while let Some((tag, name)) = general.next() {
                if tag == DNS_NAME {
                    names.push(String::from_utf8_lossy(name).to_ascii_lowercase());
                }
            }
        }
    }
    Some(CertInfo {
        not_before,
        not_after,
        names,
    })
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as
/// Unix seconds.
fn time((tag, s): (u8, &[u8])) -> Option<i64> {
    let s = std::str::from_utf8(s).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        UTC_TIME if s.len() == 12 => {
            let y: i64 = s[..2].parse().ok()?;
            (if y < 50 { 2000 + y } else { 1900 + y }, &s[2..])
        }
        GENERALIZED_TIME if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    if !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day, h, m, sec) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    #[test]
    fn reads_the_test_certificate() {
        let pem = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/tls/p256.pem"
        ))
        .unwrap();
        let der = CertificateDer::pem_slice_iter(&pem)
            .next()
            .unwrap()
            .unwrap();
        let info = cert_info(&der).unwrap();
        assert!(info.names.contains(&"localhost".to_string()), "{info:?}");
        assert!(info.not_after > info.not_before, "{info:?}");
        assert!(info.not_before > 1_600_000_000, "{info:?}");
    }

    #[test]
    fn times() {
        assert_eq!(time((UTC_TIME, b"700101000000Z")), Some(0));
        assert_eq!(
            time((GENERALIZED_TIME, b"20261127003500Z")),
            Some(1_795_739_700)
        );
        assert_eq!(time((UTC_TIME, b"7001010000Z")), None);
        assert_eq!(time((UTC_TIME, b"70010100000+Z")), None);
    }

    #[test]
    fn garbage_is_none_not_a_panic() {
        for bad in [
            &b""[..],
            b"\x30",
            b"\x30\x84\xff\xff\xff\xff",
            b"\x30\x03\x30\x01",
        ] {
            assert_eq!(cert_info(bad), None);
        }
    }

    #[test]
    fn a_tls_alpn_certificate_reads_back() {
        let cert = tls_alpn_cert(
            "a.test",
            &[7; 32],
            &[4; 65],
            [0xff; 16],
            1_795_739_700,
            |_| Ok(vec![0x30, 0x00]),
        )
        .unwrap();
        let info = cert_info(&cert).unwrap();
        assert_eq!(info.names, vec!["a.test".to_string()]);
        assert_eq!(info.not_before, 1_795_739_700 - 86_400);
        assert_eq!(info.not_after, 1_795_739_700 + 7 * 86_400);
    }

    #[test]
    fn long_lengths() {
        let v = tlv(OCTET_STRING, &[7u8; 300]);
        assert_eq!(&v[..4], &[0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(Reader(&v).expect(OCTET_STRING).unwrap().len(), 300);
    }
}
