//! Group keys as dense integer ids: the dataflow carries a `u64` per
//! `(window, key)` instead of the key's bytes, so its records are `Copy` and
//! compare as integers. The dictionary lives on the host, beside the
//! `RowConverter` that made the bytes; an id is reclaimed once the last
//! window that can hold its key has closed, so the dictionary holds only the
//! keys of open windows. It is not checkpointed: state files carry the keys
//! themselves and a restore interns them again.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::time::EventTime;

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

#[derive(Debug, Default)]
pub(super) struct KeyDictionary {
    /// Ids of keys of at most 15 bytes, by [`packed`] key.
    short: FxHashMap<u128, u64>,
    /// Ids of longer keys.
    ids: FxHashMap<Box<[u8]>, u64>,
    /// By id: the key's bytes (shared with [`KeySnapshot`]s) and the latest
    /// end of a window it was seen in (`None`: a free id).
    entries: Vec<Option<(Arc<[u8]>, EventTime)>>,
    free: Vec<u64>,
    /// `(end, id)` for each time an id's latest end grew: popped when W
    /// passes `end`, the id is free if its latest end is still `end`.
    expiry: BinaryHeap<Reverse<(EventTime, u64)>>,
}

impl KeyDictionary {
    /// The id of `key`, seen in a window ending at `end`.
    pub(super) fn intern(&mut self, key: &[u8], end: EventTime) -> u64 {
        let short = packed(key);
        let found = match short {
            Some(p) => self.short.get(&p),
            None => self.ids.get(key),
        };
        let id = match found {
            Some(&id) => id,
            None => {
                let id = match self.free.pop() {
                    Some(id) => id,
                    None => {
                        self.entries.push(None);
                        self.entries.len() as u64 - 1
                    }
                };
                self.entries[id as usize] = Some((key.into(), EventTime::MIN));
                match short {
                    Some(p) => self.short.insert(p, id),
                    None => self.ids.insert(key.into(), id),
                };
                id
            }
        };
        if let Some((_, latest)) = self.entries[id as usize].as_mut() {
            if end > *latest {
                *latest = end;
                self.expiry.push(Reverse((end, id)));
            }
        }
        id
    }

    /// The ids' bytes as they are now, for decoding on another thread while
    /// this dictionary goes on (reclaiming and reusing ids). Copies one
    /// pointer per id, not the keys.
    pub(super) fn snapshot(&self) -> KeySnapshot {
        KeySnapshot(
            self.entries
                .iter()
                .map(|e| e.as_ref().map(|(b, _)| Arc::clone(b)))
                .collect(),
        )
    }

    /// Frees the ids whose every window ends at or before `w` (they have
    /// all closed). Call after the results of the step to `w` are rendered.
    pub(super) fn reclaim(&mut self, w: EventTime) {
        while let Some(&Reverse((end, id))) = self.expiry.peek() {
            if end > w {
                break;
            }
            self.expiry.pop();
            let slot = &mut self.entries[id as usize];
            if slot.as_ref().is_some_and(|(_, latest)| *latest == end) {
                if let Some((bytes, _)) = slot.take() {
                    match packed(&bytes) {
                        Some(p) => self.short.remove(&p),
                        None => self.ids.remove(&*bytes),
                    };
                    self.free.push(id);
                }
            }
        }
    }

    /// Keys held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.short.len() + self.ids.len()
    }
}

/// Decodes key ids to the bytes the [`KeyDictionary`] holds for them.
pub(super) trait KeyBytes {
    /// The bytes of `id` (empty for an unknown id, which no caller holds).
    fn bytes(&self, id: u64) -> &[u8];
}

impl KeyBytes for KeyDictionary {
    fn bytes(&self, id: u64) -> &[u8] {
        self.entries
            .get(id as usize)
            .and_then(|e| e.as_ref())
            .map_or(&[], |(b, _)| b)
    }
}

/// A [`KeyDictionary`]'s ids and bytes at one moment (`Send`).
pub(super) struct KeySnapshot(Vec<Option<Arc<[u8]>>>);

impl KeyBytes for KeySnapshot {
    fn bytes(&self, id: u64) -> &[u8] {
        self.0
            .get(id as usize)
            .and_then(|e| e.as_deref())
            .unwrap_or(&[])
    }
}

/// Which of `n` shards owns a key: by a hash of its packed form (or bytes).
pub(super) fn shard_of(packed_key: Option<u128>, bytes: &[u8], n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let h = match packed_key {
        Some(p) => (p as u64 ^ (p >> 64) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        None => {
            use std::hash::{BuildHasher, Hasher};
            let mut h = rustc_hash::FxBuildHasher.build_hasher();
            h.write(bytes);
            h.finish().wrapping_mul(0x9E37_79B9_7F4A_7C15)
        }
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
            shards: (0..n.max(1)).map(|_| KeyDictionary::default()).collect(),
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
    pub(super) fn snapshot(&self) -> ShardedSnapshot {
        ShardedSnapshot(self.shards.iter().map(KeyDictionary::snapshot).collect())
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
            let key = vec![(x >> 60) as u8; [1, 11, 15, 16, 21][((x >> 30) % 5) as usize]];
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
