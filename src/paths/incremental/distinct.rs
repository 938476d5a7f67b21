//! Aggregates kept per value — `COUNT(DISTINCT x)`, and `MIN`/`MAX` of `x`
//! when `x` has no integer order (strings, binaries): the dataflow keys its
//! states by group and value of `x` (the plan's last key), so each value of
//! a group is one entry whose states count and fold that value's rows. A
//! group's row merges its entries: every other aggregate combines their
//! states (all are accumulable); `COUNT(DISTINCT x)` counts the entries whose
//! own count is positive (a NULL `x`, or rows its `FILTER` refused, count
//! zero), and `MIN`/`MAX` pick the least or greatest such entry — entries
//! of one group differ only in `x`, so their row-format key bytes order them
//! as `x` orders. The merged state of `MIN`/`MAX` holds that entry's key id,
//! which rendering decodes to the value.
//!
//! With several arguments (`COUNT(DISTINCT a)` beside `COUNT(DISTINCT b)`),
//! the keys after the group keys are the argument's index and its value,
//! and each row is one entry per argument (`plan::Tagged`): an entry folds
//! its own argument's aggregates and, for the first argument, every
//! aggregate not kept per value (so those fold each row once); the other
//! aggregates' states of an entry stay empty, and merging them adds nothing.
//!
//! Update and Complete modes render open groups as their entries change:
//! [`DistinctGroups`] keeps the open entries by window and group with each
//! group's merge, updated entry by entry (a trigger costs its changed
//! entries, not its groups' values), and gives each group an id that stays
//! its own while its window is open (what `Shown` remembers rows by). Of
//! an entry it keeps only what its next change needs: a count, a state, or
//! one bit (whether its value counts yet) per aggregate.

use std::collections::BTreeMap;

use arrow::row::{RowConverter, Rows, SortField};
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use thund_dataflows::{AggKind, AggState, Update, Value};

use super::keys::{KeyBytes, MixMap};
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::plan::{CompiledAgg, PerValue};
use crate::window::Window;

/// One open group: its stable id, a key id of it (any entry's: its group
/// keys are the group's), and the merge of its entries, kept up to date
/// entry by entry so a trigger costs its changed entries.
struct Group {
    id: u64,
    key: u64,
    merged: Vec<AggState>,
    /// The last [`DistinctGroups::round`] that changed it.
    round: u64,
}

/// One open window's groups and entries. An entry is found by its key id
/// (stable while its window is open), so only an entry seen for the first
/// time needs its group keys decoded and looked up. Of an entry the host
/// keeps only what the next change of it needs (see [`Layout`]), in one slot
/// of flat vectors.
#[derive(Default)]
struct WindowGroups {
    /// Group key bytes → index in `groups`.
    index: FxHashMap<Box<[u8]>, u32>,
    groups: Vec<Group>,
    /// Entry key id → (its group's index, its slot).
    entries: FxHashMap<u64, (u32, u32)>,
    /// Per slot: the counts of `Layout::counts`, the states of
    /// `Layout::states`, the words of `Layout::seen`.
    counts: Vec<i64>,
    states: Vec<AggState>,
    seen: Vec<u64>,
}

/// Where an entry keeps what an aggregate's next change needs.
#[derive(Clone, Copy)]
enum Kept {
    /// A `COUNT` not kept per value: its count (the change is the difference).
    Count(usize),
    /// Any other aggregate not kept per value: its state.
    State(usize),
    /// Kept per value: whether this value counts yet (one bit).
    Seen(usize),
}

/// The slot layout of an entry, by aggregate.
struct Layout {
    kept: Vec<Kept>,
    counts: usize,
    states: usize,
    /// Words of bits.
    seen: usize,
}

impl Layout {
    fn of(aggs: &[CompiledAgg]) -> Self {
        let (mut counts, mut states, mut bits) = (0, 0, 0);
        let next = |n: &mut usize| {
            *n += 1;
            *n - 1
        };
        let kept = aggs
            .iter()
            .map(|a| match (a.per_value, a.kind) {
                (Some(_), _) => Kept::Seen(next(&mut bits)),
                (None, AggKind::Count) => Kept::Count(next(&mut counts)),
                (None, _) => Kept::State(next(&mut states)),
            })
            .collect();
        Layout {
            kept,
            counts,
            states,
            seen: bits.div_ceil(64),
        }
    }
}

/// The open entries of every group, by window.
pub(super) struct DistinctGroups {
    layout: Layout,
    by_window: BTreeMap<Window, WindowGroups>,
    tally: Tally,
}

/// What [`DistinctGroups`] counts over all its windows.
#[derive(Default)]
struct Tally {
    /// The last group id given.
    next_id: u64,
    /// Entries held, over all groups.
    entries: usize,
    /// Counts the merges of changed entries (a group changed by this one
    /// has it as its `round`).
    round: u64,
}

/// Where a changed entry is: held at `(group, slot)` of its window, or not
/// yet (the index of its group keys among the entries not held).
#[derive(Clone, Copy)]
enum Found {
    Held(u32, u32),
    Unseen(u32),
}

impl DistinctGroups {
    fn new(aggs: &[CompiledAgg]) -> Self {
        DistinctGroups {
            layout: Layout::of(aggs),
            by_window: BTreeMap::new(),
            tally: Tally::default(),
        }
    }

    /// Records an entry's new states in its window's groups `w` and folds
    /// the change into its group's merge; `held` is where `merge_changed`
    /// found it, and `group` gives its group key bytes, read only for an
    /// entry not held yet. Returns the group's index in its window and
    /// whether this round changed it before.
    #[allow(clippy::too_many_arguments)]
    fn upsert<'g>(
        layout: &Layout,
        w: &mut WindowGroups,
        tally: &mut Tally,
        u: &Update,
        held: Option<(u32, u32)>,
        group: impl FnOnce() -> &'g [u8],
        aggs: &[CompiledAgg],
        keys: &impl KeyBytes,
    ) -> std::result::Result<(u32, bool), thund_dataflows::Error> {
        let m = aggs.len();
        let (g, slot, new_entry) = match held {
            Some((g, slot)) => (g as usize, slot as usize, false),
            None => {
                let bytes = group();
                // no group keys: the one group, without a lookup of empty
                // bytes (see `Pruner::keep`: such lookups are slow)
                let found = match bytes.is_empty() {
                    true => (!w.groups.is_empty()).then_some(0),
                    false => w.index.get(bytes).copied(),
                };
                let g = match found {
                    Some(g) => g,
                    None => {
                        tally.next_id += 1;
                        w.groups.push(Group {
                            id: tally.next_id,
                            key: u.key,
                            merged: vec![AggState::EMPTY; m],
                            round: 0,
                        });
                        let g = (w.groups.len() - 1) as u32;
                        if !bytes.is_empty() {
                            w.index.insert(bytes.into(), g);
                        }
                        g
                    }
                };
                let slot = w.entries.len();
                let l = layout;
                w.counts.resize((slot + 1) * l.counts, 0);
                w.states.resize((slot + 1) * l.states, AggState::EMPTY);
                w.seen.resize((slot + 1) * l.seen, 0);
                w.entries.insert(u.key, (g, slot as u32));
                tally.entries += 1;
                (g as usize, slot, true)
            }
        };
        let l = layout;
        let counts = &mut w.counts[slot * l.counts..(slot + 1) * l.counts];
        let states = &mut w.states[slot * l.states..(slot + 1) * l.states];
        let seen = &mut w.seen[slot * l.seen..(slot + 1) * l.seen];
        let again = w.groups[g].round == tally.round;
        w.groups[g].round = tally.round;
        let merged = &mut w.groups[g].merged;
        for (((a, new), m), kept) in aggs.iter().zip(&u.aggs).zip(merged).zip(&l.kept) {
            match (*kept, a.per_value) {
                // unchanged (as an entry's other arguments' aggregates stay):
                // nothing to add to its group's merge
                (Kept::Count(i), _) if new.count == counts[i] => {}
                (Kept::Count(i), _) => {
                    let old = AggState {
                        count: counts[i],
                        value: Value::Null,
                    };
                    m.combine(a.kind, &change(a.kind, &old, new)?)?;
                    counts[i] = new.count;
                }
                (Kept::State(i), _) if !new_entry && states[i] == *new => {}
                (Kept::State(i), _) => {
                    let old = if new_entry {
                        AggState::EMPTY
                    } else {
                        states[i]
                    };
                    m.combine(a.kind, &change(a.kind, &old, new)?)?;
                    states[i] = *new;
                }
                // a value joins the group's values when its count turns positive
                (Kept::Seen(b), _) if bit(seen, b) || new.count <= 0 => {}
                (Kept::Seen(b), p) => {
                    seen[b / 64] |= 1 << (b % 64);
                    if let Some(p) = p {
                        joins(p, m, u.key, new, keys)?;
                    }
                }
            }
        }
        Ok((g as u32, again))
    }

    /// Whether entries of `window` are held (it was open at the last step).
    pub(super) fn holds(&self, window: &Window) -> bool {
        self.by_window.contains_key(window)
    }

    /// The bit aggregate `j`'s values count by in an entry, if it is kept
    /// per value.
    pub(super) fn seen_bit(&self, j: usize) -> Option<usize> {
        match self.layout.kept.get(j) {
            Some(Kept::Seen(b)) => Some(*b),
            _ => None,
        }
    }

    /// Whether `window` holds entry `key` with every bit of `bits` set (its
    /// value counts already for those aggregates kept per value).
    pub(super) fn counted(&self, window: &Window, key: u64, bits: &[usize]) -> bool {
        let l = &self.layout;
        let Some(w) = self.by_window.get(window) else {
            return false;
        };
        let Some(&(_, slot)) = w.entries.get(&key) else {
            return false;
        };
        let seen = &w.seen[slot as usize * l.seen..(slot as usize + 1) * l.seen];
        bits.iter().all(|&b| bit(seen, b))
    }

    /// A window closed: its groups go.
    pub(super) fn close(&mut self, window: &Window) {
        if let Some(w) = self.by_window.remove(window) {
            self.tally.entries -= w.entries.len();
        }
    }

    /// The entries held (part of the view's state size).
    pub(super) fn len(&self) -> usize {
        self.tally.entries
    }

    fn group(&self, window: &Window, g: u32) -> Option<&Group> {
        self.by_window
            .get(window)
            .and_then(|w| w.groups.get(g as usize))
    }
}

/// Bit `b` of `words`.
fn bit(words: &[u64], b: usize) -> bool {
    words[b / 64] >> (b % 64) & 1 == 1
}

/// What an entry's new state adds to its old one, as a state its group's
/// merge combines: counts and sums by difference (exact for integers, and
/// for floats whenever the contract's sums are exact; an unchanged value adds
/// nothing, so infinities and NaN stay), minima and maxima by the new value.
fn change(
    kind: AggKind,
    old: &AggState,
    new: &AggState,
) -> std::result::Result<AggState, thund_dataflows::Error> {
    let overflow = || thund_dataflows::Error::Overflow {
        kind,
        window: None,
        detail: String::new(),
        aggregate: None,
    };
    let count = new.count.checked_sub(old.count).ok_or_else(overflow)?;
    let value = match (kind, old.value, new.value) {
        (AggKind::Count, _, _) => Value::Null,
        (AggKind::SumInt, Value::Int(a), Value::Int(b)) => {
            Value::Int(b.checked_sub(a).ok_or_else(overflow)?)
        }
        (AggKind::SumFloat, Value::Float(a), Value::Float(b)) => {
            if a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) {
                Value::Null
            } else {
                Value::Float(b - a)
            }
        }
        (AggKind::SumInt | AggKind::SumFloat, _, b) => b,
        // minima and maxima only move one way within a window
        (_, _, b) => b,
    };
    Ok(AggState { count, value })
}

/// One merged row of a group: the representative entry's key (its group
/// keys are the group's), the merged states, and the group's id if it is open.
type Merged = (Update, u64);

impl IncrementalView {
    /// The group keys of each update's entry (the dataflow key without its
    /// last column, the value kept per value): empty when the view has no
    /// group keys (every entry is the one group's); where each group key
    /// column has a fixed width in the row format, the head of the entry's
    /// own key bytes (each column's encoding follows the one before it);
    /// else decoded and encoded in a row format of their own.
    fn group_keys(&self, updates: &[&Update]) -> Result<GroupKeys<'_>> {
        let n = self.plan.group_keys;
        let Some(conv) = self.converter.as_ref().filter(|_| n > 0) else {
            return Ok(GroupKeys::Prefix(0, &self.keys));
        };
        let fields = &self.plan.key_fields[..n];
        if let Some(width) = fields.iter().map(|f| fixed_width(f.data_type())).sum() {
            return Ok(GroupKeys::Prefix(width, &self.keys));
        }
        // strings and binaries among them: each entry's head measured
        let heads = updates
            .iter()
            .map(|u| {
                let bytes = self.keys.bytes(u.key);
                let mut at = 0;
                for f in fields {
                    at += encoded_len(f.data_type(), bytes.get(at..)?)?;
                }
                (at <= bytes.len()).then_some(at)
            })
            .collect::<Option<Vec<usize>>>();
        if let Some(heads) = heads {
            return Ok(GroupKeys::Heads(heads, &self.keys));
        }
        let parser = conv.parser();
        let cols =
            conv.convert_rows(updates.iter().map(|u| parser.parse(self.keys.bytes(u.key))))?;
        let group_conv = RowConverter::new(
            fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(GroupKeys::Rows(group_conv.convert_columns(&cols[..n])?))
    }

    /// Closed entries merged into one update per group, in the order of
    /// windows, then group keys. In Update and Complete modes the merges of
    /// groups open before this trigger are held: their closed entries update
    /// them (each one hash lookup, nothing decoded but entries never seen);
    /// the rest are grouped and merged here.
    pub(super) fn merge_closed(&mut self, closed: &[&Update]) -> Result<Vec<Update>> {
        // a window opened and closed within this trigger has no groups held
        let (held, fresh): (Vec<&Update>, Vec<&Update>) = closed.iter().copied().partition(|u| {
            self.distinct
                .as_ref()
                .is_some_and(|d| d.by_window.contains_key(&u.window))
        });
        let mut merged = self.merge_closed_entries(&fresh)?;
        if held.is_empty() {
            return Ok(merged);
        }
        merged.extend(self.merge_changed(&held)?.into_iter().map(|(u, _)| u));
        let keys = &self.keys;
        merged.sort_by(|a, b| {
            // a group's keys lead its entries' key bytes (each column's
            // encoding delimits itself), so these order groups by their keys
            (a.window, keys.bytes(a.key)).cmp(&(b.window, keys.bytes(b.key)))
        });
        Ok(merged)
    }

    /// [`Self::merge_closed`] from the entries alone: grouped in one hash
    /// pass (each group's entries chained in the order they came), then the
    /// groups, fewer than their entries, put in order.
    fn merge_closed_entries(&self, closed: &[&Update]) -> Result<Vec<Update>> {
        if u32::try_from(closed.len()).is_err() {
            return Err(Error::internal(
                &self.view,
                "2^32 closed entries or more in one step",
            ));
        }
        let groups = self.group_keys(closed)?;
        let (heads, next) = match groups.width().filter(|&n| n <= 16) {
            // keys of one width read as big-endian integers order as their
            // bytes do
            Some(_) => chained(closed, |i, u| {
                let b = groups.of(i, u);
                let mut head = [0u8; 16];
                head[..b.len()].copy_from_slice(b);
                u128::from_be_bytes(head)
            }),
            None => chained(closed, |i, u| groups.of(i, u)),
        };
        heads
            .iter()
            .map(|&first| {
                let chain = std::iter::successors(Some(first), |&i| {
                    Some(next[i as usize]).filter(|&n| n != END)
                });
                let aggs = merge(
                    &self.view,
                    &self.plan.aggs,
                    chain.map(|i| (closed[i as usize].key, &closed[i as usize].aggs[..])),
                    &self.keys,
                )?;
                Ok(Update {
                    window: closed[first as usize].window,
                    key: closed[first as usize].key,
                    aggs,
                })
            })
            .collect()
    }

    /// Update and Complete modes: records the changed entries, and returns
    /// each changed group's merge, with its id. Only the entries not held
    /// yet have their group keys decoded.
    pub(super) fn merge_changed(&mut self, changed: &[&Update]) -> Result<Vec<Merged>> {
        let mut store = match self.distinct.take() {
            Some(store) => store,
            None => DistinctGroups::new(&self.plan.aggs),
        };
        // each entry held, or its index in `unseen`; entries come in runs of
        // one window, whose groups are looked up once a run
        let mut unseen: Vec<&Update> = Vec::new();
        let mut run: Option<(Window, Option<&WindowGroups>)> = None;
        let found: Vec<Found> = changed
            .iter()
            .map(|u| {
                let w = match run {
                    Some((window, w)) if window == u.window => w,
                    _ => {
                        let w = store.by_window.get(&u.window);
                        run = Some((u.window, w));
                        w
                    }
                };
                match w.and_then(|w| w.entries.get(&u.key)) {
                    Some(&(g, slot)) => Found::Held(g, slot),
                    None => {
                        unseen.push(u);
                        Found::Unseen(unseen.len() as u32 - 1)
                    }
                }
            })
            .collect();
        let result = self.merge_into(&mut store, changed, &found, &unseen);
        self.distinct = Some(store);
        result
    }

    /// [`Self::merge_changed`] into `store`, with where each changed entry
    /// is (`found`) and the entries it does not hold yet (`unseen`).
    fn merge_into(
        &self,
        store: &mut DistinctGroups,
        changed: &[&Update],
        found: &[Found],
        unseen: &[&Update],
    ) -> Result<Vec<Merged>> {
        let groups = self.group_keys(unseen)?;
        store.tally.round += 1;
        let mut touched: Vec<(Window, u32)> = Vec::new();
        let mut at = 0;
        // entries come in runs of one window: its groups looked up once a run
        while at < changed.len() {
            let window = changed[at].window;
            let run = changed[at..]
                .iter()
                .take_while(|u| u.window == window)
                .count();
            let w = store.by_window.entry(window).or_default();
            for (u, f) in changed[at..at + run].iter().zip(&found[at..at + run]) {
                let (held, row) = match *f {
                    Found::Held(g, slot) => (Some((g, slot)), 0),
                    Found::Unseen(row) => (None, row as usize),
                };
                let (g, again) = DistinctGroups::upsert(
                    &store.layout,
                    w,
                    &mut store.tally,
                    u,
                    held,
                    || groups.of(row, u),
                    &self.plan.aggs,
                    &self.keys,
                )
                .map_err(|e| Error::dataflow(&self.view, e))?;
                if !again {
                    touched.push((window, g));
                }
            }
            at += run;
        }
        // in the order of windows, then groups
        touched.sort_unstable();
        Ok(touched
            .into_iter()
            .filter_map(|(window, g)| store.group(&window, g).map(|g| (window, g)))
            .map(|(window, g)| (merged(window, g), g.id))
            .collect())
    }

    /// Complete mode: every open group, merged.
    pub(super) fn merge_open(&self) -> Vec<Update> {
        let Some(store) = &self.distinct else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (window, w) in &store.by_window {
            // a stable order: by group id (the order groups first appeared)
            out.extend(w.groups.iter().map(|g| merged(*window, g)));
        }
        out
    }

    /// A restore: the open entries of windows still open, as the store;
    /// returns every open group, merged, with its id.
    pub(super) fn restore_distinct(
        &mut self,
        open: &BTreeMap<(Window, u64), Vec<AggState>>,
    ) -> Result<Vec<Merged>> {
        self.distinct = Some(DistinctGroups::new(&self.plan.aggs));
        let entries: Vec<Update> = super::updates_of(open);
        let refs: Vec<&Update> = entries.iter().collect();
        self.merge_changed(&refs)
    }
}

/// The group keys of entries (see `IncrementalView::group_keys`).
enum GroupKeys<'a> {
    /// The first bytes of each entry's key.
    Prefix(usize, &'a super::keys::Keys),
    /// The first bytes of each entry's key, as many as its index's number.
    Heads(Vec<usize>, &'a super::keys::Keys),
    /// Each entry's, by its index.
    Rows(Rows),
}

impl GroupKeys<'_> {
    /// The width of every entry's group keys, where it is one.
    fn width(&self) -> Option<usize> {
        match self {
            GroupKeys::Prefix(n, _) => Some(*n),
            GroupKeys::Heads(..) | GroupKeys::Rows(_) => None,
        }
    }

    /// The group keys of entry `u`, the `i`th.
    fn of(&self, i: usize, u: &Update) -> &[u8] {
        match self {
            GroupKeys::Prefix(n, keys) => keys.bytes(u.key).get(..*n).unwrap_or(&[]),
            GroupKeys::Heads(n, keys) => keys.bytes(u.key).get(..n[i]).unwrap_or(&[]),
            GroupKeys::Rows(rows) => rows.row(i).data(),
        }
    }
}

/// The end of a chain of entries.
const END: u32 = u32::MAX;

/// `entries` (fewer than 2^32) grouped by window and `key_of` (entry index,
/// entry): each group's first entry, in the order of windows, then keys,
/// and each entry's next entry of its group (or [`END`]), so a group's
/// entries are followed in the order they came.
fn chained<K: std::hash::Hash + Ord + Copy>(
    entries: &[&Update],
    key_of: impl Fn(usize, &Update) -> K,
) -> (Vec<u32>, Vec<u32>) {
    let mut heads: Vec<((Window, K), u32)> = Vec::new();
    // per group: its last entry so far (keys read as integers vary in
    // their high bytes: hashed by `Mix`)
    let mut last: MixMap<(Window, K), u32> = MixMap::default();
    let mut next: Vec<u32> = vec![END; entries.len()];
    for (i, u) in entries.iter().enumerate() {
        let k = (u.window, key_of(i, u));
        match last.entry(k) {
            Entry::Occupied(mut l) => {
                next[*l.get() as usize] = i as u32;
                *l.get_mut() = i as u32;
            }
            Entry::Vacant(v) => {
                v.insert(i as u32);
                heads.push((k, i as u32));
            }
        }
    }
    // each group once: no ties
    heads.sort_unstable_by_key(|&(k, _)| k);
    (heads.into_iter().map(|(_, first)| first).collect(), next)
}

/// The width of a column of type `t` in the row format, where it is fixed
/// (a validity byte and the value's bytes): integers, dates, timestamps
/// and decimals.
pub(super) fn fixed_width(t: &arrow::datatypes::DataType) -> Option<usize> {
    use arrow::datatypes::DataType as D;
    match t {
        D::Int8 | D::UInt8 => Some(2),
        D::Int16 | D::UInt16 => Some(3),
        D::Int32 | D::UInt32 | D::Date32 => Some(5),
        D::Int64 | D::UInt64 | D::Date64 | D::Timestamp(_, _) => Some(9),
        D::Decimal128(_, _) => Some(17),
        _ => None,
    }
}

/// The length of the row-format bytes (ascending, NULLs first: as the
/// view's keys are encoded) of a value of type `t` at the head of `bytes`:
/// a fixed width, or for strings and binaries, measured by walking their
/// encoding (a first byte 2 for a value of at least one byte, then blocks,
/// up to four of 8 bytes and then of 32, each followed by 0xFF where
/// another block follows). `None` for other types, or bytes that end early.
fn encoded_len(t: &arrow::datatypes::DataType, bytes: &[u8]) -> Option<usize> {
    use arrow::datatypes::DataType as D;
    if let Some(w) = fixed_width(t) {
        return Some(w);
    }
    if !matches!(
        t,
        D::Utf8 | D::LargeUtf8 | D::Utf8View | D::Binary | D::LargeBinary | D::BinaryView
    ) {
        return None;
    }
    // NULL and the empty value are one byte
    if *bytes.first()? != 2 {
        return Some(1);
    }
    let mut at = 1;
    for block in std::iter::repeat_n(8, 4).chain(std::iter::repeat(32)) {
        let continues = *bytes.get(at + block)? == 0xFF;
        at += block + 1;
        if !continues {
            return Some(at);
        }
    }
    None
}

/// An open group's row: its key, its merged states.
fn merged(window: Window, g: &Group) -> Update {
    Update {
        window,
        key: g.key,
        aggs: g.merged.clone(),
    }
}

/// A value's contribution to its group's `SUM`/`AVG(DISTINCT …)`: counted
/// once, with the value its `MAX` state holds.
fn one(entry: &AggState) -> AggState {
    AggState {
        count: 1,
        value: entry.value,
    }
}

/// One group's states from its entries' (key id, states): `COUNT(DISTINCT
/// …)` counts the entries whose count is positive, `MIN`/`MAX` keep the key
/// id of the least or greatest such entry (count 1, or empty without one),
/// every other aggregate combines them.
fn merge<'a>(
    view: &str,
    aggs: &[CompiledAgg],
    entries: impl Iterator<Item = (u64, &'a [AggState])>,
    keys: &impl KeyBytes,
) -> Result<Vec<AggState>> {
    let mut out = vec![AggState::EMPTY; aggs.len()];
    for (key, e) in entries {
        for ((o, a), x) in out.iter_mut().zip(aggs).zip(e) {
            match a.per_value {
                None => o.combine(a.kind, x),
                Some(_) if x.count <= 0 => Ok(()),
                Some(p) => joins(p, o, key, x, keys),
            }
            .map_err(|e| Error::dataflow(view, e))?;
        }
    }
    Ok(out)
}

/// A value (entry `key`, whose count is positive, with state `entry`)
/// joins its group's merged state `m` of an aggregate kept per value:
/// `COUNT(DISTINCT …)` counts it, `SUM(DISTINCT …)` adds it, `MIN`/`MAX`
/// keep the key id of the least or greatest entry (their keys order them
/// as their values).
fn joins(
    p: PerValue,
    m: &mut AggState,
    key: u64,
    entry: &AggState,
    keys: &impl KeyBytes,
) -> std::result::Result<(), thund_dataflows::Error> {
    match p {
        PerValue::CountDistinct => {
            m.count += 1;
            m.value = Value::Int(i128::from(m.count));
        }
        // the value's state is MAX(x): x itself
        PerValue::SumDistinct => m.combine(AggKind::SumInt, &one(entry))?,
        PerValue::Min | PerValue::Max => {
            let better = match m.value {
                Value::Int(best) if m.count > 0 => {
                    let ord = keys.bytes(key).cmp(keys.bytes(best as u64));
                    if p == PerValue::Min {
                        ord.is_lt()
                    } else {
                        ord.is_gt()
                    }
                }
                _ => true,
            };
            if better {
                *m = AggState {
                    count: 1,
                    value: Value::Int(i128::from(key)),
                };
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{
        ArrayRef, Date32Array, Date64Array, Decimal128Array, Int16Array, Int32Array, Int64Array,
        Int8Array, StringArray, TimestampMillisecondArray, UInt16Array, UInt32Array, UInt64Array,
        UInt8Array,
    };
    use std::sync::Arc;

    /// `cols` in the row format, each column in its default sort order.
    fn conv(cols: &[ArrayRef]) -> arrow::row::Rows {
        RowConverter::new(
            cols.iter()
                .map(|c| SortField::new(c.data_type().clone()))
                .collect(),
        )
        .expect("converter")
        .convert_columns(cols)
        .expect("rows")
    }

    proptest::proptest! {
        /// Strings and binaries of any length (NULL, empty, across the 8- and
        /// 32-byte blocks) followed by more key columns: the measured head of
        /// an entry's key is the group keys' own encoding.
        #[test]
        fn variable_width_keys_are_measured_at_the_head_of_an_entrys_key(
            values in proptest::collection::vec(
                proptest::option::weighted(0.9, "[a-z\u{0}é\u{1F600}]{0,80}"),
                1..20,
            ),
            more in proptest::collection::vec(proptest::num::i64::ANY, 20),
        ) {
            use arrow::array::{BinaryArray, LargeStringArray, StringViewArray};
            let n = values.len();
            let strs: Vec<Option<&str>> = values.iter().map(|v| v.as_deref()).collect();
            let typed: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(strs.clone())),
                Arc::new(LargeStringArray::from(strs.clone())),
                Arc::new(StringViewArray::from(strs.clone())),
                Arc::new(BinaryArray::from(
                    strs.iter().map(|s| s.map(str::as_bytes)).collect::<Vec<_>>(),
                )),
            ];
            let ints: ArrayRef = Arc::new(Int64Array::from(more[..n].to_vec()));
            for a in &typed {
                // a string, an integer and a string again as the group keys
                let group = conv(&[a.clone(), ints.clone(), a.clone()]);
                let entry = conv(&[a.clone(), ints.clone(), a.clone(), ints.clone()]);
                let types = [a.data_type(), ints.data_type(), a.data_type()];
                for i in 0..n {
                    let bytes = entry.row(i).data();
                    let mut at = 0;
                    for t in types {
                        at += encoded_len(t, &bytes[at..]).expect("measured");
                    }
                    proptest::prop_assert_eq!(&bytes[..at], group.row(i).data());
                }
            }
        }

        /// Binaries of any bytes (0xFF, the row format's continuation mark,
        /// among them) and of every length across the 8- and 32-byte blocks.
        #[test]
        fn binary_keys_of_any_bytes_are_measured_at_the_head_of_an_entrys_key(
            values in proptest::collection::vec(
                proptest::option::weighted(
                    0.9,
                    proptest::collection::vec(
                        proptest::prop_oneof![
                            proptest::strategy::Just(0xFFu8),
                            proptest::strategy::Just(0u8),
                            proptest::num::u8::ANY,
                        ],
                        0..80usize,
                    ),
                ),
                1..20,
            ),
        ) {
            use arrow::array::{BinaryArray, BinaryViewArray, LargeBinaryArray};
            let bins: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
            let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(0..bins.len() as i64));
            let typed: Vec<ArrayRef> = vec![
                Arc::new(BinaryArray::from(bins.clone())),
                Arc::new(LargeBinaryArray::from(bins.clone())),
                Arc::new(BinaryViewArray::from(bins.clone())),
            ];
            for a in &typed {
                let group = conv(&[a.clone(), a.clone()]);
                let entry = conv(&[a.clone(), a.clone(), ints.clone()]);
                for i in 0..bins.len() {
                    let bytes = entry.row(i).data();
                    let first = encoded_len(a.data_type(), bytes).expect("measured");
                    let at = first + encoded_len(a.data_type(), &bytes[first..]).expect("measured");
                    proptest::prop_assert_eq!(&bytes[..at], group.row(i).data());
                }
            }
        }
    }

    /// For every type `fixed_width` names, the row format encodes each value
    /// (NULL or not) in that many bytes, so the group keys' encoding is the
    /// head of an entry's whatever follows (here a string value).
    #[test]
    fn fixed_width_columns_are_the_head_of_an_entrys_key() {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int8Array::from(vec![Some(i8::MIN), None, Some(i8::MAX)])),
            Arc::new(Int16Array::from(vec![Some(i16::MIN), None, Some(-1)])),
            Arc::new(Int32Array::from(vec![Some(0), None, Some(i32::MAX)])),
            Arc::new(Int64Array::from(vec![Some(i64::MIN), None, Some(i64::MAX)])),
            Arc::new(UInt8Array::from(vec![Some(0), None, Some(u8::MAX)])),
            Arc::new(UInt16Array::from(vec![Some(7), None, Some(u16::MAX)])),
            Arc::new(UInt32Array::from(vec![Some(7), None, Some(u32::MAX)])),
            Arc::new(UInt64Array::from(vec![Some(7), None, Some(u64::MAX)])),
            Arc::new(Date32Array::from(vec![Some(-3), None, Some(19_000)])),
            Arc::new(Date64Array::from(vec![Some(-3), None, Some(1 << 40)])),
            Arc::new(TimestampMillisecondArray::from(vec![
                Some(-1),
                None,
                Some(5),
            ])),
            Arc::new(
                Decimal128Array::from(vec![Some(-12345), None, Some(i128::MAX / 7)])
                    .with_precision_and_scale(38, 2)
                    .expect("decimal"),
            ),
        ];
        let value: ArrayRef =
            Arc::new(StringArray::from(vec![Some("a"), None, Some("long value")]));
        for a in &cols {
            for b in &cols {
                let width = fixed_width(a.data_type())
                    .zip(fixed_width(b.data_type()))
                    .map(|(x, y)| x + y)
                    .expect("fixed");
                let group = conv(&[a.clone(), b.clone()]);
                let entry = conv(&[a.clone(), b.clone(), value.clone()]);
                for i in 0..3 {
                    assert_eq!(group.row(i).data().len(), width, "{a:?} {b:?}");
                    assert_eq!(&entry.row(i).data()[..width], group.row(i).data());
                }
            }
        }
        assert_eq!(fixed_width(value.data_type()), None);
    }
}
