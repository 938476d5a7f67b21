//! Session windows on the dataflow: rows held by pane, chained into
//! sessions on the host.
//!
//! A row of key `k` at time `t` goes to the unit of its pane `p = ⌊t / gap⌋`:
//! the window `[p·gap, (p+3)·gap)` of the dataflow, keyed by `k`, whose
//! states carry, beside the view's aggregates, three more ([`EXTRAS`]): the
//! first and last event time of every row the pane took (WHERE or not: a
//! refused row still extends its session) and how many rows WHERE let
//! through. Two rows of one pane are less than a gap apart, so a pane lies
//! in one session; panes of a key chain into sessions on the host (the next
//! pane joins while its first time is before the session's last time plus
//! the gap). A session `[first, last + gap)` closes when `W` reaches its end.
//!
//! A unit leaves the dataflow three gaps after its pane starts: by then its
//! session has closed, or it is a long session still taking rows. Then, in
//! the trigger whose watermark evicts the unit, the host carries the pane's
//! states into the unit of its session's last pane (one more update, at the
//! same time as the trigger's rows), so every open session's rows stay in
//! the dataflow's trace: checkpointed, restored at any worker count. The
//! carried pane has the session's first time, so chaining still finds the
//! session whole. A closed session's last pane stays until `W` is two gaps
//! past its last time, so the late rule (a row that would merge into a
//! closed session is late) is rebuilt from the trace after a restore.
//!
//! The host keeps each open unit's current states (the dataflow reports
//! every change) and the sessions they chain into, by key.

use std::collections::{BTreeMap, BTreeSet};

use arrow::array::{Int64Array, RecordBatch};
use rustc_hash::{FxHashMap, FxHashSet};
use thund_dataflows::{AggKind, AggState, Update, Value};

use super::keys::KeyBytes;
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::paths::StepOutput;
use crate::spec::OutputMode;
use crate::time::EventTime;
use crate::window::late::{Refusal, Refusals};
use crate::window::Window;

/// The states a session unit holds after the view's aggregates: its rows'
/// first time, last time, and how many rows WHERE let through.
pub(super) const EXTRAS: [AggKind; 3] = [AggKind::MinInt, AggKind::MaxInt, AggKind::Count];

/// The extras of a slot's rows: first and last time, rows, rows through WHERE.
pub(super) fn extra_states(first: i64, last: i64, rows: i64, through: i64) -> [AggState; 3] {
    [
        AggState {
            count: rows,
            value: Value::Int(i128::from(first)),
        },
        AggState {
            count: rows,
            value: Value::Int(i128::from(last)),
        },
        match through {
            0 => AggState::EMPTY,
            n => AggState {
                count: n,
                value: Value::Int(i128::from(n)),
            },
        },
    ]
}

/// One session of a key: `[start, last + gap)`, over the units from
/// `first` to `last_unit` (in unit order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sess {
    start: EventTime,
    last: EventTime,
    first: Window,
    last_unit: Window,
}

/// The open units of every key and the sessions they form.
pub(super) struct SessionStore {
    gap: i64,
    /// Every state's kind: the view's aggregates, then [`EXTRAS`].
    kinds: Vec<AggKind>,
    /// Per key id: its units' current states, in unit order.
    units: FxHashMap<u64, BTreeMap<Window, Vec<AggState>>>,
    /// Per key id: its sessions, as its units chain.
    sessions: FxHashMap<u64, Vec<Sess>>,
    /// The sessions not yet closed, by end.
    open: BTreeSet<(EventTime, u64)>,
    /// The open units by end (what a watermark evicts).
    expiring: BTreeSet<(EventTime, u64, Window)>,
    /// The watermark of the last step: a session ending at or before it has closed.
    w: Option<EventTime>,
    /// Per key (its bytes), the end of its latest closed session, while a row
    /// could still merge into it.
    closed_end: FxHashMap<Box<[u8]>, EventTime>,
}

impl SessionStore {
    pub fn new(gap: i64, kinds: Vec<AggKind>) -> Self {
        SessionStore {
            gap,
            kinds,
            units: FxHashMap::default(),
            sessions: FxHashMap::default(),
            open: BTreeSet::new(),
            expiring: BTreeSet::new(),
            w: None,
            closed_end: FxHashMap::default(),
        }
    }

    /// The units held (what `state_size` counts).
    pub fn len(&self) -> usize {
        self.expiring.len()
    }

    /// A unit's first and last time (its extras).
    fn extent(&self, states: &[AggState]) -> Option<(EventTime, EventTime)> {
        let m = self.kinds.len();
        let time = |s: &AggState| match s.value {
            Value::Int(t) => i64::try_from(t).ok(),
            _ => None,
        };
        Some((time(&states[m - 3])?, time(&states[m - 2])?))
    }

    /// How a key's units chain into sessions.
    fn chain<'a>(&self, units: impl Iterator<Item = (&'a Window, &'a [AggState])>) -> Vec<Sess> {
        let mut out: Vec<Sess> = Vec::new();
        for (u, st) in units {
            let Some((lo, hi)) = self.extent(st) else {
                continue;
            };
            match out.last_mut() {
                Some(s) if lo < s.last.saturating_add(self.gap) => {
                    s.start = s.start.min(lo);
                    s.last = s.last.max(hi);
                    s.last_unit = *u;
                }
                _ => out.push(Sess {
                    start: lo,
                    last: hi,
                    first: *u,
                    last_unit: *u,
                }),
            }
        }
        out
    }

    fn end(&self, s: &Sess) -> EventTime {
        s.last.saturating_add(self.gap)
    }

    /// Re-chain key `k`'s sessions, and index the open ones by end.
    fn rechain(&mut self, k: u64) {
        for s in self.sessions.remove(&k).unwrap_or_default() {
            self.open.remove(&(self.end(&s), k));
        }
        let Some(units) = self.units.get(&k) else {
            return;
        };
        let sessions = self.chain(units.iter().map(|(u, s)| (u, s.as_slice())));
        for s in &sessions {
            let end = self.end(s);
            if self.w.is_none_or(|w| end > w) {
                self.open.insert((end, k));
            }
        }
        self.sessions.insert(k, sessions);
    }

    /// A session's states: its units' states folded.
    fn merged(&self, k: u64, s: &Sess) -> Result<Vec<AggState>, thund_dataflows::Error> {
        let mut acc = vec![AggState::EMPTY; self.kinds.len()];
        if let Some(units) = self.units.get(&k) {
            for (_, st) in units.range(s.first..=s.last_unit) {
                self.fold(&mut acc, st, s)?;
            }
        }
        Ok(acc)
    }

    /// Folds `states` into `acc`: an overflow names the aggregate and the
    /// session `s` it is in.
    fn fold(
        &self,
        acc: &mut [AggState],
        states: &[AggState],
        s: &Sess,
    ) -> Result<(), thund_dataflows::Error> {
        for (i, ((a, kind), x)) in acc.iter_mut().zip(&self.kinds).zip(states).enumerate() {
            a.combine(*kind, x)
                .map_err(|e| e.placed(Window::new(s.start, self.end(s)), Some(i)))?;
        }
        Ok(())
    }

    fn update(&self, k: u64, s: &Sess) -> Result<Update, thund_dataflows::Error> {
        Ok(Update {
            window: Window::new(s.start, self.end(s)),
            key: k,
            aggs: self.merged(k, s)?,
        })
    }

    /// The carries of a trigger whose rows fold into `slots` (their states
    /// side by side in `states`) and whose watermark `w` evicts units: each
    /// evicted unit of a session still open after `w` goes to the unit of
    /// that session's last pane (see the module's doc).
    pub fn carries(
        &self,
        slots: &[(Window, u64)],
        states: &[AggState],
        w: EventTime,
    ) -> Result<Vec<(Window, u64, Vec<AggState>)>, thund_dataflows::Error> {
        let m = self.kinds.len();
        let mut keys: FxHashSet<u64> = self
            .expiring
            .range(..=(w, u64::MAX, Window::new(EventTime::MAX, EventTime::MAX)))
            .map(|(_, k, _)| *k)
            .collect();
        keys.extend(slots.iter().filter(|(u, _)| u.end <= w).map(|(_, k)| *k));
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        // each such key's units after this trigger's rows
        let mut after: FxHashMap<u64, BTreeMap<Window, Vec<AggState>>> = keys
            .iter()
            .map(|k| (*k, self.units.get(k).cloned().unwrap_or_default()))
            .collect();
        for (i, (u, k)) in slots.iter().enumerate() {
            if let Some(units) = after.get_mut(k) {
                let st = units.entry(*u).or_insert_with(|| vec![AggState::EMPTY; m]);
                for ((a, kind), x) in st.iter_mut().zip(&self.kinds).zip(&states[i * m..]) {
                    a.combine(*kind, x)?;
                }
            }
        }
        let mut out = Vec::new();
        for (k, units) in &after {
            for s in self.chain(units.iter().map(|(u, s)| (u, s.as_slice()))) {
                if self.end(&s) <= w {
                    continue; // closes now, with every unit it has
                }
                let mut carried: Option<Vec<AggState>> = None;
                for (u, st) in units.range(s.first..=s.last_unit) {
                    if u.end > w {
                        continue;
                    }
                    let acc = carried.get_or_insert_with(|| vec![AggState::EMPTY; m]);
                    self.fold(acc, st, &s)?;
                }
                if let Some(c) = carried {
                    out.push((s.last_unit, *k, c));
                }
            }
        }
        Ok(out)
    }

    /// One step, after the dataflow advanced to `w`: `changed` units take
    /// their new states; sessions ending by `w` close (returned by end);
    /// `evicted` units leave. Closed sessions' ends are kept for the late rule.
    fn step(
        &mut self,
        changed: &[Update],
        evicted: &[Update],
        w: EventTime,
        keys: &impl KeyBytes,
    ) -> Result<Vec<Update>, thund_dataflows::Error> {
        // a unit closing in this step is reported closed, not changed: its
        // final states count for the sessions closing now too
        let mut touched: FxHashSet<u64> = FxHashSet::default();
        for u in changed.iter().chain(evicted) {
            let units = self.units.entry(u.key).or_default();
            if units.insert(u.window, u.aggs.clone()).is_none() {
                self.expiring.insert((u.window.end, u.key, u.window));
            }
            touched.insert(u.key);
        }
        for k in &touched {
            self.rechain(*k);
        }
        let mut closing = Vec::new();
        while let Some(&(end, k)) = self.open.first() {
            if end > w {
                break;
            }
            self.open.pop_first();
            let Some(s) = self
                .sessions
                .get(&k)
                .and_then(|ss| ss.iter().find(|s| self.end(s) == end))
                .copied()
            else {
                continue;
            };
            closing.push(self.update(k, &s)?);
            let e = self.closed_end.entry(keys.bytes(k).into()).or_insert(end);
            *e = (*e).max(end);
        }
        self.w = Some(w);
        let mut left: FxHashSet<u64> = FxHashSet::default();
        for u in evicted {
            if let Some(units) = self.units.get_mut(&u.key) {
                if units.remove(&u.window).is_some() {
                    self.expiring.remove(&(u.window.end, u.key, u.window));
                }
                if units.is_empty() {
                    self.units.remove(&u.key);
                }
            }
            left.insert(u.key);
        }
        for k in left {
            self.rechain(k);
        }
        let gap = self.gap;
        self.closed_end.retain(|_, e| e.saturating_add(gap) > w);
        closing.sort_by_key(|u| (u.window.end, u.window.start));
        Ok(closing)
    }

    /// The open sessions holding key `k`'s times `ts` (each once).
    fn open_at(&self, k: u64, ts: &[EventTime]) -> Vec<Sess> {
        let mut out: Vec<Sess> = Vec::new();
        for s in self.sessions.get(&k).into_iter().flatten() {
            let end = self.end(s);
            if self.w.is_some_and(|w| end <= w) {
                continue;
            }
            if ts.iter().any(|&t| s.start <= t && t < end) && !out.contains(s) {
                out.push(*s);
            }
        }
        out
    }

    /// Every open session.
    fn all_open(&self) -> Result<Vec<Update>, thund_dataflows::Error> {
        let mut out = Vec::new();
        for &(end, k) in &self.open {
            if let Some(s) = self
                .sessions
                .get(&k)
                .and_then(|ss| ss.iter().find(|s| self.end(s) == end))
            {
                out.push(self.update(k, s)?);
            }
        }
        Ok(out)
    }

    /// The state after a restore at `w`: `units` are every open unit.
    pub fn restored(
        gap: i64,
        kinds: Vec<AggKind>,
        units: &[Update],
        w: Option<EventTime>,
        keys: &impl KeyBytes,
    ) -> Self {
        let mut store = SessionStore::new(gap, kinds);
        for u in units {
            store
                .units
                .entry(u.key)
                .or_default()
                .insert(u.window, u.aggs.clone());
            store.expiring.insert((u.window.end, u.key, u.window));
        }
        store.w = w;
        let ks: Vec<u64> = store.units.keys().copied().collect();
        for k in ks {
            store.rechain(k);
            if let Some(w) = w {
                for s in &store.sessions[&k] {
                    let end = store.end(s);
                    if end <= w && end.saturating_add(gap) > w {
                        let e = store.closed_end.entry(keys.bytes(k).into()).or_insert(end);
                        *e = (*e).max(end);
                    }
                }
            }
        }
        store
    }

    /// The session late rule, row by row (the recompute path's rule): a NULL
    /// time, a span past `i64::MAX`, a span that ended at `w_prev`, or a row
    /// that would merge into a closed session of its key is refused.
    pub fn classify(
        &self,
        times: &Int64Array,
        w_prev: Option<EventTime>,
        key_of: impl Fn(usize) -> Option<Vec<u8>>,
    ) -> Refusals {
        let mut out = Refusals::new();
        for (i, t) in times.iter().enumerate() {
            let Some(t) = t else {
                out.push((i, Refusal::NullTime));
                continue;
            };
            let Some(end) = t.checked_add(self.gap) else {
                out.push((i, Refusal::Unrepresentable));
                continue;
            };
            let behind = w_prev.is_some_and(|wp| end <= wp);
            let merges_closed = !behind
                && !self.closed_end.is_empty()
                && key_of(i)
                    .and_then(|k| self.closed_end.get(k.as_slice()).copied())
                    .is_some_and(|e| t < e);
            if behind || merges_closed {
                out.push((i, Refusal::Late(Some(Window { start: t, end }))));
            }
        }
        out
    }

    /// Whether the late rule needs rows' keys (a closed session is remembered).
    pub fn needs_keys(&self) -> bool {
        !self.closed_end.is_empty()
    }
}

impl IncrementalView {
    /// The session late rule over a batch (keys encoded only when a closed
    /// session could make a row late).
    pub(super) fn classify_sessions(
        &self,
        store: &SessionStore,
        batch: &RecordBatch,
        times: &Int64Array,
        w_prev: Option<EventTime>,
    ) -> Result<Refusals> {
        let rows = match (&self.converter, store.needs_keys()) {
            (Some(conv), true) => {
                let cols = self.key_columns(batch, None)?;
                Some(conv.convert_columns(&cols)?)
            }
            _ => None,
        };
        Ok(store.classify(times, w_prev, |i| match &rows {
            Some(r) => Some(r.row(i).data().to_vec()),
            None => Some(Vec::new()),
        }))
    }

    /// A session view's step, after the dataflow advanced to `w`: closing
    /// sessions are emitted (Append, Update with `final`, kept for Complete);
    /// in Update mode every open session that took rows this trigger shows
    /// its row, in Complete mode every open session does.
    pub(super) fn step_sessions(
        &mut self,
        step: &thund_dataflows::Step,
        touched: &[(u64, EventTime)],
        w: EventTime,
        out: &mut StepOutput,
    ) -> Result<()> {
        let view = self.view.clone();
        let Some(mut store) = self.sessions.take() else {
            return Err(Error::internal(
                &view,
                "a session view without its sessions",
            ));
        };
        let result = (|| {
            let closing = store
                .step(&step.changed, &step.closed, w, &self.keys)
                .map_err(|e| super::dataflow_error(&view, &self.plan.aggs, None, e))?;
            out.windows_closed = closing.len() as u64;
            let closing = self.existing(closing);
            let refs: Vec<&Update> = closing.iter().collect();
            match self.mode {
                OutputMode::Append => out.batches.push(self.render(&refs, None)?),
                OutputMode::Update => {
                    let mut by_key: BTreeMap<u64, Vec<EventTime>> = BTreeMap::new();
                    for (k, t) in touched {
                        by_key.entry(*k).or_default().push(*t);
                    }
                    let mut open = Vec::new();
                    for (k, ts) in &by_key {
                        for s in store.open_at(*k, ts) {
                            open.push(store.update(*k, &s).map_err(|e| {
                                super::dataflow_error(&view, &self.plan.aggs, None, e)
                            })?);
                        }
                    }
                    let open = self.existing(open);
                    let open_refs: Vec<&Update> = open.iter().collect();
                    out.batches.push(self.render(&open_refs, Some(false))?);
                    out.batches.push(self.render(&refs, Some(true))?);
                }
                OutputMode::Complete => {
                    let done = self.render(&refs, None)?;
                    self.closed_results.push(done);
                    out.batches.extend(self.closed_results.all());
                    let open = store
                        .all_open()
                        .map_err(|e| super::dataflow_error(&view, &self.plan.aggs, None, e))?;
                    let open = self.existing(open);
                    let open_refs: Vec<&Update> = open.iter().collect();
                    out.batches.push(self.render(&open_refs, None)?);
                }
            }
            Ok(())
        })();
        self.sessions = Some(store);
        result
    }

    /// The sessions that have a row: with group keys, those where WHERE let
    /// a row through (a global aggregate has its row over no rows too).
    fn existing(&self, sessions: Vec<Update>) -> Vec<Update> {
        if self.plan.group_keys == 0 {
            return sessions;
        }
        sessions
            .into_iter()
            .filter(|u| u.aggs.last().is_some_and(|s| s.count > 0))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(p: i64, gap: i64) -> Window {
        Window::new(p * gap, (p + 3) * gap)
    }

    fn states(first: i64, last: i64) -> Vec<AggState> {
        let mut v = vec![AggState {
            count: 1,
            value: Value::Int(1),
        }];
        v.extend(extra_states(first, last, 1, 1));
        v
    }

    fn kinds() -> Vec<AggKind> {
        let mut k = vec![AggKind::Count];
        k.extend(EXTRAS);
        k
    }

    /// Units chain while the next one starts before the last time plus the
    /// gap, and a carried unit (with an earlier first time) joins its session.
    #[test]
    fn units_chain_into_sessions() {
        let store = SessionStore::new(10, kinds());
        let units: BTreeMap<Window, Vec<AggState>> = [
            (unit(0, 10), states(1, 5)),
            (unit(1, 10), states(14, 19)),
            (unit(3, 10), states(30, 31)),
            (unit(5, 10), states(30, 55)),
        ]
        .into_iter()
        .collect();
        let s = store.chain(units.iter().map(|(u, s)| (u, s.as_slice())));
        let spans: Vec<(i64, i64)> = s.iter().map(|s| (s.start, s.last)).collect();
        // 14 < 5 + 10 joins; 30 >= 19 + 10 starts anew; the unit that carries
        // its session's evicted start (first time 30, its pane 50) joins it
        assert_eq!(spans, vec![(1, 19), (30, 55)]);
    }
}
