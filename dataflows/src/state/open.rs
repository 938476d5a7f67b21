//! The worker's table of open windows: the current state of every `(window, key)` whose
//! window has not closed, fed by the arrangement's output and drained as windows close.

use std::collections::hash_map::Entry;
use std::collections::BTreeMap;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::error::Error;
use crate::state::agg::{AggKind, AggState, Update};
use crate::state::diff::Acc;
use crate::time::{start_of, Time};
use crate::typedefs::WindowKey;
use crate::window::{expiry, EventTime, Key, Panes, Window};

/// One `(unit, key)`'s current states, and how many contributions they fold (what its
/// eviction retracts).
#[derive(Debug)]
struct Group {
    n: i64,
    states: Vec<AggState>,
    /// Listed in [`OpenWindows::changed`] since the last step.
    listed: bool,
}

/// Current states of a worker's open `(window, key)`s, ordered by window end.
#[derive(Debug)]
pub(crate) struct OpenWindows {
    kinds: Vec<AggKind>,
    /// `(end, start) -> key -> states`.
    by_end: BTreeMap<(EventTime, EventTime), HashMap<Key, Group>>,
    /// `(window, key)`s whose state changed since the last [`OpenWindows::take_step`], each
    /// once (its group is marked [`Group::listed`]).
    changed: Vec<WindowKey>,
    /// With panes: the geometry, the states of the open panes (by expiry, start), and the
    /// `(pane, key)`s that changed since the last step.
    panes: Option<Panes>,
    panes_by_expiry: BTreeMap<(EventTime, EventTime), HashMap<Key, Group>>,
    changed_panes: HashSet<WindowKey>,
    /// The units (windows, or panes) closed by the last steps, with their contribution
    /// counts: the worker retracts them from the arrangement (see [`Self::take_evictions`]).
    evictions: Vec<(WindowKey, i64)>,
    /// Whether `changed` and `changed_panes` are tracked (see [`Self::track_changes`]).
    /// With panes and no tracking, windows are not kept: each is assembled from its
    /// panes when it closes (see [`Self::take_step`]).
    track: bool,
    /// Windows ending at or before this have closed (and were reported).
    closed_through: EventTime,
    /// Whether changed panes are reported (see [`Self::report_panes`]).
    panes_reported: bool,
    /// Whether closed units are listed for retraction (see [`Self::list_evictions`]).
    evicting: bool,
    /// The first error met while folding, if any.
    error: Option<Error>,
    /// How many groups a window opened now is made room for: as many as the
    /// last window that closed held (at most [`MAX_HINT`]), so a window's
    /// groups are not rehashed as it fills.
    hint: usize,
    /// State vectors the host handed back (see [`Self::give_spare`]), filled again by the
    /// next steps' changed states instead of allocating new ones.
    spare: Vec<Vec<AggState>>,
}

/// The most groups a new window's table is made room for before it fills.
const MAX_HINT: usize = 1 << 16;

/// The most spare state vectors a worker keeps (see [`OpenWindows::give_spare`]).
pub(crate) const MAX_SPARE: usize = 1 << 14;

/// What a step produced on one worker.
#[derive(Debug, Default)]
pub(crate) struct StepOutput {
    /// Final states of the windows that closed.
    pub(crate) closed: Vec<Update>,
    /// Current states of open `(window, key)`s that changed.
    pub(crate) changed: Vec<Update>,
    /// With panes: current states of the open `(pane, key)`s that changed.
    pub(crate) changed_panes: Vec<Update>,
}

impl OpenWindows {
    /// An empty table for the aggregates `kinds`.
    pub(crate) fn new(kinds: Vec<AggKind>, panes: Option<Panes>) -> Self {
        OpenWindows {
            kinds,
            by_end: BTreeMap::new(),
            changed: Vec::new(),
            panes,
            panes_by_expiry: BTreeMap::new(),
            changed_panes: HashSet::default(),
            evictions: Vec::new(),
            track: true,
            panes_reported: true,
            closed_through: EventTime::MIN,
            evicting: true,
            error: None,
            hint: 0,
            spare: Vec::new(),
        }
    }

    /// Takes state vectors the host is done with, for the next steps to fill: a vector
    /// allocated here and freed by the host's thread costs both allocators their slow
    /// path (glibc's `free` of another thread's chunk takes that arena's lock).
    pub(crate) fn give_spare(&mut self, spare: Vec<Vec<AggState>>) {
        let room = MAX_SPARE.saturating_sub(self.spare.len());
        if self.spare.is_empty() && spare.len() <= room {
            self.spare = spare;
        } else {
            self.spare.extend(spare.into_iter().take(room));
        }
    }

    /// A copy of `states` in a spare vector, or a new one.
    fn copy_of(spare: &mut Vec<Vec<AggState>>, states: &[AggState]) -> Vec<AggState> {
        match spare.pop() {
            Some(mut v) => {
                v.clear();
                v.extend_from_slice(states);
                v
            }
            None => states.to_vec(),
        }
    }

    /// Folds one output update of the arrangement.
    ///
    /// Updates at or after the window's end are its eviction and are ignored: a window's
    /// final state is its accumulation strictly before its end.
    pub(crate) fn apply(&mut self, data: &WindowKey, time: Time, diff: &Acc) {
        let (unit, key) = *data;
        if time >= start_of(expiry(self.panes, unit)) || self.error.is_some() {
            return;
        }
        if diff.overflow || diff.n < 0 || diff.len() != self.kinds.len() {
            self.fail(unit, diff);
            return;
        }
        let Some(panes) = self.panes else {
            self.fold(unit, key, diff);
            return;
        };
        // the pane's own state (what a checkpoint saves and closing windows are assembled
        // from), then, when changes are tracked, every open window holding it
        let ends = (expiry(self.panes, unit), unit.start);
        let pane = self.panes_by_expiry.entry(ends).or_default();
        if fold_states(
            &self.kinds,
            pane,
            key,
            diff,
            unit,
            &mut self.error,
            false,
            &mut self.spare,
        ) && self.track
            && self.panes_reported
        {
            self.changed_panes.insert((unit, key));
        }
        if !self.track {
            return;
        }
        for w in panes.windows_of(unit) {
            if time < start_of(w.end) && self.error.is_none() {
                self.fold(w, key, diff);
            }
        }
    }

    /// Folds `diff` into the state of `(window, key)`.
    fn fold(&mut self, window: Window, key: Key, diff: &Acc) {
        let hint = self.hint;
        let groups = self
            .by_end
            .entry((window.end, window.start))
            .or_insert_with(|| HashMap::with_capacity_and_hasher(hint, Default::default()));
        let track = self.track;
        if fold_states(
            &self.kinds,
            groups,
            key,
            diff,
            window,
            &mut self.error,
            track,
            &mut self.spare,
        ) && track
        {
            self.changed.push((window, key));
        }
    }

    fn fail(&mut self, window: Window, diff: &Acc) {
        self.error
            .get_or_insert_with(|| malformed(&self.kinds, window, diff));
    }

    /// Whether the next steps track the open states that change (what
    /// [`Self::take_step`] reports as changed); off, only closed windows are reported.
    pub(crate) fn track_changes(&mut self, on: bool) {
        if on == self.track {
            return;
        }
        self.track = on;
        if let Some(p) = self.panes {
            // windows are kept only while tracked: drop them, or rebuild every open one
            // from its panes
            self.by_end.clear();
            self.changed.clear();
            if on {
                let mut windows: Vec<Window> = Vec::new();
                for &(_, start) in self.panes_by_expiry.keys() {
                    windows.extend(p.windows_of(p.pane_of(start)));
                }
                windows.sort_unstable();
                windows.dedup();
                let closed = self.closed_through;
                for w in windows.into_iter().filter(|w| w.end > closed) {
                    let groups = self.assemble(p, w);
                    self.by_end.insert((w.end, w.start), groups);
                }
            }
        }
    }

    /// The states of window `w` by key, folded from its held panes.
    fn assemble(&mut self, p: Panes, w: Window) -> HashMap<Key, Group> {
        let mut out: HashMap<Key, Group> = HashMap::default();
        // the held panes starting in `w`, in order: a pane's expiry grows with its
        // start, so they are one range of the table (looked up pane by pane, the
        // empty ones cost as much as the held ones: size / width per window)
        let first = (p.expiry(p.pane_of(w.start)), w.start);
        let last = (p.expiry(p.pane_of(w.end - 1)), w.end - 1);
        if first > last {
            return out;
        }
        for (&(_, start), groups) in self.panes_by_expiry.range(first..=last) {
            if !w.contains(start) {
                continue;
            }
            for (&key, g) in groups {
                merge_group(&self.kinds, &mut out, key, g, w, &mut self.error);
            }
        }
        out
    }

    /// Whether [`Self::take_step`] reports the panes that changed (on by default):
    /// what a checkpoint of the changes saves, so a worker without a trace (which no
    /// checkpoint reads) neither tracks nor sends them.
    pub(crate) fn report_panes(&mut self, on: bool) {
        self.panes_reported = on;
        if !on {
            self.changed_panes.clear();
        }
    }

    /// Whether closed units are listed for [`Self::take_evictions`] (on by default; a
    /// worker without a trace has nothing to retract them from).
    pub(crate) fn list_evictions(&mut self, on: bool) {
        self.evicting = on;
    }

    /// Takes the units closed since the last call with their contribution counts: each
    /// `(unit, n)` is to be retracted by `Acc::eviction(n)` at a time at or after the unit's
    /// end, which empties its entry in the arrangement.
    pub(crate) fn take_evictions(&mut self) -> Vec<(WindowKey, i64)> {
        std::mem::take(&mut self.evictions)
    }

    /// Takes the error met while folding, if any.
    pub(crate) fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    /// Closes every window with `end <= frontier` (all of them if `frontier` is
    /// `EventTime::MAX`) and returns the closed windows' final states and the changed
    /// still-open states since the last call.
    pub(crate) fn take_step(&mut self, frontier: EventTime) -> StepOutput {
        let mut closed_groups = if frontier == EventTime::MAX {
            std::mem::take(&mut self.by_end)
        } else {
            let open = self.by_end.split_off(&(frontier + 1, EventTime::MIN));
            std::mem::replace(&mut self.by_end, open)
        };
        // with panes, a closing window is assembled from its panes (before the panes
        // whose last window closes go): the states a tracked window folded, added in
        // another order. A tracked window's own states serve where the order of
        // additions cannot matter (no float sum, whose rounding depends on it)
        let own = self.track && !self.kinds.contains(&AggKind::SumFloat);
        if let Some(p) = self.panes.filter(|_| !own) {
            closed_groups = BTreeMap::new();
            // each held pane's closing windows as a range of their ends (all on one
            // grid), merged: each window closing listed once, and none that holds no
            // pane (a pane is in size / slide windows: listing them all per pane
            // made a step cost the panes times that)
            let mut ranges: Vec<(i128, i128)> = self
                .panes_by_expiry
                .keys()
                .filter_map(|&(_, start)| p.ends_between(start, self.closed_through, frontier))
                .collect();
            ranges.sort_unstable();
            let slide = i128::from(p.slide());
            let mut closing: Vec<Window> = Vec::new();
            let mut next = i128::MIN;
            for (lo, hi) in ranges {
                let mut end = lo.max(next);
                while end <= hi {
                    closing.push(p.window_ending(end));
                    end += slide;
                }
                next = next.max(end);
            }
            // (ends past the ends of `i64` saturate to one window)
            closing.dedup();
            for w in closing {
                let groups = self.assemble(p, w);
                closed_groups.insert((w.end, w.start), groups);
            }
        }
        self.closed_through = self.closed_through.max(frontier);
        let mut out = StepOutput::default();
        // panes whose last window closed are gone; report the others that changed
        let open_panes = if frontier == EventTime::MAX {
            BTreeMap::new()
        } else {
            self.panes_by_expiry
                .split_off(&(frontier + 1, EventTime::MIN))
        };
        let closed_panes = std::mem::replace(&mut self.panes_by_expiry, open_panes);
        // at the end of stream the input is closed: nothing is left to retract
        let evict = frontier != EventTime::MAX && self.evicting;
        if let (true, Some(p)) = (evict, self.panes) {
            for ((_, start), groups) in closed_panes {
                let pane = p.pane_of(start);
                for (key, g) in groups {
                    self.evictions.push(((pane, key), g.n));
                }
            }
        }
        for (pane, key) in self.changed_panes.drain() {
            let ends = (expiry(self.panes, pane), pane.start);
            if let Some(g) = self.panes_by_expiry.get(&ends).and_then(|g| g.get(&key)) {
                out.changed_panes.push(Update {
                    window: pane,
                    key,
                    aggs: Self::copy_of(&mut self.spare, &g.states),
                });
            }
        }
        out.closed
            .reserve(closed_groups.values().map(|g| g.len()).sum());
        for ((end, start), groups) in closed_groups {
            let window = Window { start, end };
            self.hint = groups.len().min(MAX_HINT);
            for (key, g) in groups {
                if evict && self.panes.is_none() {
                    self.evictions.push(((window, key), g.n));
                }
                out.closed.push(Update {
                    window,
                    key,
                    aggs: g.states,
                });
            }
        }
        out.changed.reserve(self.changed.len());
        for (window, key) in self.changed.drain(..) {
            if window.end <= frontier {
                continue;
            }
            if let Some(g) = self
                .by_end
                .get_mut(&(window.end, window.start))
                .and_then(|g| g.get_mut(&key))
            {
                g.listed = false;
                out.changed.push(Update {
                    window,
                    key,
                    aggs: Self::copy_of(&mut self.spare, &g.states),
                });
            }
        }
        out
    }

    /// Number of open `(window, key)`s; with panes and no tracking (no window is kept),
    /// of open `(pane, key)`s.
    pub(crate) fn len(&self) -> usize {
        if self.panes.is_some() && !self.track {
            return self.panes_len();
        }
        self.by_end.values().map(HashMap::len).sum()
    }

    fn panes_len(&self) -> usize {
        self.panes_by_expiry.values().map(HashMap::len).sum()
    }

    /// Number of states held: open `(window, key)`s and, with panes, open `(pane, key)`s.
    pub(crate) fn held(&self) -> usize {
        self.by_end.values().map(HashMap::len).sum::<usize>() + self.panes_len()
    }
}

/// The error for a contribution that overflowed or does not suit the aggregates.
fn malformed(kinds: &[AggKind], window: Window, diff: &Acc) -> Error {
    let kind = diff
        .first_kind()
        .or_else(|| kinds.first().copied())
        .unwrap_or(AggKind::SumInt);
    Error::Overflow {
        kind,
        window: Some(window),
        detail: if diff.overflow {
            "in the dataflow's accumulation".to_string()
        } else {
            format!("malformed accumulation (n = {})", diff.n)
        },
        aggregate: None,
    }
}

/// The final states of windows that open and close within one step, folded on the host
/// from their contributions as a worker folds them (see [`OpenWindows::apply`]): `runs`
/// gives each `(window, key)`'s contributions together, in `(window, key)` order, and
/// the result has one update per `(window, key)` in that order. New state vectors come
/// from `spare` while it lasts.
pub(crate) fn fold_closed<'a>(
    kinds: &[AggKind],
    runs: impl Iterator<Item = (Window, Key, &'a Acc)>,
    spare: &mut Vec<Vec<AggState>>,
) -> Result<Vec<Update>, Error> {
    let mut out: Vec<Update> = Vec::with_capacity(runs.size_hint().0);
    for (window, key, diff) in runs {
        if diff.overflow || diff.n < 0 || diff.len() != kinds.len() {
            return Err(malformed(kinds, window, diff));
        }
        match out.last_mut() {
            Some(u) if u.window == window && u.key == key => {
                combine_states(&mut u.aggs, diff, window)?;
            }
            _ => out.push(Update {
                window,
                key,
                aggs: new_states(spare, diff),
            }),
        }
    }
    Ok(out)
}

/// A new group's states: `diff`'s, in a `spare` vector if there is one.
#[inline]
fn new_states(spare: &mut Vec<Vec<AggState>>, diff: &Acc) -> Vec<AggState> {
    match spare.pop() {
        Some(mut states) => {
            diff.states_into(&mut states);
            states
        }
        None => diff.states(),
    }
}

/// Folds `diff` into a group's `states` (of `window`); whether they changed. An error
/// names the aggregate; the states are then unspecified.
#[inline]
fn combine_states(states: &mut [AggState], diff: &Acc, window: Window) -> Result<bool, Error> {
    let mut changed = false;
    // (an empty part changes nothing)
    diff.try_each(|i, kind, part| {
        let Some(state) = states.get_mut(i) else {
            return Ok(());
        };
        let new = state
            .combined(kind, &part)
            .map_err(|e| e.placed(window, Some(i)))?;
        changed |= new != *state;
        *state = new;
        Ok(())
    })?;
    Ok(changed)
}

/// Folds `diff` into `key`'s states in `groups`; whether they changed, or with `list`,
/// whether they changed and were not yet listed as changed (they then are: the caller
/// lists them). An error is kept in `error` (with `window` as its context); the states
/// are then unspecified. A new group's states go into a `spare` vector if there is one.
#[allow(clippy::too_many_arguments)]
fn fold_states(
    kinds: &[AggKind],
    groups: &mut HashMap<Key, Group>,
    key: Key,
    diff: &Acc,
    window: Window,
    error: &mut Option<Error>,
    list: bool,
    spare: &mut Vec<Vec<AggState>>,
) -> bool {
    match groups.entry(key) {
        Entry::Occupied(mut g) => {
            let Group { n, states, listed } = g.get_mut();
            *n = n.wrapping_add(diff.n);
            let changed = match combine_states(states, diff, window) {
                Ok(changed) => changed,
                Err(e) => {
                    // (the first error is the one reported: windows are met in order)
                    error.get_or_insert(e);
                    return false;
                }
            };
            debug_assert_eq!(kinds.len(), states.len());
            if !list {
                return changed;
            }
            let first = changed && !*listed;
            *listed |= changed;
            first
        }
        Entry::Vacant(v) => {
            v.insert(Group {
                n: diff.n,
                states: new_states(spare, diff),
                listed: list,
            });
            true
        }
    }
}

/// Folds the states `g` of `key` (one pane's) into `out` (a window's, `w`); an error
/// is kept in `error`.
fn merge_group(
    kinds: &[AggKind],
    out: &mut HashMap<Key, Group>,
    key: Key,
    g: &Group,
    w: Window,
    error: &mut Option<Error>,
) {
    match out.get_mut(&key) {
        None => {
            out.insert(
                key,
                Group {
                    n: g.n,
                    states: g.states.clone(),
                    listed: false,
                },
            );
        }
        Some(acc) => {
            acc.n = acc.n.wrapping_add(g.n);
            for (i, (state, part)) in acc.states.iter_mut().zip(&g.states).enumerate() {
                match state.combined(kinds[i], part) {
                    Ok(new) => *state = new,
                    Err(e) => {
                        // (the first window's error is the one reported)
                        error.get_or_insert_with(|| e.placed(w, Some(i)));
                        return;
                    }
                }
            }
        }
    }
}
