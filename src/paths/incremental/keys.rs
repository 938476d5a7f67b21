//! Group keys as dense integer ids: the dataflow carries a `u64` per
//! `(window, key)` instead of the key's bytes, so its records are `Copy` and
//! compare as integers. The dictionary lives on the host, beside the
//! `RowConverter` that made the bytes; an id is reclaimed once the last
//! window that can hold its key has closed, so the dictionary holds only the
//! keys of open windows. It is not checkpointed: state files carry the keys
//! themselves and a restore interns them again.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::time::EventTime;

/// A hasher for packed keys: each word is mixed in by a folded multiply
/// (the product's two halves XORed), so every bit of a key reaches every bit
/// of its hash. FxHash carries a word's bits only upwards, and packed keys
/// differing only in the top bytes of a word (row-format integers above 255,
/// big-endian) shared their buckets and tags: interning one of Nexmark's
/// auction ids cost about 1 100 instructions.
#[derive(Clone, Copy, Default)]
pub(super) struct Mix(u64);

impl Mix {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
}

impl std::hash::Hasher for Mix {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u64(&mut self, x: u64) {
        let f = u128::from(self.0 ^ x) * u128::from(Mix::K);
        self.0 = (f as u64) ^ ((f >> 64) as u64);
    }

    #[inline]
    fn write_u128(&mut self, x: u128) {
        self.write_u64(x as u64);
        self.write_u64((x >> 64) as u64);
    }

    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x.into());
    }

    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A hash map over packed keys (see [`Mix`]).
pub(super) type MixMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<Mix>>;

/// The id of the key of a query without `GROUP BY`.
pub(super) const GLOBAL: u64 = 0;

/// A key of at most 15 bytes packed with its length into one integer, so
/// the common short keys (one or two numbers) hash and compare as integers.
///
/// It reads the key in at most three fixed-width loads (overlapping ones for
/// lengths between the widths) rather than copying a variable length: it
/// runs once per ingested row.
#[inline]
pub(super) fn packed(key: &[u8]) -> Option<u128> {
    let n = key.len();
    let word = |at: usize| {
        key.get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_le_bytes)
    };
    let half = |at: usize| {
        key.get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, |b| u64::from(u32::from_le_bytes(b)))
    };
    let byte = |at: usize| key.get(at).map_or(0, |&b| u64::from(b));
    let (lo, hi) = match n {
        16.. => return None,
        // bytes 8..n are the top of the last 8 bytes
        9..=15 => (word(0), word(n - 8) >> (8 * (16 - n))),
        8 => (word(0), 0),
        // bytes 4..n are the top of the last 4 bytes
        4..=7 => (half(0) | ((half(n - 4) >> (8 * (8 - n))) << 32), 0),
        1..=3 => (
            byte(0) | byte(n / 2) << (8 * (n / 2)) | byte(n - 1) << (8 * (n - 1)),
            0,
        ),
        0 => (0, 0),
    };
    Some(u128::from(lo) | u128::from(hi) << 64 | (n as u128) << 120)
}

/// A key of 16 to 31 bytes as two integers: its first 16 bytes, and the
/// rest [`packed`] (with its length), so keys of one or two numbers and a
/// short string (a group key beside the value of a `COUNT(DISTINCT …)`)
/// hash and compare as integers too.
#[inline]
pub(super) fn packed_mid(key: &[u8]) -> Option<(u128, u128)> {
    let head = <[u8; 16]>::try_from(key.get(..16)?).ok()?;
    Some((u128::from_le_bytes(head), packed(&key[16..])?))
}

/// The bytes of a [`packed`] key (the first `len` of the array).
#[inline]
pub(super) fn unpacked(p: u128) -> ([u8; 16], usize) {
    let len = (p >> 120) as usize;
    let mut b = (p & !(0xff << 120)).to_le_bytes();
    b[15] = 0;
    (b, len.min(15))
}

/// The width in `arrow::row`'s encoding of an integer (or date, or
/// timestamp) column's values: a validity byte and the value's bytes.
/// `None` for other types.
pub(super) fn encoded_width(dt: &arrow::datatypes::DataType) -> Option<usize> {
    use arrow::datatypes::DataType as D;
    match dt {
        D::Int8 | D::UInt8 => Some(2),
        D::Int16 | D::UInt16 => Some(3),
        D::Int32 | D::UInt32 | D::Date32 => Some(5),
        D::Int64 | D::UInt64 | D::Date64 | D::Timestamp(_, _) => Some(9),
        _ => None,
    }
}

/// Calls `emit(i, v)` for each row `i` of an integer (or date, or
/// timestamp) column `c`, in order: `v` holds the value's bytes as
/// `arrow::row` encodes them (ascending, as [`super::key_converter`] builds
/// it): big-endian with the sign bit flipped for signed types, read as a
/// little-endian integer (so the value's bytes swapped); `None` for a null
/// (which encodes as zeros). `None` (and no call) for a column of another
/// type.
fn encode_column(
    c: &arrow::array::ArrayRef,
    mut emit: impl FnMut(usize, Option<u64>),
) -> Option<()> {
    use arrow::array::{Array, ArrowPrimitiveType, AsArray, PrimitiveArray};
    use arrow::datatypes::{DataType as D, TimeUnit};
    use arrow::datatypes::{
        Date32Type, Date64Type, Int16Type, Int32Type, Int64Type, Int8Type,
        TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
        TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
    };

    fn each<T: ArrowPrimitiveType>(
        a: &PrimitiveArray<T>,
        enc: impl Fn(T::Native) -> u64,
        emit: &mut impl FnMut(usize, Option<u64>),
    ) {
        let values = a.values();
        match a.nulls().filter(|n| n.null_count() > 0) {
            None => {
                for (i, &v) in values.iter().enumerate() {
                    emit(i, Some(enc(v)));
                }
            }
            Some(n) => {
                for (i, &v) in values.iter().enumerate() {
                    emit(i, n.is_valid(i).then(|| enc(v)));
                }
            }
        }
    }
    // a value's big-endian bytes read as little-endian: the bytes swapped
    macro_rules! signed {
        ($t:ty, $u:ty, $bits:expr) => {
            each(
                c.as_primitive::<$t>(),
                |v| u64::from(((v as $u) ^ (1 << ($bits - 1))).swap_bytes()),
                &mut emit,
            )
        };
    }
    macro_rules! unsigned {
        ($t:ty) => {
            each(
                c.as_primitive::<$t>(),
                |v| u64::from(v.swap_bytes()),
                &mut emit,
            )
        };
    }
    match c.data_type() {
        D::Int8 => signed!(Int8Type, u8, 8),
        D::Int16 => signed!(Int16Type, u16, 16),
        D::Int32 => signed!(Int32Type, u32, 32),
        D::Date32 => signed!(Date32Type, u32, 32),
        D::Int64 => signed!(Int64Type, u64, 64),
        D::Date64 => signed!(Date64Type, u64, 64),
        D::Timestamp(TimeUnit::Second, _) => signed!(TimestampSecondType, u64, 64),
        D::Timestamp(TimeUnit::Millisecond, _) => signed!(TimestampMillisecondType, u64, 64),
        D::Timestamp(TimeUnit::Microsecond, _) => signed!(TimestampMicrosecondType, u64, 64),
        D::Timestamp(TimeUnit::Nanosecond, _) => signed!(TimestampNanosecondType, u64, 64),
        D::UInt8 => unsigned!(UInt8Type),
        D::UInt16 => unsigned!(UInt16Type),
        D::UInt32 => unsigned!(UInt32Type),
        D::UInt64 => unsigned!(UInt64Type),
        _ => return None,
    }
    Some(())
}

/// The total width of keys whose columns are all integers (or dates, or
/// timestamps), in `arrow::row`'s encoding; `None` if a column is not.
fn encoded_total(cols: &[arrow::array::ArrayRef]) -> Option<usize> {
    cols.iter().map(|c| encoded_width(c.data_type())).sum()
}

/// [`packed`] of every row's key as `arrow::row` encodes it (ascending, nulls
/// first, as [`super::key_converter`] builds it), computed column by column
/// without encoding the rows: `None` unless every key column is an integer
/// (or a date or timestamp, stored as one) and the row fits in 15 bytes.
///
/// Each such column encodes as one byte (`1` valid, `0` null) and the value's
/// big-endian bytes with the sign bit flipped for signed types (zeros for a
/// null); `packed` reads the row's bytes as a little-endian integer, so a
/// column at byte `at` adds its bytes, byte-swapped, shifted by `8 * at`.
pub(super) fn packed_columns(cols: &[arrow::array::ArrayRef]) -> Option<Vec<u128>> {
    let total = encoded_total(cols)?;
    if total > 15 {
        return None;
    }
    let n = cols.first().map_or(0, |c| c.len());
    let mut out = vec![(total as u128) << 120; n];
    let mut at = 0;
    for c in cols {
        let shift = 8 * at;
        encode_column(c, |i, v| {
            if let Some(v) = v {
                out[i] |= (1 | u128::from(v) << 8) << shift;
            }
        })?;
        at += encoded_width(c.data_type())?;
    }
    Some(out)
}

/// The longest key [`encode_rows`] writes.
pub(super) const ENCODED_ROW: usize = 32;

/// Writes each row's key as `arrow::row` encodes it, with `options` per
/// column (ascending and nulls first without them, as
/// [`super::key_converter`] builds it), into `out`, one zeroed array per
/// row; returns the keys' length. `None` unless every column is an integer
/// (or a date or timestamp, stored as one) and a key takes at most
/// [`ENCODED_ROW`] bytes: what `arrow::row` gives, written column by column
/// without its offsets and per-row slices.
pub(super) fn encode_rows(
    cols: &[arrow::array::ArrayRef],
    options: Option<&[arrow::compute::SortOptions]>,
    out: &mut [[u8; ENCODED_ROW]],
) -> Option<usize> {
    let len = encoded_total(cols)?;
    if len > ENCODED_ROW || options.is_some_and(|o| o.len() != cols.len()) {
        return None;
    }
    let mut at = 0;
    for (i, c) in cols.iter().enumerate() {
        let width = encoded_width(c.data_type())?;
        let o = options.map(|o| o[i]).unwrap_or_default();
        // a null is its sentinel and zeros; a descending value's bytes are inverted
        let null = if o.nulls_first { 0 } else { 0xFF };
        let flip = if o.descending { u64::MAX } else { 0 };
        encode_column(c, |i, v| match v {
            Some(v) => {
                out[i][at] = 1;
                out[i][at + 1..at + width].copy_from_slice(&(v ^ flip).to_le_bytes()[..width - 1]);
            }
            None => out[i][at] = null,
        })?;
        at += width;
    }
    Some(len)
}

/// Whether [`order_keys`] takes sort keys of columns of these types.
pub(super) fn order_keys_fit(types: &[&arrow::datatypes::DataType]) -> bool {
    let total: Option<usize> = types.iter().map(|dt| encoded_width(dt)).sum();
    !types.is_empty() && total.is_some_and(|t| t <= ENCODED_ROW)
}

/// Sort keys of integer (or date, or timestamp) columns that take at most
/// [`ENCODED_ROW`] bytes, as pairs of integers that compare (as tuples) as
/// the rows' `arrow::row` bytes with `options` do. Of one or two columns, an
/// integer per column: the column's bytes (validity byte, then the value's)
/// read as a big-endian integer; each column's encoding has a fixed width.
/// Of more, the key's bytes (zero-padded, the same padding for every key)
/// as two big-endian integers. `None` for other keys.
pub(super) fn order_keys(
    cols: &[arrow::array::ArrayRef],
    options: &[arrow::compute::SortOptions],
) -> Option<Vec<(u128, u128)>> {
    const _: () = assert!(ENCODED_ROW == 32, "two integers hold a key");
    if options.len() != cols.len() {
        return None;
    }
    if cols.len() > 2 {
        let mut rows = vec![[0u8; ENCODED_ROW]; cols[0].len()];
        encode_rows(cols, Some(options), &mut rows)?;
        let half = |b: &[u8]| u128::from_be_bytes(b.try_into().expect("16 bytes"));
        return Some(
            rows.iter()
                .map(|r| (half(&r[..16]), half(&r[16..])))
                .collect(),
        );
    }
    // one column's integer: the validity byte (or the null's sentinel) above the value
    let encoder = |c: &arrow::array::ArrayRef, o: &arrow::compute::SortOptions| {
        let size = encoded_width(c.data_type())? - 1;
        let null = if o.nulls_first {
            0
        } else {
            0xFFu128 << (8 * size)
        };
        let valid = 1u128 << (8 * size);
        let flip = if o.descending { u64::MAX } else { 0 };
        // `v` holds the value's bytes in memory order: as a big-endian integer
        let drop = 8 * (8 - size);
        Some(move |v: Option<u64>| match v {
            Some(v) => valid | u128::from((v ^ flip).swap_bytes() >> drop),
            None => null,
        })
    };
    let n = cols.first().map_or(0, |c| c.len());
    let mut out: Vec<(u128, u128)> = Vec::with_capacity(n);
    let first = encoder(cols.first()?, options.first()?)?;
    encode_column(&cols[0], |_, v| out.push((first(v), 0)))?;
    if let (Some(c), Some(o)) = (cols.get(1), options.get(1)) {
        let second = encoder(c, o)?;
        encode_column(c, |i, v| out[i].1 = second(v))?;
    }
    Some(out)
}

/// Keys of 16 to [`INLINE_KEY`] bytes whose columns [`packed_columns`] takes,
/// as `arrow::row` encodes them, one fixed array per row (the first `len`
/// bytes are the key; see [`encode_rows`]).
pub(super) struct FixedRows {
    pub(super) rows: Vec<[u8; ENCODED_ROW]>,
    pub(super) len: usize,
}

/// [`FixedRows`] of `cols`, or `None` unless every column is an integer (or
/// a date or timestamp) and a key takes 16 to [`INLINE_KEY`] bytes.
pub(super) fn fixed_rows(cols: &[arrow::array::ArrayRef]) -> Option<FixedRows> {
    let len = encoded_total(cols)?;
    if !(16..=INLINE_KEY).contains(&len) {
        return None;
    }
    let mut rows = vec![[0u8; ENCODED_ROW]; cols.first().map_or(0, |c| c.len())];
    encode_rows(cols, None, &mut rows)?;
    Some(FixedRows { rows, len })
}

/// The longest key [`packed`] or [`packed_mid`] takes.
const INLINE_KEY: usize = 31;

/// The longest key kept inline in a [`KeyBuf`]: every key [`packed`] or
/// [`packed_mid`] takes, and longer ones up to the size the boxed form
/// takes anyway (a tag, the length and 38 bytes are 40 bytes, as a tag and
/// a boxed slice are), such as four integer columns of 9 bytes each.
const INLINE_BYTES: usize = 38;

const _: () = assert!(INLINE_BYTES >= INLINE_KEY);

/// A key's bytes as the dictionary keeps them: inline up to
/// [`INLINE_BYTES`] bytes (no allocation per key interned, and none freed
/// when its id is reclaimed), longer ones boxed.
#[derive(Clone, Debug)]
enum KeyBuf {
    Inline { len: u8, bytes: [u8; INLINE_BYTES] },
    Boxed(Box<[u8]>),
}

impl KeyBuf {
    fn new(key: &[u8]) -> Self {
        if key.len() <= INLINE_BYTES {
            let mut bytes = [0u8; INLINE_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            KeyBuf::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            KeyBuf::Boxed(key.into())
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            KeyBuf::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyBuf::Boxed(b) => b,
        }
    }
}

/// Ids per chunk of [`Chunked`], as a power of two.
const CHUNK_BITS: u32 = 12;

/// The slot of `id` within its chunk.
#[inline]
fn in_chunk(id: u64) -> usize {
    (id & ((1 << CHUNK_BITS) - 1)) as usize
}

/// Key bytes by id, in chunks of `2^CHUNK_BITS` ids that snapshots share:
/// a snapshot moves each chunk it does not share yet behind an `Arc` (no
/// key is copied) and clones one pointer per chunk. The first write to a
/// chunk after a snapshot takes it back, copying it only if the snapshot
/// still holds it; every other write goes straight to the chunk, without
/// the atomic operation `Arc::make_mut` costs each time (under `perf`, one
/// per new key was a tenth of Nexmark q19's interning).
#[derive(Debug, Default)]
struct Chunked {
    chunks: Vec<Chunk>,
    len: u64,
}

/// A chunk of [`Chunked`]: its slots, or (since a snapshot) an `Arc` of them
/// that the snapshot shares.
#[derive(Debug, Default)]
struct Chunk {
    own: Vec<Option<KeyBuf>>,
    shared: Option<Arc<Vec<Option<KeyBuf>>>>,
}

impl Chunk {
    fn slots(&self) -> &[Option<KeyBuf>] {
        match &self.shared {
            Some(shared) => shared,
            None => &self.own,
        }
    }

    /// The slots, to write: taken back from a snapshot's `Arc` first (a copy
    /// if the snapshot still holds it).
    #[inline]
    fn slots_mut(&mut self) -> &mut Vec<Option<KeyBuf>> {
        if let Some(shared) = self.shared.take() {
            self.own = Arc::unwrap_or_clone(shared);
        }
        &mut self.own
    }

    /// The slots, shared: moved behind an `Arc` if they were not already.
    fn share(&mut self) -> Arc<Vec<Option<KeyBuf>>> {
        Arc::clone(
            self.shared
                .get_or_insert_with(|| Arc::new(std::mem::take(&mut self.own))),
        )
    }
}

impl Chunked {
    fn get(&self, id: u64) -> Option<&KeyBuf> {
        let chunk = self.chunks.get((id >> CHUNK_BITS) as usize)?;
        chunk.slots().get(in_chunk(id))?.as_ref()
    }

    /// The slot of `id` (an id [`Self::push`] gave), to write.
    fn slot_mut(&mut self, id: u64) -> &mut Option<KeyBuf> {
        &mut self.chunks[(id >> CHUNK_BITS) as usize].slots_mut()[in_chunk(id)]
    }

    /// A new, free id.
    fn push(&mut self) -> u64 {
        let id = self.len;
        if in_chunk(id) == 0 {
            self.chunks.push(Chunk {
                own: Vec::with_capacity(1 << CHUNK_BITS),
                shared: None,
            });
        }
        if let Some(last) = self.chunks.last_mut() {
            last.slots_mut().push(None);
        }
        self.len += 1;
        id
    }

    /// Every chunk, shared with the snapshot this makes.
    fn freeze(&mut self) -> Frozen {
        Frozen {
            chunks: self.chunks.iter_mut().map(Chunk::share).collect(),
        }
    }
}

/// [`Chunked`]'s chunks at one moment, shared (`Send`).
#[derive(Debug)]
struct Frozen {
    chunks: Vec<Arc<Vec<Option<KeyBuf>>>>,
}

impl Frozen {
    fn get(&self, id: u64) -> Option<&KeyBuf> {
        let chunk = self.chunks.get((id >> CHUNK_BITS) as usize)?;
        chunk.get(in_chunk(id))?.as_ref()
    }
}

#[derive(Debug, Default)]
pub(super) struct KeyDictionary {
    /// Ids of keys of at most 15 bytes, by [`packed`] key.
    short: MixMap<u128, u64>,
    /// Ids of keys of 16 to 31 bytes, by [`packed_mid`] key.
    mid: MixMap<(u128, u128), u64>,
    /// Ids of longer keys, by a hash of their bytes (see [`long_hash`]; the
    /// bytes are in `keys`, not copied here): the first id with that hash,
    /// and any others.
    long: MixMap<u64, (u64, Vec<u64>)>,
    /// How many ids `long` holds.
    long_len: usize,
    /// By id: the key's bytes (`None`: a free id), shared with
    /// [`KeySnapshot`]s.
    keys: Chunked,
    /// By id: the latest end of a window its key was seen in.
    latest: Vec<EventTime>,
    free: Vec<u64>,
    /// By end, the ids whose latest end grew to it: taken when W passes
    /// `end`, an id is free if its latest end is still `end`. The ends are
    /// few (the open windows'), so a bucket per end, not a heap of every
    /// `(end, id)`.
    expiry: BTreeMap<EventTime, Vec<u64>>,
    /// Ids whose last window closed, their keys kept (see [`Self::reclaim`]); may
    /// name an id seen again since, each at most once.
    expired: Vec<u64>,
    /// By id: whether it is in `expired`.
    listed: Vec<bool>,
    /// How many ids are expired and kept: in none of the open windows.
    cached: usize,
    /// The last `w` given to [`Self::reclaim`]: an id whose latest end is at or
    /// before it is expired.
    through: EventTime,
    /// Expired keys kept at least (0: none, each freed as it expires).
    cache: usize,
}

/// Expired keys an engine's dictionary keeps at least before it frees them
/// (and at least as many as it holds live ones): a key that comes back in a
/// later window, as keys of a bounded key space do, keeps its id instead of
/// being removed and interned again. Memory stays within twice the live
/// keys, or this many more.
const CACHED_KEYS: usize = 1 << 16;

/// No id: a key [`KeyDictionary::intern_packed`] did not find (ids count from 0,
/// and a dictionary never holds `u64::MAX` of them).
const ABSENT: u64 = u64::MAX;

impl KeyDictionary {
    /// A dictionary that keeps up to [`CACHED_KEYS`] expired keys (see
    /// [`Self::reclaim`]).
    pub(super) fn caching() -> Self {
        KeyDictionary {
            cache: CACHED_KEYS,
            ..Self::default()
        }
    }

    /// The id of a key held: by its [`packed`] form `p`, else its `key` bytes.
    fn lookup(&self, p: Option<u128>, key: &[u8]) -> Option<u64> {
        match p {
            Some(p) => self.short.get(&p).copied(),
            None => match packed_mid(key) {
                Some(m) => self.mid.get(&m).copied(),
                None => self.long_id(long_hash(key), key),
            },
        }
    }

    /// The id of a long `key` held, whose [`long_hash`] is `hash`.
    fn long_id(&self, hash: u64, key: &[u8]) -> Option<u64> {
        let (first, more) = self.long.get(&hash)?;
        std::iter::once(first)
            .chain(more)
            .find(|&&id| self.keys.get(id).is_some_and(|k| k.as_slice() == key))
            .copied()
    }

    /// Maps a long key's `hash` to `id` (a key not held).
    fn map_long(&mut self, hash: u64, id: u64) {
        match self.long.entry(hash) {
            std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().1.push(id),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert((id, Vec::new()));
            }
        }
        self.long_len += 1;
    }

    /// Unmaps `id`, a long key whose [`long_hash`] is `hash`.
    fn unmap_long(&mut self, hash: u64, id: u64) {
        let std::collections::hash_map::Entry::Occupied(mut e) = self.long.entry(hash) else {
            return;
        };
        let (first, more) = e.get_mut();
        if *first == id {
            match more.pop() {
                Some(next) => *first = next,
                None => {
                    e.remove();
                }
            }
        } else if let Some(at) = more.iter().position(|&x| x == id) {
            more.swap_remove(at);
        } else {
            return;
        }
        self.long_len -= 1;
    }

    /// The id of `key`, seen in a window ending at `end`.
    pub(super) fn intern(&mut self, key: &[u8], end: EventTime) -> u64 {
        // (a long key is hashed once, for its lookup and, if new, its insertion)
        let form = Form::of(key);
        let found = match form {
            Form::Short(p) => self.short.get(&p).copied(),
            Form::Mid(m) => self.mid.get(&m).copied(),
            Form::Long(hash) => self.long_id(hash, key),
        };
        if let Some(id) = found {
            self.seen_again(id, end);
            return id;
        }
        let id = self.hold(key);
        self.map(form, id);
        self.seen_in(id, end);
        id
    }

    /// An id for `key` (a key not held), not yet mapped, seen in no window.
    fn hold(&mut self, key: &[u8]) -> u64 {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.latest.push(EventTime::MIN);
                self.listed.push(false);
                self.keys.push()
            }
        };
        *self.keys.slot_mut(id) = Some(KeyBuf::new(key));
        self.latest[id as usize] = EventTime::MIN;
        id
    }

    /// Keys of at most 31 bytes, in their packed form ([`packed`] or
    /// [`packed_mid`]), each seen in a window ending at its `end`: their ids
    /// in `ids`, in order. The same ids and state as [`Self::intern`] called
    /// on each in turn, but every key is looked up first, in one pass of
    /// lookups that do not wait on each other: the table outgrows the cache
    /// (a stream's keys seen in the last windows, kept ones included), and
    /// its misses then overlap instead of each following the last.
    pub(super) fn intern_packed<K: PackedKey>(
        &mut self,
        keys: &[(K, EventTime)],
        ids: &mut Vec<u64>,
    ) {
        ids.clear();
        ids.extend(keys.iter().map(|&(p, _)| p.find(self).unwrap_or(ABSENT)));
        for (&(p, end), id) in keys.iter().zip(ids.iter_mut()) {
            if *id != ABSENT {
                self.seen_again(*id, end);
                continue;
            }
            // new, or made earlier in this batch
            *id = match p.find(self) {
                Some(found) => {
                    self.seen_again(found, end);
                    found
                }
                None => {
                    let (bytes, len) = p.bytes();
                    let new = self.hold(&bytes[..len]);
                    self.map(p.form(), new);
                    self.seen_in(new, end);
                    new
                }
            };
        }
    }

    /// A held key `id` seen again, in a window ending at `end`.
    #[inline]
    fn seen_again(&mut self, id: u64, end: EventTime) {
        // an expired key comes back
        if self.latest[id as usize] <= self.through && self.cached > 0 {
            self.cached -= 1;
        }
        self.seen_in(id, end);
    }

    /// Key `id` seen in a window ending at `end`: its latest end, and when it expires.
    #[inline]
    fn seen_in(&mut self, id: u64, end: EventTime) {
        let latest = &mut self.latest[id as usize];
        if end > *latest {
            *latest = end;
            self.expiry.entry(end).or_default().push(id);
        }
    }

    /// The ids' bytes as they are now, for decoding on another thread while
    /// this dictionary goes on (reclaiming and reusing ids). Copies one
    /// pointer per chunk of ids, not the keys (see [`Chunked`]).
    pub(super) fn snapshot(&mut self) -> KeySnapshot {
        KeySnapshot(self.keys.freeze())
    }

    /// Frees the ids whose every window ends at or before `w` (they have
    /// all closed). Call after the results of the step to `w` are rendered.
    ///
    /// With a cache ([`Self::caching`]), an expired key is kept, with its id,
    /// while the expired keys kept are at most the cache's size or as many as
    /// the live ones; past that (and at the end of stream) they are all freed
    /// at once.
    pub(super) fn reclaim(&mut self, w: EventTime) {
        self.through = self.through.max(w);
        while let Some(bucket) = self.expiry.first_entry() {
            if *bucket.key() > w {
                break;
            }
            let (end, ids) = bucket.remove_entry();
            for id in ids {
                // an id seen in a later window since stays; one freed already has an empty slot
                if self.latest[id as usize] == end && self.keys.get(id).is_some() {
                    if !self.listed[id as usize] {
                        self.listed[id as usize] = true;
                        self.expired.push(id);
                    }
                    self.cached += 1;
                }
            }
        }
        let live = self.held() - self.cached;
        let keep = match self.cache {
            0 => 0,
            n => n.max(live),
        };
        if self.cached > keep || w == EventTime::MAX {
            self.free_expired();
        } else if self.expired.len() > 2 * keep {
            // ids seen again since: forget them here
            let (latest, listed, through) = (&self.latest, &mut self.listed, self.through);
            self.expired.retain(|&id| {
                let keep = latest[id as usize] <= through;
                listed[id as usize] = keep;
                keep
            });
        }
    }

    /// Frees every expired id kept (in the order of ids).
    ///
    /// Where they are most of the keys held (a window's keys that never come
    /// back, as a top-rows query's candidates), the maps are built again
    /// from the keys that stay instead of each freed key being found and
    /// removed: Nexmark q19's window close spent 17 ms in those removals.
    fn free_expired(&mut self) {
        let mut ids = std::mem::take(&mut self.expired);
        ids.sort_unstable();
        let rebuild = 2 * ids.len() > self.held();
        for id in ids {
            self.listed[id as usize] = false;
            if self.latest[id as usize] > self.through {
                continue;
            }
            if let Some(key) = self.keys.slot_mut(id).take() {
                if !rebuild {
                    self.unmap(key.as_slice(), id);
                }
                self.free.push(id);
            }
        }
        if rebuild {
            self.short.clear();
            self.mid.clear();
            self.long.clear();
            self.long_len = 0;
            for id in 0..self.keys.len {
                if let Some(key) = self.keys.get(id) {
                    let form = Form::of(key.as_slice());
                    self.map(form, id);
                }
            }
        }
        self.cached = 0;
    }

    /// Maps a key not held, of this form, to `id`.
    fn map(&mut self, form: Form, id: u64) {
        match form {
            Form::Short(p) => {
                self.short.insert(p, id);
            }
            Form::Mid(m) => {
                self.mid.insert(m, id);
            }
            Form::Long(hash) => self.map_long(hash, id),
        }
    }

    /// Removes `id`, whose key is `bytes`, from the map that holds it.
    fn unmap(&mut self, bytes: &[u8], id: u64) {
        match Form::of(bytes) {
            Form::Short(p) => {
                self.short.remove(&p);
            }
            Form::Mid(m) => {
                self.mid.remove(&m);
            }
            Form::Long(hash) => self.unmap_long(hash, id),
        }
    }

    /// Keys held, live and expired.
    fn held(&self) -> usize {
        self.short.len() + self.mid.len() + self.long_len
    }

    /// Live keys held: in an open window.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.held() - self.cached
    }
}

/// How a [`KeyDictionary`] finds a key: by its [`packed`] form (at most 15
/// bytes), its [`packed_mid`] form (16 to 31), or its [`long_hash`].
#[derive(Clone, Copy)]
pub(super) enum Form {
    Short(u128),
    Mid((u128, u128)),
    Long(u64),
}

impl Form {
    fn of(key: &[u8]) -> Form {
        match packed(key) {
            Some(p) => Form::Short(p),
            None => match packed_mid(key) {
                Some(m) => Form::Mid(m),
                None => Form::Long(long_hash(key)),
            },
        }
    }
}

/// A key's packed form that [`KeyDictionary`] maps to its id directly: a
/// [`packed`] key (at most 15 bytes) or a [`packed_mid`] one (16 to 31).
pub(super) trait PackedKey: Copy {
    /// Its id, if the dictionary holds it.
    fn find(self, d: &KeyDictionary) -> Option<u64>;
    fn form(self) -> Form;
    /// Its bytes (the first `len` of the array).
    fn bytes(self) -> ([u8; 32], usize);
}

impl PackedKey for u128 {
    #[inline]
    fn find(self, d: &KeyDictionary) -> Option<u64> {
        d.short.get(&self).copied()
    }

    fn form(self) -> Form {
        Form::Short(self)
    }

    fn bytes(self) -> ([u8; 32], usize) {
        let (b, len) = unpacked(self);
        let mut out = [0u8; 32];
        out[..16].copy_from_slice(&b);
        (out, len)
    }
}

impl PackedKey for (u128, u128) {
    #[inline]
    fn find(self, d: &KeyDictionary) -> Option<u64> {
        d.mid.get(&self).copied()
    }

    fn form(self) -> Form {
        Form::Mid(self)
    }

    fn bytes(self) -> ([u8; 32], usize) {
        let (tail, len) = unpacked(self.1);
        let mut out = [0u8; 32];
        out[..16].copy_from_slice(&self.0.to_le_bytes());
        out[16..].copy_from_slice(&tail);
        (out, 16 + len)
    }
}

/// A long key's hash in [`KeyDictionary`]'s map and [`KeyIds`]' (which mix
/// it again). The unit tests keep 4 of its bits, so that long keys share
/// hashes and every test of either goes through the keys found by comparing
/// their bytes.
fn long_hash(key: &[u8]) -> u64 {
    match cfg!(test) {
        true => bytes_hash(key) & 0xF,
        false => bytes_hash(key),
    }
}

/// A hash of a key's bytes.
fn bytes_hash(key: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = rustc_hash::FxBuildHasher.build_hasher();
    h.write(key);
    h.finish()
}

/// A join's key ids, per window: rows meet only within their window, so an
/// id need only name a key within one, and a closed window's ids go with
/// it. Keys of at most 15 bytes are looked up [`packed`]; longer ones by
/// their hash, their bytes kept in the window's arena (no allocation per
/// key).
#[derive(Debug, Default)]
pub(super) struct WindowKeyIds {
    windows: BTreeMap<crate::window::Window, KeyIds>,
}

/// One window's key ids.
#[derive(Debug, Default)]
struct KeyIds {
    short: MixMap<u128, u64>,
    /// By hash: the first key with it, and any others.
    long: FxHashMap<u64, (LongKey, Vec<LongKey>)>,
    arena: Vec<u8>,
    next: u64,
}

/// A long key: its id, and where its bytes are in the arena.
#[derive(Clone, Copy, Debug)]
struct LongKey {
    id: u64,
    start: usize,
    len: usize,
}

impl KeyIds {
    fn intern(&mut self, key: &[u8]) -> u64 {
        if let Some(p) = packed(key) {
            let next = &mut self.next;
            return *self.short.entry(p).or_insert_with(|| {
                *next += 1;
                *next - 1
            });
        }
        let hash = long_hash(key);
        let arena = &self.arena;
        let same = |k: &LongKey| arena.get(k.start..k.start + k.len) == Some(key);
        if let Some((first, more)) = self.long.get(&hash) {
            if same(first) {
                return first.id;
            }
            if let Some(k) = more.iter().find(|k| same(k)) {
                return k.id;
            }
        }
        let k = LongKey {
            id: self.next,
            start: self.arena.len(),
            len: key.len(),
        };
        self.next += 1;
        self.arena.extend_from_slice(key);
        match self.long.entry(hash) {
            std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().1.push(k),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert((k, Vec::new()));
            }
        }
        k.id
    }
}

impl WindowKeyIds {
    /// The id of `key` in `window`.
    pub(super) fn intern(&mut self, window: crate::window::Window, key: &[u8]) -> u64 {
        self.windows.entry(window).or_default().intern(key)
    }

    /// Forgets the windows ending at or before `w` (they closed).
    pub(super) fn reclaim(&mut self, w: EventTime) {
        self.windows.retain(|window, _| window.end > w);
    }

    /// Keys held, over all windows.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.windows.values().map(|k| k.next as usize).sum()
    }
}

/// Decodes key ids to the bytes the [`KeyDictionary`] holds for them.
pub(super) trait KeyBytes {
    /// The bytes of `id` (empty for an unknown id, which no caller holds).
    fn bytes(&self, id: u64) -> &[u8];
}

impl KeyBytes for KeyDictionary {
    fn bytes(&self, id: u64) -> &[u8] {
        self.keys.get(id).map_or(&[], KeyBuf::as_slice)
    }
}

/// A [`KeyDictionary`]'s ids and bytes at one moment (`Send`).
pub(super) struct KeySnapshot(Frozen);

impl KeyBytes for KeySnapshot {
    fn bytes(&self, id: u64) -> &[u8] {
        self.0.get(id).map_or(&[], KeyBuf::as_slice)
    }
}

/// Which of `n` shards owns a key: by a hash of its packed form (or bytes).
pub(super) fn shard_of(packed_key: Option<u128>, bytes: &[u8], n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let h = match packed_key {
        Some(p) => (p as u64 ^ (p >> 64) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        None => bytes_hash(bytes).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    };
    ((h >> 32) % n as u64) as usize
}

/// The key dictionary in `n` shards, so the rows of a batch can be folded on
/// `n` threads, each interning only the keys it owns ([`shard_of`]). A key's
/// id is its shard's id times `n` plus the shard.
pub(super) struct Keys {
    shards: Vec<KeyDictionary>,
}

impl Keys {
    pub(super) fn new(n: usize) -> Self {
        Keys {
            shards: (0..n.max(1)).map(|_| KeyDictionary::caching()).collect(),
        }
    }

    /// Every shard, to fold on their own threads.
    pub(super) fn shards_mut(&mut self) -> &mut [KeyDictionary] {
        &mut self.shards
    }

    /// The id of shard `shard`'s local id `local`.
    pub(super) fn id(local: u64, shard: usize, n: usize) -> u64 {
        local * n as u64 + shard as u64
    }

    /// The id of a key held, if it is: by its [`packed`] form `p` (its bytes
    /// are then not read), else its `key` bytes.
    pub(super) fn lookup(&self, p: Option<u128>, key: &[u8]) -> Option<u64> {
        let n = self.shards.len();
        let s = shard_of(p, key, n);
        self.shards[s]
            .lookup(p, key)
            .map(|local| Self::id(local, s, n))
    }

    /// The id of `key`, seen in a window ending at `end`.
    pub(super) fn intern(&mut self, key: &[u8], end: EventTime) -> u64 {
        let n = self.shards.len();
        let s = shard_of(packed(key), key, n);
        Self::id(self.shards[s].intern(key, end), s, n)
    }

    /// Frees the ids whose every window ends at or before `w`.
    pub(super) fn reclaim(&mut self, w: EventTime) {
        for d in &mut self.shards {
            d.reclaim(w);
        }
    }

    /// Every shard's ids and bytes as they are now (see [`KeyDictionary::snapshot`]).
    pub(super) fn snapshot(&mut self) -> ShardedSnapshot {
        ShardedSnapshot(
            self.shards
                .iter_mut()
                .map(KeyDictionary::snapshot)
                .collect(),
        )
    }
}

impl KeyBytes for Keys {
    fn bytes(&self, id: u64) -> &[u8] {
        let n = self.shards.len() as u64;
        self.shards[(id % n) as usize].bytes(id / n)
    }
}

/// [`Keys`] at one moment (`Send`).
pub(super) struct ShardedSnapshot(Vec<KeySnapshot>);

impl KeyBytes for ShardedSnapshot {
    fn bytes(&self, id: u64) -> &[u8] {
        let n = self.0.len() as u64;
        self.0[(id % n) as usize].bytes(id / n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packed row-format integers that differ only above their lowest byte
    /// (4 096 of them, 256 apart) spread over a table's buckets and tags:
    /// their hashes' low 12 bits and top 7 bits take most values (FxHash's
    /// low 12 bits take 4 values).
    #[test]
    fn packed_keys_differing_in_high_bytes_spread_over_buckets_and_tags() {
        use std::hash::BuildHasher;
        let conv = arrow::row::RowConverter::new(vec![arrow::row::SortField::new(
            arrow::datatypes::DataType::Int64,
        )])
        .unwrap();
        let col: arrow::array::ArrayRef = Arc::new(arrow::array::Int64Array::from_iter_values(
            (0..4096i64).map(|i| 1_000_000 + i * 256),
        ));
        let rows = conv.convert_columns(&[col]).unwrap();
        let hasher = std::hash::BuildHasherDefault::<Mix>::default();
        let hashes: Vec<u64> = rows
            .iter()
            .map(|r| hasher.hash_one(packed(r.data()).unwrap()))
            .collect();
        let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 4095).collect();
        let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(buckets.len() > 2_000, "{} buckets of 4 096", buckets.len());
        assert!(tags.len() > 100, "{} tags of 128", tags.len());
    }

    /// Equal keys get equal ids within a window and different keys different
    /// ones (short and long keys, keys that share a hash bucket's bytes up to
    /// their length); a closed window's ids are forgotten.
    #[test]
    fn window_key_ids_name_keys_within_a_window() {
        use crate::window::Window;
        let mut ids = WindowKeyIds::default();
        let keys: Vec<Vec<u8>> = (0..300u32)
            .map(|i| {
                let n = (i % 40) as usize;
                (0..n).map(|j| (i as usize * 7 + j) as u8).collect()
            })
            .collect();
        for w in 0..3i64 {
            let win = Window::new(w * 10, w * 10 + 10);
            let got: Vec<u64> = keys.iter().map(|k| ids.intern(win, k)).collect();
            let again: Vec<u64> = keys.iter().rev().map(|k| ids.intern(win, k)).collect();
            assert!(got.iter().eq(again.iter().rev()));
            for (i, a) in keys.iter().enumerate() {
                for (j, b) in keys.iter().enumerate() {
                    assert_eq!(got[i] == got[j], a == b, "{a:?} {b:?}");
                }
            }
        }
        let distinct: std::collections::BTreeSet<&Vec<u8>> = keys.iter().collect();
        assert_eq!(ids.len(), 3 * distinct.len());
        ids.reclaim(10);
        assert_eq!(ids.len(), 2 * distinct.len());
        ids.reclaim(EventTime::MAX);
        assert_eq!(ids.len(), 0);
    }

    #[test]
    fn packed_is_the_key_zero_padded_with_its_length_on_top() {
        let reference = |key: &[u8]| -> Option<u128> {
            if key.len() >= 16 {
                return None;
            }
            let mut b = [0u8; 16];
            b[..key.len()].copy_from_slice(key);
            b[15] = key.len() as u8;
            Some(u128::from_le_bytes(b))
        };
        let bytes: Vec<u8> = (0u8..40)
            .map(|i| i.wrapping_mul(97).wrapping_add(13))
            .collect();
        for n in 0..=20 {
            for at in 0..4 {
                let key = &bytes[at..at + n];
                assert_eq!(packed(key), reference(key), "{key:?}");
            }
            assert_eq!(packed(&vec![0xff; n]), reference(&vec![0xff; n]));
        }
    }

    /// Keys of every length up to 60 bytes (every form: packed, two
    /// integers, boxed) get distinct ids, are found again, and are
    /// all freed when their window closes.
    #[test]
    fn keys_of_every_form_are_interned_found_and_freed() {
        let mut d = KeyDictionary::default();
        // two keys of each length (one of length 0)
        let mut keys: Vec<Vec<u8>> = (0..=60usize)
            .flat_map(|n| {
                [0u8, 7].map(|salt| (0..n).map(|i| (i as u8).wrapping_mul(37) ^ salt).collect())
            })
            .collect();
        keys.dedup();
        let ids: Vec<u64> = keys.iter().map(|k| d.intern(k, 10)).collect();
        let distinct: std::collections::HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), keys.len(), "one id per key");
        for (k, &id) in keys.iter().zip(&ids) {
            assert_eq!(d.intern(k, 10), id, "found again");
            assert_eq!(d.lookup(packed(k), k), Some(id));
            assert_eq!(d.bytes(id), k.as_slice());
        }
        assert_eq!(d.held(), keys.len());
        d.reclaim(10);
        assert_eq!(d.held(), 0, "every form freed");
        for k in &keys {
            assert_eq!(d.lookup(packed(k), k), None);
        }
    }

    /// Keys of 16 to 31 bytes pack to distinct pairs, others not at all.
    #[test]
    fn packed_mid_tells_keys_of_16_to_31_bytes_apart() {
        let bytes: Vec<u8> = (0u8..40).map(|i| i.wrapping_mul(61) ^ 0x3c).collect();
        let mut seen = std::collections::HashMap::new();
        for n in 0..=40 {
            for at in 0..=(40 - n).min(3) {
                let key = &bytes[at..at + n];
                match packed_mid(key) {
                    Some(m) => {
                        assert!((16..=31).contains(&n), "{n}");
                        if let Some(other) = seen.insert(m, key.to_vec()) {
                            assert_eq!(other, key, "two keys, one pair");
                        }
                    }
                    None => assert!(!(16..=31).contains(&n), "{n}"),
                }
                // a key of zeros and one of its length with a trailing zero differ
                let zeros = vec![0u8; n];
                if (16..=30).contains(&n) {
                    let mut longer = zeros.clone();
                    longer.push(0);
                    assert_ne!(packed_mid(&zeros), packed_mid(&longer));
                }
            }
        }
    }

    #[test]
    fn unpacked_gives_the_bytes_back() {
        let bytes: Vec<u8> = (0u8..16).map(|i| i.wrapping_mul(97) ^ 0xa5).collect();
        for n in 0..=15 {
            let (b, len) = unpacked(packed(&bytes[..n]).expect("short"));
            assert_eq!(&b[..len], &bytes[..n]);
        }
    }

    /// Column-wise packing equals packing what `arrow::row` encodes, for every
    /// supported type, with nulls and each type's limits, alone and combined.
    #[test]
    fn packed_columns_and_encoded_rows_agree_with_arrow_row() {
        use arrow::array::{
            ArrayRef, Date32Array, Date64Array, Int16Array, Int32Array, Int64Array, Int8Array,
            TimestampNanosecondArray, TimestampSecondArray, UInt16Array, UInt32Array, UInt64Array,
            UInt8Array,
        };
        use arrow::compute::SortOptions;
        use arrow::row::{RowConverter, SortField};
        use std::sync::Arc;
        let pick = |k: usize| (k * 7919 + 13) % 6;
        macro_rules! col {
            ($arr:ty, $t:ty) => {{
                let vals = [
                    Some(<$t>::MIN),
                    Some(<$t>::MAX),
                    None,
                    Some(0 as $t),
                    Some(1 as $t),
                    Some((0 as $t).wrapping_sub(1)),
                ];
                Arc::new(<$arr>::from(
                    (0..24).map(|k| vals[pick(k)]).collect::<Vec<_>>(),
                )) as ArrayRef
            }};
        }
        let all: Vec<ArrayRef> = vec![
            col!(Int8Array, i8),
            col!(Int16Array, i16),
            col!(Int32Array, i32),
            col!(Int64Array, i64),
            col!(UInt8Array, u8),
            col!(UInt16Array, u16),
            col!(UInt32Array, u32),
            col!(UInt64Array, u64),
            col!(Date32Array, i32),
            col!(Date64Array, i64),
            col!(TimestampSecondArray, i64),
            col!(TimestampNanosecondArray, i64),
        ];
        let check = |cols: Vec<ArrayRef>| {
            let fields = cols
                .iter()
                .map(|c| SortField::new(c.data_type().clone()))
                .collect();
            let rows = RowConverter::new(fields)
                .expect("converter")
                .convert_columns(&cols)
                .expect("rows");
            let want: Option<Vec<u128>> = (0..rows.num_rows())
                .map(|i| packed(rows.row(i).data()))
                .collect();
            let got = packed_columns(&cols);
            match got {
                Some(got) => assert_eq!(Some(got), want, "{:?}", cols),
                // only rows too wide to pack are left to arrow::row
                None => assert!(want.is_none(), "{:?}", cols),
            }
            // with each column's sort options: the same bytes as arrow::row's
            let len = rows.row(0).data().len();
            for (descending, nulls_first) in
                [(false, true), (true, true), (false, false), (true, false)]
            {
                // the options given, and on every other column their opposite
                let options: Vec<SortOptions> = (0..cols.len())
                    .map(|k| SortOptions {
                        descending: descending ^ (k % 2 == 1),
                        nulls_first: nulls_first ^ (k % 2 == 1),
                    })
                    .collect();
                let fields = cols
                    .iter()
                    .zip(&options)
                    .map(|(c, o)| SortField::new_with_options(c.data_type().clone(), *o))
                    .collect();
                let want = RowConverter::new(fields)
                    .expect("converter")
                    .convert_columns(&cols)
                    .expect("rows");
                let mut got = vec![[0u8; ENCODED_ROW]; want.num_rows()];
                // as pairs of integers: ordered as the bytes are
                if let Some(ints) = order_keys(&cols, &options) {
                    for i in 0..want.num_rows() {
                        for j in 0..want.num_rows() {
                            assert_eq!(
                                ints[i].cmp(&ints[j]),
                                want.row(i).data().cmp(want.row(j).data()),
                                "{options:?} {cols:?}"
                            );
                        }
                    }
                } else {
                    assert!(len > ENCODED_ROW, "{:?}", cols);
                }
                let types: Vec<_> = cols.iter().map(|c| c.data_type()).collect();
                assert_eq!(order_keys_fit(&types), len <= ENCODED_ROW, "{cols:?}");
                match encode_rows(&cols, Some(&options), &mut got) {
                    Some(n) => {
                        assert_eq!(n, len);
                        for (i, r) in got.iter().enumerate() {
                            assert_eq!(&r[..n], want.row(i).data(), "{options:?} {cols:?}");
                        }
                    }
                    None => assert!(len > ENCODED_ROW, "{:?}", cols),
                }
            }
            // keys of 16 to 31 bytes: the same bytes as arrow::row's
            match fixed_rows(&cols) {
                Some(f) => {
                    assert_eq!(f.len, len);
                    for (i, r) in f.rows.iter().enumerate() {
                        assert_eq!(&r[..len], rows.row(i).data(), "{:?}", cols);
                    }
                }
                None => assert!(!(16..=INLINE_KEY).contains(&len), "{:?}", cols),
            }
        };
        for a in &all {
            check(vec![a.clone()]);
            // the same column reversed, so each pair of values meets
            let rev = arrow::compute::take(
                a.as_ref(),
                &arrow::array::UInt32Array::from_iter_values((0..24).rev()),
                None,
            )
            .expect("take");
            for b in &all {
                check(vec![a.clone(), b.clone()]);
                check(vec![a.clone(), rev.clone(), b.clone()]);
            }
            // four 8-byte columns take 36 bytes: left to arrow::row
            check(vec![a.clone(), rev.clone(), a.clone(), rev.clone()]);
        }
        // a float key is left to arrow::row
        let f: ArrayRef = Arc::new(arrow::array::Float64Array::from(vec![1.0]));
        assert!(packed_columns(&[f]).is_none());
    }

    #[test]
    fn a_key_kept_inline_takes_no_more_room_than_a_boxed_one() {
        use std::mem::size_of;
        // 40 bytes, as when only keys of 31 bytes were inline
        assert!(size_of::<Option<KeyBuf>>() <= 40);
        let room = |k: &KeyBuf| matches!(k, KeyBuf::Inline { .. });
        assert!(room(&KeyBuf::new(&[7; INLINE_BYTES])));
        assert!(!room(&KeyBuf::new(&[7; INLINE_BYTES + 1])));
        for n in [0, 1, 31, INLINE_BYTES, INLINE_BYTES + 1, 100] {
            assert_eq!(KeyBuf::new(&vec![n as u8; n]).as_slice(), vec![n as u8; n]);
        }
    }

    #[test]
    fn a_key_keeps_its_id_until_its_last_window_closes() {
        let mut d = KeyDictionary::default();
        let a = d.intern(b"a", 10);
        let b = d.intern(b"b", 10);
        assert_ne!(a, b);
        assert_eq!(d.intern(b"a", 20), a, "a later window, the same id");
        d.reclaim(10);
        assert_eq!(
            d.len(),
            1,
            "b's only window closed; a is still open until 20"
        );
        assert_eq!(d.bytes(a), b"a");
        let before = d.snapshot();
        let c = d.intern(b"c", 30);
        assert_eq!(c, b, "b's id is reused");
        assert_eq!(d.bytes(c), b"c");
        assert_eq!(before.bytes(a), b"a", "a snapshot keeps its ids");
        assert_eq!(before.bytes(b), b"", "b was free when it was taken");
        d.reclaim(EventTime::MAX);
        assert_eq!(d.len(), 0);
    }

    /// With a cache, a key whose windows all closed keeps its id while few
    /// expired keys are kept: back in a later window, it is found, not
    /// interned again. Past the cache (and more than the live keys), every
    /// expired key is freed and its id reused; the live count is exact
    /// throughout, and what is held stays within the bound.
    #[test]
    fn expired_keys_are_kept_up_to_the_cache() {
        let mut d = KeyDictionary {
            cache: 4,
            ..KeyDictionary::default()
        };
        let a = d.intern(b"a", 10);
        let b = d.intern(b"b", 10);
        d.reclaim(10);
        assert_eq!((d.len(), d.held()), (0, 2), "expired, kept");
        assert_eq!(d.bytes(b), b"b");
        assert_eq!(d.intern(b"b", 20), b, "back in a later window: its id");
        assert_eq!(d.len(), 1);
        // six more expire: past the cache of 4 (and the one live key)
        for k in 0..6u8 {
            d.intern(&[b'k', k], 20);
        }
        d.intern(b"live", 30);
        d.reclaim(20);
        assert_eq!((d.len(), d.held()), (1, 1), "all expired keys freed");
        assert_eq!(d.bytes(a), b"", "a's id is free");
        let c = d.intern(b"c", 40);
        assert!(c <= 8, "a freed id is reused: {c}");
        assert_eq!(d.bytes(c), b"c");
        // a long run: what is held stays within twice the live keys or the cache
        let mut model: std::collections::BTreeMap<Vec<u8>, EventTime> = Default::default();
        model.insert(b"live".to_vec(), 30);
        model.insert(b"c".to_vec(), 40);
        let mut x: u64 = 3;
        for w in 30..2_000i64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let key = ((x >> 33) % 40).to_be_bytes();
            let end = w + 1 + (x >> 60) as EventTime;
            let id = d.intern(&key, end);
            assert_eq!(d.bytes(id), key.as_slice());
            let e = model.entry(key.to_vec()).or_insert(end);
            *e = (*e).max(end);
            d.reclaim(w);
            model.retain(|_, end| *end > w);
            assert_eq!(d.len(), model.len());
            assert!(d.held() <= 2 * model.len().max(4) + 1, "{}", d.held());
        }
    }

    /// A snapshot keeps every id's bytes across chunks while the dictionary
    /// reclaims those ids and reuses them for other keys (short, mid-sized
    /// and long ones: inline and boxed).
    #[test]
    fn a_snapshot_keeps_its_keys_while_their_ids_are_reused() {
        let mut d = KeyDictionary::default();
        let key = |i: u32, round: u8| {
            let mut k = i.to_be_bytes().to_vec();
            k.resize([4, 20, 40][i as usize % 3], round);
            k
        };
        let n = 3 << CHUNK_BITS;
        let ids: Vec<u64> = (0..n).map(|i| d.intern(&key(i, 1), 10)).collect();
        let before = d.snapshot();
        // a second snapshot before any write shares the same chunks
        let again = d.snapshot();
        d.reclaim(10);
        let reused: Vec<u64> = (0..n).map(|i| d.intern(&key(i, 2), 20)).collect();
        let after = d.snapshot();
        // writes after a snapshot leave it as it was
        d.reclaim(20);
        let third: Vec<u64> = (0..n).map(|i| d.intern(&key(i, 3), 30)).collect();
        for i in 0..n as usize {
            assert_eq!(before.bytes(ids[i]), key(i as u32, 1).as_slice());
            assert_eq!(again.bytes(ids[i]), key(i as u32, 1).as_slice());
            assert_eq!(after.bytes(reused[i]), key(i as u32, 2).as_slice());
            assert_eq!(d.bytes(third[i]), key(i as u32, 3).as_slice());
        }
        let mut sorted = reused.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            {
                let mut s = ids.clone();
                s.sort_unstable();
                s
            },
            "the ids are reused"
        );
    }

    /// Interning a batch of packed keys at once (short ones, then ones of 16
    /// to 31 bytes) gives the ids and the state (keys held, expired ones
    /// kept, ids freed and reused) that interning their bytes one by one
    /// gives, with keys repeated within a batch, coming back after they
    /// expired or were freed, and long keys sharing the ids.
    #[test]
    fn interning_a_batch_equals_interning_each_key() {
        let mut one = KeyDictionary {
            cache: 4,
            ..KeyDictionary::default()
        };
        let mut batched = KeyDictionary {
            cache: 4,
            ..KeyDictionary::default()
        };
        let (mut x, mut w): (u64, EventTime) = (5, 0);
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let (mut short, mut mid, mut ids) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..400 {
            let (mut short_keys, mut mid_keys) = (Vec::new(), Vec::new());
            short.clear();
            mid.clear();
            for _ in 0..next() % 12 {
                // 1 to 31 bytes, from few keys, so that they repeat
                let len = 1 + (next() % 31) as usize;
                let key = vec![(next() % 6) as u8; len];
                let end = w + 1 + (next() % 30) as EventTime;
                match packed(&key) {
                    Some(p) => {
                        short.push((p, end));
                        short_keys.push(key);
                    }
                    None => {
                        mid.push((packed_mid(&key).expect("mid"), end));
                        mid_keys.push(key);
                    }
                }
            }
            // one by one: the short keys, then the others, as a batch of each
            let each: Vec<u64> = (short_keys.iter().zip(&short).map(|(k, &(_, end))| (k, end)))
                .chain(mid_keys.iter().zip(&mid).map(|(k, &(_, end))| (k, end)))
                .map(|(key, end)| one.intern(key, end))
                .collect();
            batched.intern_packed(&short, &mut ids);
            let mut got = ids.clone();
            batched.intern_packed(&mid, &mut ids);
            got.extend(&ids);
            assert_eq!(got, each, "round {round}");
            for &id in &got {
                assert_eq!(batched.bytes(id), one.bytes(id));
            }
            // a long key takes an id from the same free list
            if round % 5 == 0 {
                let long = vec![(next() % 3) as u8; 20 + (next() % 30) as usize];
                let end = w + 1 + (next() % 30) as EventTime;
                assert_eq!(batched.intern(&long, end), one.intern(&long, end));
            }
            if round % 3 == 0 {
                w += (next() % 25) as EventTime;
                one.reclaim(w);
                batched.reclaim(w);
                assert_eq!(batched.len(), one.len(), "live keys, round {round}");
                assert_eq!(batched.held(), one.held(), "keys held, round {round}");
                assert_eq!(batched.free, one.free, "free ids, round {round}");
            }
        }
    }

    #[test]
    fn random_interning_agrees_with_a_map_of_latest_ends() {
        use std::collections::BTreeMap;
        let mut d = KeyDictionary::default();
        let mut sharded = Keys::new(3);
        let mut model: BTreeMap<Vec<u8>, EventTime> = BTreeMap::new();
        let mut x: u64 = 17;
        let mut w = 0;
        for _ in 0..5_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // short keys and long ones (16 bytes and more do not pack), some sharing a prefix
            // (up to 38 bytes inline, longer boxed)
            let lens = [1, 11, 15, 16, 21, 31, 32, 36, 38, 39, 40];
            let key = vec![(x >> 60) as u8; lens[((x >> 30) % lens.len() as u64) as usize]];
            let end = w + 1 + ((x >> 40) % 50) as EventTime;
            let id = d.intern(&key, end);
            assert_eq!(d.bytes(id), key.as_slice());
            let sid = sharded.intern(&key, end);
            assert_eq!(sharded.bytes(sid), key.as_slice());
            assert_eq!(sharded.intern(&key, end), sid, "a key keeps its id");
            let e = model.entry(key).or_insert(end);
            *e = (*e).max(end);
            if x % 7 == 0 {
                w += (x >> 20) as EventTime % 20;
                d.reclaim(w);
                sharded.reclaim(w);
                model.retain(|_, end| *end > w);
                assert_eq!(d.len(), model.len());
                let held: usize = sharded.shards.iter().map(KeyDictionary::len).sum();
                assert_eq!(held, model.len());
            }
        }
    }
}
