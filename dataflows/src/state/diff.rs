//! The difference type: per-`(window, key)` aggregate states carried in the diff, with
//! exact eviction.
//!
//! Every insert contributes `Acc { n: 1, parts }` at the current time. When a window (or,
//! with panes, a pane's last window) closes, the worker that holds it adds
//! `Acc { n: -N, parts: [] }` for its `N` contributions, at the current time, which is at or
//! after the unit's end ([`Acc::eviction`], from the open-window table). Addition adds `n`
//! and folds `parts` with [`AggState::combined`]; a sum whose `n` is zero is *the* zero,
//! whatever its parts. This is a commutative monoid on positive contributions (COUNT and
//! SUM add, MIN and MAX are semilattices), so the accumulation of a `(window, key)` at any
//! time before the window's end is exactly the fold of its inputs. Once compaction passes
//! the eviction's time, the contributions meet it, the accumulation is exactly zero and the
//! entry leaves the trace: eviction is exact even for MIN, MAX and float sums, which have no
//! inverse. (Sums mixing positive and negative contributions are only ever formed at or
//! after the window's end, where nobody reads their parts.)
//!
//! The eviction enters when the unit closes, not in advance at a future time: updates at
//! future times would wait in the arrangement's batcher, which re-sorts everything it holds
//! at every step, making each step cost the whole open state.

use differential_dataflow::difference::{IsZero, Monoid, Semigroup};
use serde::{Deserialize, Serialize};

use crate::state::agg::{AggKind, AggState, Value};

/// Non-empty aggregate states an [`Acc`] holds inline; more spill to the heap.
pub(crate) const INLINE: usize = 4;

/// The most aggregates an [`Acc`] holds sparsely (a bit each: see [`Slots::Sparse`]).
const SPARSE_MAX: usize = 64;

/// One aggregate's partial state, flat: `count` non-null inputs and the value's bits (an
/// `i128` as two words, or an `f64`'s bits in `lo`), which the slot's [`AggKind`] reads.
/// `count == 0` is the empty state; `Count`'s value is its count.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub(crate) struct Slot {
    count: i64,
    lo: u64,
    hi: i64,
}

impl Slot {
    /// The slot of no input: the identity of every kind.
    const EMPTY: Slot = Slot {
        count: 0,
        lo: 0,
        hi: 0,
    };

    fn is_empty(&self) -> bool {
        *self == Slot::EMPTY
    }

    /// `self` and `other` folded for `kind` (`None` on overflow, or a state that does not
    /// suit `kind`).
    fn combined(&self, kind: AggKind, other: &Slot) -> Option<Slot> {
        let s = self.state(kind).combined(kind, &other.state(kind)).ok()?;
        Slot::of(kind, &s)
    }

    /// The slot of `state` for `kind` (`None` if the value's type does not suit the kind).
    fn of(kind: AggKind, state: &AggState) -> Option<Slot> {
        let (lo, hi) = match (state.count, state.value) {
            (0, Value::Null) => (0, 0),
            (_, Value::Float(x)) if kind.is_float() => (x.to_bits(), 0),
            (_, Value::Int(i)) if !kind.is_float() => (i as u64, (i >> 64) as i64),
            _ => return None,
        };
        Some(Slot {
            count: state.count,
            lo,
            hi,
        })
    }

    /// The state this slot holds for `kind`.
    fn state(&self, kind: AggKind) -> AggState {
        let value = if self.count == 0 {
            Value::Null
        } else if kind.is_float() {
            Value::Float(f64::from_bits(self.lo))
        } else {
            Value::Int((i128::from(self.hi) << 64) | i128::from(self.lo))
        };
        AggState {
            count: self.count,
            value,
        }
    }
}

/// The aggregates' kinds and slots. An empty slot (no input folded) is the identity of
/// every kind, so only the non-empty ones are kept: up to [`INLINE`] of them inline,
/// marked by a bit per aggregate; more, or more than [`SPARSE_MAX`] aggregates, on the
/// heap, every slot. (An entry of one `COUNT(DISTINCT …)` argument folds only that
/// argument's aggregates: the others' slots are empty.) The kind of an empty slot is
/// never read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum Slots {
    Sparse {
        /// How many aggregates (at most [`SPARSE_MAX`]).
        len: u8,
        /// Bit `i`: aggregate `i`'s slot is not empty, and is held (in the order of `i`).
        present: u64,
        kinds: [AggKind; INLINE],
        slots: [Slot; INLINE],
    },
    Dense(Box<[(AggKind, Slot)]>),
}

impl Slots {
    const EMPTY: Slots = Slots::Sparse {
        len: 0,
        present: 0,
        kinds: [AggKind::Count; INLINE],
        slots: [Slot::EMPTY; INLINE],
    };

    fn len(&self) -> usize {
        match self {
            Slots::Sparse { len, .. } => usize::from(*len),
            Slots::Dense(s) => s.len(),
        }
    }

    /// Aggregate `i`'s kind and slot, unless its slot is empty.
    #[inline]
    fn get(&self, i: usize) -> Option<(AggKind, &Slot)> {
        match self {
            Slots::Sparse {
                present,
                kinds,
                slots,
                ..
            } => {
                let bit = 1u64.checked_shl(i as u32)?;
                (present & bit != 0).then(|| {
                    let at = (present & (bit - 1)).count_ones() as usize;
                    (kinds[at], &slots[at])
                })
            }
            Slots::Dense(s) => s
                .get(i)
                .filter(|(_, s)| !s.is_empty())
                .map(|(k, s)| (*k, s)),
        }
    }

    /// Folds `other` (as many aggregates) in; `false` if a slot overflowed.
    fn fold(&mut self, other: &Slots) -> bool {
        // the same aggregates held inline (entries of one key, mostly): slot by slot
        if let (
            Slots::Sparse {
                present: pa,
                kinds,
                slots,
                ..
            },
            Slots::Sparse {
                present: pb,
                slots: theirs,
                ..
            },
        ) = (&mut *self, other)
        {
            if *pa == *pb {
                let mut ok = true;
                for at in 0..pa.count_ones() as usize {
                    match slots[at].combined(kinds[at], &theirs[at]) {
                        Some(s) => slots[at] = s,
                        None => ok = false,
                    }
                }
                return ok;
            }
        }
        let mut ok = true;
        let mut out = Builder::new(self.len());
        let mut each = |i: usize| match (self.get(i), other.get(i)) {
            (Some((k, a)), Some((_, b))) => out.push(
                i,
                k,
                a.combined(k, b).unwrap_or_else(|| {
                    ok = false;
                    *a
                }),
            ),
            (Some((k, s)), None) | (None, Some((k, s))) => out.push(i, k, *s),
            (None, None) => {}
        };
        match (&*self, other) {
            (Slots::Sparse { present: pa, .. }, Slots::Sparse { present: pb, .. }) => {
                let mut m = pa | pb;
                while m != 0 {
                    each(m.trailing_zeros() as usize);
                    m &= m - 1;
                }
            }
            _ => (0..self.len()).for_each(&mut each),
        }
        *self = out.finish();
        ok
    }
}

/// Builds the [`Slots`] of `len` aggregates from their non-empty slots, pushed in the
/// order of their index: inline while they fit, else every slot on the heap.
struct Builder {
    len: usize,
    present: u64,
    held: usize,
    kinds: [AggKind; INLINE],
    slots: [Slot; INLINE],
    dense: Option<Vec<(AggKind, Slot)>>,
}

impl Builder {
    fn new(len: usize) -> Self {
        Builder {
            len,
            present: 0,
            held: 0,
            kinds: [AggKind::Count; INLINE],
            slots: [Slot::EMPTY; INLINE],
            dense: (len > SPARSE_MAX).then(|| vec![(AggKind::Count, Slot::EMPTY); len]),
        }
    }

    /// Aggregate `i`'s slot `s` (not empty; after every lower `i`).
    #[inline]
    fn push(&mut self, i: usize, k: AggKind, s: Slot) {
        if self.dense.is_none() && self.held == INLINE {
            // one more than fit inline: every slot on the heap
            let mut all = vec![(AggKind::Count, Slot::EMPTY); self.len];
            let mut m = self.present;
            for at in 0..self.held {
                all[m.trailing_zeros() as usize] = (self.kinds[at], self.slots[at]);
                m &= m - 1;
            }
            self.dense = Some(all);
        }
        match &mut self.dense {
            Some(all) => all[i] = (k, s),
            None => {
                self.present |= 1 << i;
                self.kinds[self.held] = k;
                self.slots[self.held] = s;
                self.held += 1;
            }
        }
    }

    fn finish(self) -> Slots {
        match self.dense {
            Some(all) => Slots::Dense(all.into_boxed_slice()),
            None => Slots::Sparse {
                len: self.len as u8,
                present: self.present,
                kinds: self.kinds,
                slots: self.slots,
            },
        }
    }
}

/// The difference type of the windowed-aggregate arrangement: `Copy`-sized and
/// allocation-free while at most [`INLINE`] of its aggregates' states are not empty.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct Acc {
    /// Number of contributions: positive for inserted states, negative for evictions.
    pub(crate) n: i64,
    /// Set when folding the states overflowed (or met a state that does not suit its kind):
    /// the states are then wrong and whoever reads them must report [`crate::Error::Overflow`].
    pub(crate) overflow: bool,
    /// One slot per aggregate; none for an eviction.
    slots: Slots,
}

impl Acc {
    /// One contribution of the given states (one per kind).
    pub(crate) fn insert(kinds: &[AggKind], states: &[AggState]) -> Self {
        let mut overflow = kinds.len() != states.len();
        if kinds.len() <= INLINE {
            // (the most: every non-empty slot fits inline; built here, not by `Builder`,
            // whose spill check costs q12 and q19 1.9 % of their instructions)
            let (mut ks, mut slots, mut present, mut at) =
                ([AggKind::Count; INLINE], [Slot::EMPTY; INLINE], 0u64, 0);
            for (i, (k, s)) in kinds.iter().zip(states).enumerate() {
                match Slot::of(*k, s) {
                    Some(slot) if slot.is_empty() => {}
                    Some(slot) => {
                        present |= 1 << i;
                        ks[at] = *k;
                        slots[at] = slot;
                        at += 1;
                    }
                    None => overflow = true,
                }
            }
            let slots = Slots::Sparse {
                len: kinds.len() as u8,
                present,
                kinds: ks,
                slots,
            };
            return Acc {
                n: 1,
                overflow,
                slots,
            };
        }
        let mut out = Builder::new(kinds.len());
        for (i, (k, s)) in kinds.iter().zip(states).enumerate() {
            // (most states of a wide entry are empty: skipped without reading them)
            if *s == AggState::EMPTY {
                continue;
            }
            match Slot::of(*k, s) {
                Some(slot) if slot.is_empty() => {}
                Some(slot) => out.push(i, *k, slot),
                None => overflow = true,
            }
        }
        Acc {
            n: 1,
            overflow,
            slots: out.finish(),
        }
    }

    /// The eviction of `n` contributions: added to their sum, in any order and grouping,
    /// it gives the zero.
    pub(crate) fn eviction(n: i64) -> Self {
        Acc {
            n: n.wrapping_neg(),
            overflow: false,
            slots: Slots::EMPTY,
        }
    }

    /// Number of aggregates held (0 for an eviction or the zero).
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The kind of the first aggregate whose state is not empty, if any (to name an
    /// overflow).
    pub(crate) fn first_kind(&self) -> Option<AggKind> {
        let mut first = None;
        let _ = self.try_each(|_, k, _| {
            first = Some(k);
            Err(())
        });
        first
    }

    /// Aggregate `i`'s kind and state, unless its state is empty (no input folded).
    #[cfg(test)]
    pub(crate) fn part(&self, i: usize) -> Option<(AggKind, AggState)> {
        self.slots.get(i).map(|(k, s)| (k, s.state(k)))
    }

    /// Calls `f` with the index, kind and state of every aggregate whose state is not
    /// empty, in order; stops at its first error.
    #[inline]
    pub(crate) fn try_each<E>(
        &self,
        mut f: impl FnMut(usize, AggKind, AggState) -> Result<(), E>,
    ) -> Result<(), E> {
        match &self.slots {
            Slots::Sparse {
                present,
                kinds,
                slots,
                ..
            } => {
                let mut m = *present;
                let mut at = 0;
                while m != 0 {
                    f(
                        m.trailing_zeros() as usize,
                        kinds[at],
                        slots[at].state(kinds[at]),
                    )?;
                    m &= m - 1;
                    at += 1;
                }
            }
            Slots::Dense(all) => {
                for (i, (k, s)) in all.iter().enumerate() {
                    if !s.is_empty() {
                        f(i, *k, s.state(*k))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Every aggregate's state, in order (the empty state for one without input), into
    /// `out` (emptied first).
    pub(crate) fn states_into(&self, out: &mut Vec<AggState>) {
        out.clear();
        match &self.slots {
            // every slot held (the most): in order
            Slots::Sparse {
                len,
                present,
                kinds,
                slots,
            } if u32::from(*len) == present.count_ones() => out.extend(
                (kinds.iter().zip(slots))
                    .take(usize::from(*len))
                    .map(|(k, s)| s.state(*k)),
            ),
            _ => {
                out.resize(self.len(), AggState::EMPTY);
                let _ = self.try_each(|i, _, s| {
                    out[i] = s;
                    Ok::<(), ()>(())
                });
            }
        }
    }

    /// Every aggregate's state, in order (the empty state for one without input).
    pub(crate) fn states(&self) -> Vec<AggState> {
        let mut out = Vec::with_capacity(self.len());
        self.states_into(&mut out);
        out
    }
}

impl IsZero for Acc {
    fn is_zero(&self) -> bool {
        self.n == 0
    }
}

impl Semigroup for Acc {
    fn plus_equals(&mut self, rhs: &Self) {
        self.n = self.n.wrapping_add(rhs.n);
        if self.n == 0 {
            self.slots = Slots::EMPTY;
            self.overflow = false;
            return;
        }
        self.overflow |= rhs.overflow;
        if rhs.len() == 0 {
            return;
        }
        if self.len() == 0 {
            self.slots.clone_from(&rhs.slots);
            return;
        }
        if self.len() != rhs.len() || !self.slots.fold(&rhs.slots) {
            self.overflow = true;
        }
    }
}

impl Monoid for Acc {
    fn zero() -> Self {
        Acc {
            n: 0,
            overflow: false,
            slots: Slots::EMPTY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::agg::Value;

    const KINDS: [AggKind; 3] = [AggKind::MinFloat, AggKind::SumFloat, AggKind::SumInt];

    fn acc(x: f64, i: i128) -> Acc {
        Acc::insert(
            &KINDS,
            &[
                AggState::from_value(KINDS[0], Value::Float(x)),
                AggState::from_value(KINDS[1], Value::Float(x)),
                AggState::from_value(KINDS[2], Value::Int(i)),
            ],
        )
    }

    #[test]
    fn slots_hold_every_state_exactly() {
        for (kind, v) in [
            (AggKind::SumInt, Value::Int(i128::MIN)),
            (AggKind::SumInt, Value::Int(i128::MAX)),
            (AggKind::MinInt, Value::Int(-1)),
            (AggKind::MaxFloat, Value::Float(f64::NAN)),
            (AggKind::MinFloat, Value::Float(-0.0)),
            (AggKind::SumFloat, Value::Float(f64::NEG_INFINITY)),
            (AggKind::Count, Value::Int(1)),
            (AggKind::SumInt, Value::Null),
        ] {
            let s = AggState::from_value(kind, v);
            let slot = Slot::of(kind, &s).expect("suits its kind");
            assert_eq!(slot.state(kind), s, "{kind:?} {v:?}");
        }
        assert!(Slot::of(
            AggKind::SumInt,
            &AggState::from_value(AggKind::SumFloat, Value::Float(1.0))
        )
        .is_none());
    }

    #[test]
    fn spilled_and_inline_sums_agree() {
        // six aggregates spill; their first three fold as the inline three do
        let six = [KINDS, KINDS].concat();
        let states = |x: f64, i: i128| {
            let one = [
                AggState::from_value(KINDS[0], Value::Float(x)),
                AggState::from_value(KINDS[1], Value::Float(x)),
                AggState::from_value(KINDS[2], Value::Int(i)),
            ];
            [one, one].concat()
        };
        let mut wide = Acc::insert(&six, &states(2.0, 1));
        wide.plus_equals(&Acc::insert(&six, &states(-1.5, 7)));
        let mut narrow = acc(2.0, 1);
        narrow.plus_equals(&acc(-1.5, 7));
        assert_eq!(wide.len(), 6);
        for i in 0..6 {
            assert_eq!(wide.part(i), narrow.part(i % 3), "slot {i}");
        }
        wide.plus_equals(&Acc::eviction(wide.n));
        assert!(wide.is_zero());
    }

    #[test]
    fn the_contributions_meet_their_eviction() {
        let ups = [acc(0.1, 1), acc(0.2, i128::MAX), acc(-3.7, 5)];
        // Any interleaving of the updates and one eviction of all three sums to zero.
        let mut all: Vec<Acc> = ups.to_vec();
        all.push(Acc::eviction(ups.len() as i64));
        for rot in 0..all.len() {
            all.rotate_left(1);
            let mut sum = Acc::zero();
            for a in &all {
                sum.plus_equals(a);
            }
            assert!(sum.is_zero(), "rotation {rot}: {sum:?}");
            assert_eq!(sum, Acc::zero());
        }
    }

    #[test]
    fn positives_fold_and_flag_overflow() {
        let mut s = acc(2.0, 1);
        s.plus_equals(&acc(-1.0, 2));
        assert_eq!(s.n, 2);
        assert!(!s.overflow);
        assert_eq!(s.states()[0].value, Value::Float(-1.0));
        assert_eq!(s.states()[1].value, Value::Float(1.0));
        assert_eq!(s.states()[2].value, Value::Int(3));
        s.plus_equals(&acc(0.0, i128::MAX));
        assert!(s.overflow);
    }

    /// Kinds for `len` aggregates, cycling through every kind.
    fn kinds(len: usize) -> Vec<AggKind> {
        let all = [
            AggKind::Count,
            AggKind::SumInt,
            AggKind::MinInt,
            AggKind::MaxInt,
            AggKind::SumFloat,
            AggKind::MinFloat,
            AggKind::MaxFloat,
        ];
        (0..len).map(|i| all[i % all.len()]).collect()
    }

    /// The state of one input `x` for `kind`, or the empty state for `None`.
    fn input(kind: AggKind, x: Option<i64>) -> AggState {
        match x {
            None => AggState::EMPTY,
            Some(x) if kind.is_float() => AggState::from_value(kind, Value::Float(x as f64 / 4.0)),
            Some(x) => AggState::from_value(kind, Value::Int(i128::from(x))),
        }
    }

    proptest::proptest! {
        /// Folding contributions whose states are mostly empty (an entry of one
        /// `COUNT(DISTINCT …)` argument among several), in any order and grouping, gives
        /// the states a plain fold of every state gives: held sparsely, spilled, or both.
        #[test]
        fn sparse_slots_fold_as_every_slot_folds(
            len in 1usize..80,
            rows in proptest::collection::vec(
                proptest::collection::vec(proptest::option::weighted(0.2, -9i64..9), 80),
                1..12,
            ),
            split in 0usize..12,
        ) {
            let kinds = kinds(len);
            let rows: Vec<Vec<AggState>> = rows
                .iter()
                .map(|r| kinds.iter().zip(r).map(|(&k, &x)| input(k, x)).collect())
                .collect();
            let mut want = vec![AggState::EMPTY; len];
            for r in &rows {
                for ((w, s), &k) in want.iter_mut().zip(r).zip(&kinds) {
                    *w = w.combined(k, s).expect("small inputs");
                }
            }
            // two partial sums (as the arrangement's batches hold them), then their sum
            let split = split.min(rows.len());
            let sum = |rs: &[Vec<AggState>]| {
                rs.iter().fold(Acc::zero(), |mut a, r| {
                    a.plus_equals(&Acc::insert(&kinds, r));
                    a
                })
            };
            let (mut a, b) = (sum(&rows[..split]), sum(&rows[split..]));
            a.plus_equals(&b);
            proptest::prop_assert!(!a.overflow);
            proptest::prop_assert_eq!(a.n, rows.len() as i64);
            proptest::prop_assert_eq!(a.len(), len);
            proptest::prop_assert_eq!(a.states(), want);
            a.plus_equals(&Acc::eviction(a.n));
            proptest::prop_assert_eq!(a, Acc::zero());
        }
    }

    #[test]
    fn an_entry_of_few_states_is_held_inline_and_spills_past_them() {
        let kinds = kinds(9);
        let only = |at: &[usize]| {
            let states: Vec<AggState> = (0..9)
                .map(|i| input(kinds[i], at.contains(&i).then_some(3)))
                .collect();
            Acc::insert(&kinds, &states)
        };
        let mut a = only(&[2, 7]);
        assert!(matches!(a.slots, Slots::Sparse { .. }), "{a:?}");
        a.plus_equals(&only(&[0, 7]));
        assert!(matches!(a.slots, Slots::Sparse { .. }), "three of nine");
        a.plus_equals(&only(&[4, 5]));
        assert!(matches!(a.slots, Slots::Dense(_)), "five of nine");
        let states: Vec<AggState> = a.states();
        assert_eq!(states[7].count, 2);
        assert_eq!([1, 3, 6, 8].map(|i| states[i]), [AggState::EMPTY; 4]);
        assert_eq!(a.first_kind(), Some(kinds[0]));
        // a slot that does not suit its kind flags the sum, inline too
        let mut bad = only(&[1]);
        bad.plus_equals(&Acc::insert(&kinds[..1], &[input(kinds[0], Some(1))]));
        assert!(bad.overflow, "a contribution of other aggregates");
        let mut big = Acc::insert(&[AggKind::SumInt], &[input(AggKind::SumInt, Some(1))]);
        big.plus_equals(&Acc::insert(
            &[AggKind::SumInt],
            &[AggState::from_value(AggKind::SumInt, Value::Int(i128::MAX))],
        ));
        assert!(big.overflow, "an i128 overflow");
    }
}
