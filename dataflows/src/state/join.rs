//! The windowed-join family's state on one worker: each side's rows of the worker's
//! `(window, join key)`s in a hash table, joined as they come (a symmetric hash join).
//!
//! The window is part of the join key, so only rows of the same window meet. Rows only
//! enter (within open windows: the host refuses the rest), so a new row's pairs are the
//! other side's rows of its window and key, and nothing already output changes; a window
//! that closes is dropped whole. This is what a differential join over two arrangements
//! computes for such inputs, without its costs here: the batcher's and the spine's sorts
//! and merges of every row, and, at a window's close, the retraction of its rows, which the
//! join met again to produce pairs that were then thrown away.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::window::{EventTime, Key, Window};

/// The key rows meet by: their window and their join key's id.
pub(crate) type JoinKey = (Window, Key);

/// One side's record: `(window, join key)` and the row's id.
pub(crate) type JoinRecord = (JoinKey, Key);

/// A change of the join's output in an open window: `count` more pairs of the left row
/// `left` and the right row `right`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pair {
    /// The window both rows belong to.
    pub window: Window,
    /// The left row's id.
    pub left: Key,
    /// The right row's id.
    pub right: Key,
    /// How many more such pairs (the product of the rows' multiplicities).
    pub count: i64,
}

/// No entry: the end of a list.
const NONE: usize = usize::MAX;

/// One window's rows: for each key, the last row of each side, each row linked to the
/// one before it of the same key and side (one vector per window, not one per key).
#[derive(Debug, Default)]
struct WindowRows {
    heads: FxHashMap<Key, [usize; 2]>,
    /// `(row id, multiplicity, the previous row's index)`.
    rows: Vec<(Key, i64, usize)>,
}

impl WindowRows {
    /// The rows of a list, last first.
    fn list(&self, mut at: usize) -> impl Iterator<Item = (Key, i64)> + '_ {
        std::iter::from_fn(move || {
            let &(row, n, prev) = self.rows.get(at)?;
            at = prev;
            Some((row, n))
        })
    }
}

/// Room for a little more than `n`: a window or step slightly larger than
/// the last one takes its rows without copying them all once more as the
/// vector doubles.
fn headroom(n: usize) -> usize {
    n.saturating_add(n / 4)
}

/// One worker's part of a windowed join: its `(window, key)`s' rows, and the pairs made
/// since they were last taken.
#[derive(Debug, Default)]
pub(crate) struct JoinState {
    windows: BTreeMap<Window, WindowRows>,
    pairs: Vec<Pair>,
    rows: usize,
    /// The rows and keys of the window evicted last: room a new window
    /// takes at once, so a stream of windows of similar sizes does not copy
    /// each window's rows and rehash its keys as they double.
    sizes: (usize, usize),
}

impl JoinState {
    /// Adds `n` copies of a row to side `side` (0: left, 1: right), making its pairs
    /// with the other side's rows of the same window and key. `n <= 0` is ignored (rows
    /// only enter).
    pub(crate) fn insert(&mut self, side: usize, ((window, key), row): JoinRecord, n: i64) {
        if n <= 0 {
            return;
        }
        let (rows, keys) = self.sizes;
        let w = self.windows.entry(window).or_insert_with(|| WindowRows {
            heads: FxHashMap::with_capacity_and_hasher(headroom(keys), Default::default()),
            rows: Vec::with_capacity(headroom(rows)),
        });
        // the key's heads found once: read, then moved to the new row
        let at = w.rows.len();
        let slot = w.heads.entry(key).or_insert([NONE, NONE]);
        let heads = *slot;
        slot[side] = at;
        w.rows.push((row, n, heads[side]));
        for (o, m) in w.list(heads[1 - side]) {
            let (left, right) = if side == 0 { (row, o) } else { (o, row) };
            self.pairs.push(Pair {
                window,
                left,
                right,
                count: n.saturating_mul(m),
            });
        }
        self.rows += 1;
    }

    /// The pairs made since the last call.
    pub(crate) fn take_pairs(&mut self) -> Vec<Pair> {
        // room for as many as the last step made: the next step's pairs are not copied
        // again and again as their vector doubles
        let n = self.pairs.len();
        std::mem::replace(&mut self.pairs, Vec::with_capacity(headroom(n)))
    }

    /// Drops the rows of `windows` (they closed).
    pub(crate) fn evict(&mut self, windows: &[Window]) {
        for w in windows {
            if let Some(rows) = self.windows.remove(w) {
                self.rows -= rows.rows.len();
                self.sizes = (rows.rows.len(), rows.heads.len());
            }
        }
    }

    /// Drops every window (the end of the stream).
    pub(crate) fn clear(&mut self) {
        self.windows.clear();
        self.rows = 0;
    }

    /// Each side's rows of windows ending after `frontier`, with their multiplicities.
    pub(crate) fn open_rows(&self, frontier: EventTime) -> [Vec<(JoinRecord, i64)>; 2] {
        let mut out = [Vec::new(), Vec::new()];
        for (window, rows) in &self.windows {
            if window.end <= frontier {
                continue;
            }
            for (key, heads) in &rows.heads {
                for (side, &head) in heads.iter().enumerate() {
                    out[side].extend(rows.list(head).map(|(row, n)| (((*window, *key), row), n)));
                }
            }
        }
        out
    }

    /// Rows held (both sides, all open windows).
    pub(crate) fn len(&self) -> usize {
        self.rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of both sides in random order make the pairs a nested loop makes per window
    /// and key; evicting drops exactly the closed windows' rows.
    #[test]
    fn pairs_are_the_nested_loop_and_eviction_drops_closed_windows() {
        let mut next = crate::numbers_below(5);
        let rows: Vec<(usize, JoinRecord, i64)> = (0..400)
            .map(|_| {
                let start = next(5) as i64 * 10;
                let window = Window::new(start, start + 10);
                (
                    next(2) as usize,
                    ((window, next(4)), next(30)),
                    1 + next(3) as i64,
                )
            })
            .collect();
        let mut state = JoinState::default();
        for &(side, record, n) in &rows {
            state.insert(side, record, n);
        }
        let mut got: BTreeMap<(Window, Key, Key), i64> = BTreeMap::new();
        for p in state.take_pairs() {
            *got.entry((p.window, p.left, p.right)).or_default() += p.count;
        }
        let mut expected: BTreeMap<(Window, Key, Key), i64> = BTreeMap::new();
        for (_, (lk, l), ln) in rows.iter().filter(|r| r.0 == 0) {
            for (_, (rk, r), rn) in rows.iter().filter(|r| r.0 == 1) {
                if lk == rk {
                    *expected.entry((lk.0, *l, *r)).or_default() += ln * rn;
                }
            }
        }
        assert_eq!(got, expected);
        assert!(state.take_pairs().is_empty());
        assert_eq!(state.len(), rows.len());
        let closed: Vec<Window> = (0..2).map(|s| Window::new(s * 10, s * 10 + 10)).collect();
        state.evict(&closed);
        let open = state.open_rows(20);
        let left = rows.iter().filter(|r| r.1 .0 .0.end > 20).count();
        assert_eq!(open[0].len() + open[1].len(), left);
        assert_eq!(state.len(), left);
        assert!(open.iter().flatten().all(|(((w, _), _), _)| w.end > 20));
        state.clear();
        assert_eq!(state.len(), 0);
    }
}
