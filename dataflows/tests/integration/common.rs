//! Shared helpers: aggregate kinds, value generation, and the oracle.

use std::collections::{BTreeMap, HashMap};

use thund_dataflows::{AggKind, AggState, EventTime, Key, Update, Value, Window};

/// Every aggregate kind once.
pub const ALL_KINDS: [AggKind; 7] = AggKind::ALL;

/// The state of one input row: `x` for every aggregate, as an integer or as the dyadic
/// float `x / 4` (exact, so float sums do not depend on the order of additions); `None` is
/// a NULL input.
pub fn row_states(kinds: &[AggKind], x: Option<i64>) -> Vec<AggState> {
    kinds
        .iter()
        .map(|&k| {
            let v = match x {
                None => Value::Null,
                Some(x) if k.is_float() => Value::Float(x as f64 / 4.0),
                Some(x) => Value::Int(i128::from(x)),
            };
            AggState::from_value(k, v)
        })
        .collect()
}

/// A straightforward oracle: every inserted update folded by `AggState::combine`.
#[derive(Default, Clone, Debug)]
pub struct Oracle {
    pub kinds: Vec<AggKind>,
    pub groups: HashMap<(Window, Key), Vec<AggState>>,
}

impl Oracle {
    pub fn new(kinds: &[AggKind]) -> Self {
        Oracle {
            kinds: kinds.to_vec(),
            groups: HashMap::new(),
        }
    }

    pub fn add(&mut self, u: &Update) {
        match self.groups.get_mut(&(u.window, u.key)) {
            Some(acc) => {
                for ((k, a), b) in self.kinds.iter().zip(acc.iter_mut()).zip(&u.aggs) {
                    a.combine(*k, b).expect("oracle fold");
                }
            }
            None => {
                self.groups.insert((u.window, u.key), u.aggs.clone());
            }
        }
    }

    /// The oracle's groups with `window.end > w` (open) or `<= w` (closed), sorted.
    pub fn select(&self, open: bool, w: EventTime) -> BTreeMap<(Window, Key), Vec<AggState>> {
        self.groups
            .iter()
            .filter(|((win, _), _)| (win.end > w) == open)
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }
}

/// Updates as a sorted map; panics on a duplicate `(window, key)`.
pub fn as_map(updates: impl IntoIterator<Item = Update>) -> BTreeMap<(Window, Key), Vec<AggState>> {
    let mut out = BTreeMap::new();
    for u in updates {
        let k = (u.window, u.key);
        assert!(!out.contains_key(&k), "duplicate (window, key) {k:?}");
        out.insert(k, u.aggs);
    }
    out
}

/// A small deterministic generator (xorshift*), so tests need no `rand`.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Number of proptest cases: `THUND_PROPTEST_CASES`, or `default`.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("THUND_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
