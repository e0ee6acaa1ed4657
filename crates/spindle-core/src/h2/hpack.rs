//! HPACK (RFC 7541): the header block decoder a server needs, with its
//! dynamic table, and an encoder for response headers.
//!
//! Written here rather than taken from a crate: the `hpack` crate is
//! unmaintained and panics on crafted input (RUSTSEC-2023-0085); its fork
//! `loona-hpack` accepts a dynamic table size update anywhere in a block
//! (RFC 7541 §4.2 allows it only at the start) and cannot stop a bomb
//! early (its callback cannot refuse), and `httlib-hpack` decodes every
//! field into a new allocation and has not changed since 2021. What a
//! server needs is small: the decoder below bounds its work by the block's
//! length and its memory by the table size and one field's bytes, and
//! stops handing out fields once the header list passes its limit.
//!
//! The encoder keeps no dynamic table (RFC 7541 §2.3 lets an encoder
//! leave it empty, so the peer's SETTINGS_HEADER_TABLE_SIZE never
//! matters): `:status` from the static table where it is there, each field
//! as a literal without indexing, its name by static index when it has
//! one, each string Huffman-coded when that is shorter.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::huffman;

/// Bytes a field costs in the dynamic table and in a header list's size
/// besides its name and value (RFC 7541 §4.1, RFC 9113 §6.5.2).
pub const FIELD_OVERHEAD: usize = 32;

/// Largest integer a block may encode: anything larger is a
/// COMPRESSION_ERROR, so decoding never overflows.
const MAX_INT: u64 = u32::MAX as u64;

/// Most dynamic table size updates at the start of one block (§4.2: at
/// most two, the smallest size since the last block and then the final
/// one).
const MAX_SIZE_UPDATES: usize = 2;

/// The static table (RFC 7541 Appendix A), index 1 first.
pub const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// A header block the decoder refuses: a COMPRESSION_ERROR, which ends the
/// connection (the two tables can no longer agree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside a representation.
    Truncated,
    /// An integer over 2^32 - 1.
    IntegerTooLarge,
    /// Index 0, or past the end of both tables.
    BadIndex,
    /// A table size update after the first field, more than two of them,
    /// or a size over our SETTINGS_HEADER_TABLE_SIZE.
    BadSizeUpdate,
    /// A Huffman string with EOS or bad padding.
    Huffman,
}

/// A table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// The decoder's dynamic table (§2.3.2): newest entry first.
#[derive(Debug, Default)]
struct Table {
    entries: VecDeque<Entry>,
    size: usize,
    max: usize,
}

impl Table {
    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            let (n, v) = self.entries.pop_back().expect("size > 0 means an entry");
            self.size -= n.len() + v.len() + FIELD_OVERHEAD;
        }
    }

    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + FIELD_OVERHEAD;
        if size > self.max {
            // §4.4: an entry larger than the table empties it.
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max - size);
        self.entries.push_front((name.into(), value.into()));
        self.size += size;
        debug_assert!(self.size <= self.max);
    }

    fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }
}

/// Decodes header blocks for one connection.
#[derive(Debug)]
pub struct Decoder {
    table: Table,
    /// Our SETTINGS_HEADER_TABLE_SIZE: the most a size update may ask for.
    limit: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

/// One field's name or value: where its bytes are.
#[derive(Clone, Copy)]
enum Str {
    /// The static table's entry, name or value.
    Static(usize, bool),
    /// The dynamic table's entry (0 = newest), name or value.
    Dynamic(usize, bool),
    /// The decoder's scratch buffer (name or value).
    Scratch(bool),
}

impl Decoder {
    /// A decoder whose dynamic table may grow to `table_size` bytes (the
    /// SETTINGS_HEADER_TABLE_SIZE we advertise).
    pub fn new(table_size: usize) -> Decoder {
        Decoder {
            table: Table {
                max: table_size,
                ..Table::default()
            },
            limit: table_size,
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// Bytes the dynamic table holds now (entries plus their overhead).
    pub fn table_size(&self) -> usize {
        self.table.size
    }

    /// Decodes one whole header block (HEADERS plus its CONTINUATIONs),
    /// handing each field to `field` in order while the header list's
    /// size (names, values and 32 bytes per field) stays within
    /// `max_list_size`. Past that no more fields are handed out, but the
    /// rest of the block is still decoded so the dynamic table stays in
    /// step with the peer's; the result is then `Ok(false)`. An indexed
    /// field is never copied, so a block that names one large table entry
    /// over and over (an "HPACK bomb") costs its length in time and
    /// nothing in memory.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list_size: usize,
        field: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<bool, HpackError> {
        let mut pos = 0;
        let mut list_size = 0usize;
        let mut fits = true;
        let mut fields = 0usize;
        let mut updates = 0usize;
        while pos < block.len() {
            let b = block[pos];
            let (name, value, index) = if b & 0x80 != 0 {
                // §6.1 indexed field.
                let (i, n) = int(&block[pos..], 7)?;
                pos += n;
                let (name, value) = self.lookup(i)?;
                (name, value, false)
            } else if b & 0xe0 == 0x20 {
                // §6.3 dynamic table size update: only before any field.
                let (size, n) = int(&block[pos..], 5)?;
                pos += n;
                updates += 1;
                if fields > 0 || updates > MAX_SIZE_UPDATES || size > self.limit {
                    return Err(HpackError::BadSizeUpdate);
                }
                self.table.set_max(size);
                continue;
            } else {
                // §6.2 literal: with incremental indexing (01, 6-bit
                // index), without indexing (0000) or never indexed (0001),
                // both with a 4-bit index.
                let (prefix, index) = if b & 0xc0 == 0x40 {
                    (6, true)
                } else {
                    (4, false)
                };
                let (i, n) = int(&block[pos..], prefix)?;
                pos += n;
                let name = if i == 0 {
                    pos += string(&block[pos..], &mut self.name)?;
                    Str::Scratch(true)
                } else {
                    self.lookup(i)?.0
                };
                pos += string(&block[pos..], &mut self.value)?;
                (name, Str::Scratch(false), index)
            };
            fields += 1;
            let (n, v) = (self.get(name), self.get(value));
            list_size = list_size.saturating_add(n.len() + v.len() + FIELD_OVERHEAD);
            if fits && list_size <= max_list_size {
                field(n, v);
            } else {
                fits = false;
            }
            if index {
                let (n, v) = (n.to_vec(), v.to_vec());
                self.table.insert(&n, &v);
            }
        }
        Ok(fits)
    }

    /// Where index `i` (1-based, static then dynamic) points.
    fn lookup(&self, i: usize) -> Result<(Str, Str), HpackError> {
        match i {
            0 => Err(HpackError::BadIndex),
            1..=61 => Ok((Str::Static(i - 1, true), Str::Static(i - 1, false))),
            _ if i - 62 < self.table.entries.len() => {
                Ok((Str::Dynamic(i - 62, true), Str::Dynamic(i - 62, false)))
            }
            _ => Err(HpackError::BadIndex),
        }
    }

    fn get(&self, s: Str) -> &[u8] {
        match s {
            Str::Static(i, true) => STATIC_TABLE[i].0.as_bytes(),
            Str::Static(i, false) => STATIC_TABLE[i].1.as_bytes(),
            Str::Dynamic(i, true) => &self.table.entries[i].0,
            Str::Dynamic(i, false) => &self.table.entries[i].1,
            Str::Scratch(true) => &self.name,
            Str::Scratch(false) => &self.value,
        }
    }
}

/// Decodes an integer with an `prefix`-bit prefix (§5.1) from the start of
/// `buf`: its value and the bytes it took.
fn int(buf: &[u8], prefix: u32) -> Result<(usize, usize), HpackError> {
    let max_prefix = (1u8 << prefix) - 1;
    let first = buf.first().ok_or(HpackError::Truncated)? & max_prefix;
    if first < max_prefix {
        return Ok((usize::from(first), 1));
    }
    let mut value = u64::from(max_prefix);
    let mut shift = 0u32;
    for (i, &b) in buf.iter().enumerate().skip(1) {
        value += u64::from(b & 0x7f) << shift;
        if value > MAX_INT {
            return Err(HpackError::IntegerTooLarge);
        }
        if b & 0x80 == 0 {
            return Ok((value as usize, i + 1));
        }
        shift += 7;
        if shift > 28 {
            // A sixth continuation byte can only add zeros or overflow.
            return Err(HpackError::IntegerTooLarge);
        }
    }
    Err(HpackError::Truncated)
}

/// Decodes a string literal (§5.2) from the start of `buf` into `out`
/// (replacing its contents); returns the bytes it took.
fn string(buf: &[u8], out: &mut Vec<u8>) -> Result<usize, HpackError> {
    let huff = buf.first().ok_or(HpackError::Truncated)? & 0x80 != 0;
    let (len, n) = int(buf, 7)?;
    let raw = buf.get(n..n + len).ok_or(HpackError::Truncated)?;
    out.clear();
    if huff {
        huffman::decode(raw, out).map_err(|_| HpackError::Huffman)?;
    } else {
        out.extend_from_slice(raw);
    }
    Ok(n + len)
}

/// Appends an integer with a `prefix`-bit prefix, the prefix's byte
/// starting with `flags`: inline for the one byte most take (an index).
#[inline]
fn put_int(out: &mut Vec<u8>, flags: u8, prefix: u32, value: usize) {
    let max_prefix = (1usize << prefix) - 1;
    if value < max_prefix {
        out.push(flags | value as u8);
        return;
    }
    put_long_int(out, flags, max_prefix, value);
}

/// [`put_int`] of a value that does not fit the prefix.
fn put_long_int(out: &mut Vec<u8>, flags: u8, max_prefix: usize, value: usize) {
    out.push(flags | max_prefix as u8);
    let mut rest = value - max_prefix;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Appends a string literal, Huffman-coded if that is shorter.
fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    let h = huffman::encoded_len(s);
    if h < s.len() {
        put_int(out, 0x80, 7, h);
        huffman::encode(s, out);
    } else {
        put_int(out, 0, 7, s.len());
        out.extend_from_slice(s);
    }
}

/// Appends the encoding of `:status` (an index when the static table has
/// the code, else a literal with the name's index).
pub fn encode_status(status: u16, out: &mut Vec<u8>) {
    debug_assert!((100..1000).contains(&status));
    let digits = [
        b'0' + (status / 100 % 10) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
    ];
    match STATIC_TABLE[7..14]
        .iter()
        .position(|(_, v)| v.as_bytes() == digits)
    {
        Some(i) => put_int(out, 0x80, 7, i + 8),
        None => {
            put_int(out, 0, 4, 8);
            put_str(out, &digits);
        }
    }
}

/// Appends one field as a literal without indexing (§6.2.2), its name
/// lowercased (HTTP/2 field names are lowercase; RFC 9113 §8.2.1).
///
/// The static table's names are lowercase, so a head's `Content-Type`
/// finds its entry by a comparison without case, with no lowercased copy;
/// a name outside the table is lowercased on the stack when it fits
/// [`NAME_ON_STACK`].
pub fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    with_lower(name, |lower| encode_lower(lower, value, out));
}

/// Calls `f` with `name` lowercased: a copy on the stack when it fits
/// [`NAME_ON_STACK`] (one pass the compiler vectorizes, cheaper than
/// looking for an uppercase letter first), else the name itself when it
/// is lowercase already.
pub(crate) fn with_lower<R>(name: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    if name.len() <= NAME_ON_STACK {
        let mut buf = [0u8; NAME_ON_STACK];
        let lower = &mut buf[..name.len()];
        for (l, &b) in lower.iter_mut().zip(name) {
            *l = b.to_ascii_lowercase();
        }
        return f(lower);
    }
    if name.iter().any(u8::is_ascii_uppercase) {
        f(&name.to_ascii_lowercase())
    } else {
        f(name)
    }
}

/// A literal without indexing (§6.2.2) of a lowercase name and its value.
fn encode_lower(lower: &[u8], value: &[u8], out: &mut Vec<u8>) {
    match static_name(lower) {
        Some(i) => put_int(out, 0, 4, i + 1),
        None => {
            out.push(0);
            put_str(out, lower);
        }
    }
    put_str(out, value);
}

/// Largest dynamic table the encoder keeps (bytes as §4.1 counts them),
/// whatever the peer allows: a connection's response fields repeat (the
/// server's name, types, validators of the files asked again, the date of
/// this second), and 4 KiB holds a few dozen of them.
pub const ENCODER_TABLE_MAX: usize = 4096;

/// Longest value the encoder adds to its table: a longer one (a long
/// `Content-Security-Policy`, say) would push out many shorter ones.
const ENCODER_INDEX_MAX_VALUE: usize = 256;

/// The encoder's dynamic table (§2.3.2, §4), newest entry first: a
/// response field sent once on a connection is sent after that as one
/// index byte, neither Huffman-coded nor copied again.
///
/// Invariant: the table changes only as the peer's decoder will change
/// its own when it reads the blocks in the order they were encoded, so
/// every block must go out, whole and in order (HEADERS are queued in
/// `H2Conn::out` as they are encoded; a reset stream's HEADERS still go).
#[derive(Debug)]
pub struct Encoder {
    entries: VecDeque<EncEntry>,
    size: usize,
    max: usize,
    /// Size updates owed at the start of the next block (§4.2): the
    /// smallest the maximum fell to since the last block, then its value
    /// now.
    update: Option<(usize, usize)>,
    /// Entries added so far: the newest's number is `added - 1`.
    added: u64,
    /// An entry's number by the hash of its name and value (a hash
    /// already, so not hashed again).
    by_hash: HashMap<u64, u64, BuildHasherDefault<HashIsKey>>,
    /// The entry number each of the last block's first fields was sent
    /// as ([`NO_ENTRY`]: none): a response's fields mostly come in the
    /// same order with the same values as the last one's, and one
    /// comparison with that entry then finds it, with no hash.
    last_block: [u64; LAST_BLOCK_FIELDS],
    /// The next field's place in this block.
    at: usize,
}

/// Fields of a block [`Encoder::last_block`] remembers.
const LAST_BLOCK_FIELDS: usize = 16;

/// No entry, in [`Encoder::last_block`].
const NO_ENTRY: u64 = u64::MAX;

#[derive(Debug)]
struct EncEntry {
    hash: u64,
    /// Name (lowercase) then value.
    bytes: Box<[u8]>,
    name_len: usize,
}

impl EncEntry {
    fn size(&self) -> usize {
        self.bytes.len() + FIELD_OVERHEAD
    }
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    /// An empty table at the protocol's initial size (4096, §6.5.2).
    pub fn new() -> Encoder {
        Encoder {
            entries: VecDeque::new(),
            size: 0,
            max: ENCODER_TABLE_MAX.min(super::settings::DEFAULT_HEADER_TABLE_SIZE as usize),
            update: None,
            added: 0,
            by_hash: HashMap::default(),
            last_block: [NO_ENTRY; LAST_BLOCK_FIELDS],
            at: 0,
        }
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE: the table is kept within it
    /// (and within [`ENCODER_TABLE_MAX`]), and a change is signalled at the
    /// start of the next block.
    pub fn set_peer_max(&mut self, peer: usize) {
        let max = peer.min(ENCODER_TABLE_MAX);
        if max == self.max {
            return;
        }
        self.max = max;
        self.evict_to(max);
        let smallest = self.update.map_or(max, |(s, _)| s.min(max));
        self.update = Some((smallest, max));
    }

    /// Bytes the table holds (for the connection's memory bound).
    pub fn table_size(&self) -> usize {
        self.size
    }

    /// Starts a header block: the size updates owed go first (§4.2).
    pub fn begin_block(&mut self, out: &mut Vec<u8>) {
        self.at = 0;
        if let Some((smallest, now)) = self.update.take() {
            if smallest != now {
                put_int(out, 0x20, 5, smallest);
            }
            put_int(out, 0x20, 5, now);
        }
    }

    /// Appends one field: an index when the table has it, else a literal
    /// that adds it to the table (§6.2.1), or, for a value that changes
    /// with each response or is too long to keep, a literal without
    /// indexing (§6.2.2). The name is lowercased (RFC 9113 §8.2.1).
    pub fn field(&mut self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        with_lower(name, |lower| self.lower_field(lower, value, out));
    }

    fn lower_field(&mut self, lower: &[u8], value: &[u8], out: &mut Vec<u8>) {
        let at = self.at;
        self.at = self.at.saturating_add(1);
        let last = self.last_block.get(at).copied().unwrap_or(NO_ENTRY);
        if let Some(i) = self.holds(last, lower, value) {
            return put_int(out, 0x80, 7, STATIC_TABLE.len() + 1 + i);
        }
        if !worth_indexing(lower, value) {
            return encode_lower(lower, value, out);
        }
        let hash = field_hash(lower, value);
        if let Some(n) = self.by_hash.get(&hash).copied() {
            if let Some(i) = self.holds(n, lower, value) {
                self.remember(at, n);
                return put_int(out, 0x80, 7, STATIC_TABLE.len() + 1 + i);
            }
        }
        match static_name(lower) {
            Some(i) => put_int(out, 0x40, 6, i + 1),
            None => {
                out.push(0x40);
                put_str(out, lower);
            }
        }
        put_str(out, value);
        if self.insert(hash, lower, value) {
            self.remember(at, self.added - 1);
        }
    }

    /// Entry number `n`'s index from the newest (0), if it is still in
    /// the table and holds exactly `name` and `value`.
    fn holds(&self, n: u64, name: &[u8], value: &[u8]) -> Option<usize> {
        let i = self.added.checked_sub(1)?.checked_sub(n)?;
        let e = self.entries.get(usize::try_from(i).ok()?)?;
        let same = e.name_len == name.len()
            && &e.bytes[..e.name_len] == name
            && &e.bytes[e.name_len..] == value;
        same.then_some(i as usize)
    }

    fn remember(&mut self, at: usize, n: u64) {
        if let Some(slot) = self.last_block.get_mut(at) {
            *slot = n;
        }
    }

    /// Adds an entry; `false` when it is larger than the table.
    fn insert(&mut self, hash: u64, name: &[u8], value: &[u8]) -> bool {
        let size = name.len() + value.len() + FIELD_OVERHEAD;
        if size > self.max {
            // §4.4: an entry larger than the table empties it.
            self.evict_to(0);
            return false;
        }
        self.evict_to(self.max - size);
        let mut bytes = Vec::with_capacity(name.len() + value.len());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(value);
        self.entries.push_front(EncEntry {
            hash,
            bytes: bytes.into(),
            name_len: name.len(),
        });
        self.size += size;
        self.by_hash.insert(hash, self.added);
        self.added += 1;
        debug_assert!(self.size <= self.max);
        true
    }

    fn evict_to(&mut self, max: usize) {
        while self.size > max {
            let e = self.entries.pop_back().expect("size > 0 means an entry");
            self.size -= e.size();
            let n = self.added - 1 - self.entries.len() as u64;
            if self.by_hash.get(&e.hash) == Some(&n) {
                self.by_hash.remove(&e.hash);
            }
        }
        if self.entries.is_empty() {
            self.by_hash.clear();
        }
    }
}

/// Whether a response field is worth a place in the table: not one whose
/// value names this response alone (`content-range`, a redirect's
/// `location`, a challenge), nor a long value.
fn worth_indexing(lower: &[u8], value: &[u8]) -> bool {
    value.len() <= ENCODER_INDEX_MAX_VALUE
        && !matches!(
            lower,
            b"content-range" | b"location" | b"www-authenticate" | b"set-cookie"
        )
}

/// The [`Hasher`] of [`Encoder`]'s map, whose keys are [`field_hash`]es:
/// the key as it is.
#[derive(Default)]
struct HashIsKey(u64);

impl Hasher for HashIsKey {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys come here; any other input still hashes.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

fn field_hash(name: &[u8], value: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    let mut h = foldhash::fast::FixedState::with_seed(0x5eed).build_hasher();
    h.write(name);
    h.write_u8(0xff);
    h.write(value);
    h.finish()
}

/// Longest field name [`encode_field`] lowercases without allocating.
const NAME_ON_STACK: usize = 64;

/// The first static-table entry (from 0) named `name`, at compile time.
const fn static_index(name: &str) -> usize {
    let mut i = 0;
    while i < STATIC_TABLE.len() {
        let n = STATIC_TABLE[i].0.as_bytes();
        let want = name.as_bytes();
        if n.len() == want.len() {
            let mut j = 0;
            while j < n.len() && n[j] == want[j] {
                j += 1;
            }
            if j == n.len() {
                return i;
            }
        }
        i += 1;
    }
    panic!("not in the static table")
}

/// The static-table entry named `lower` (a lowercase name): the names a
/// file server's responses carry by one `match`, any other by a search.
fn static_name(lower: &[u8]) -> Option<usize> {
    const DATE: usize = static_index("date");
    const ETAG: usize = static_index("etag");
    const SERVER: usize = static_index("server");
    const CONTENT_TYPE: usize = static_index("content-type");
    const CONTENT_LENGTH: usize = static_index("content-length");
    const LAST_MODIFIED: usize = static_index("last-modified");
    const ACCEPT_RANGES: usize = static_index("accept-ranges");
    const CACHE_CONTROL: usize = static_index("cache-control");
    const CONTENT_RANGE: usize = static_index("content-range");
    const CONTENT_ENCODING: usize = static_index("content-encoding");
    const VARY: usize = static_index("vary");
    match lower {
        b"date" => Some(DATE),
        b"etag" => Some(ETAG),
        b"server" => Some(SERVER),
        b"content-type" => Some(CONTENT_TYPE),
        b"content-length" => Some(CONTENT_LENGTH),
        b"last-modified" => Some(LAST_MODIFIED),
        b"accept-ranges" => Some(ACCEPT_RANGES),
        b"cache-control" => Some(CACHE_CONTROL),
        b"content-range" => Some(CONTENT_RANGE),
        b"content-encoding" => Some(CONTENT_ENCODING),
        b"vary" => Some(VARY),
        _ => STATIC_TABLE.iter().position(|(n, _)| n.as_bytes() == lower),
    }
}

#[cfg(test)]
mod tests;
