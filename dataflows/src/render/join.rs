//! Rendering of the windowed-join family: two inputs of `((window, join key), row)`, each
//! arranged by `(window, join key)`, joined; the join's output changes are collected per
//! window for the host.
//!
//! The window is part of the join key, so only rows of the same window meet. Rows enter at
//! the current input time; when a window closes, the worker retracts its rows from both
//! arrangements at the current time (read back from the traces), so the traces keep only
//! open windows once compaction passes that time. The join's output for those retractions
//! comes at or after the window's end and is dropped: a closed window's result is final.

use std::cell::RefCell;
use std::rc::Rc;

use differential_dataflow::input::{Input, InputSession};
use differential_dataflow::operators::arrange::TraceAgent;
use differential_dataflow::trace::cursor::cursor_list;
use differential_dataflow::trace::implementations::spine_fueled::SpineBatch;
use differential_dataflow::trace::implementations::ValSpine;
use differential_dataflow::trace::{Cursor, TraceReader};
use timely::dataflow::ProbeHandle;
use timely::progress::frontier::AntichainRef;
use timely::worker::Worker;

use crate::time::{start_of, Time};
use crate::window::{EventTime, Key, Window};

/// Names of the two arrangements.
pub(crate) const ARRANGEMENTS: [&str; 2] = ["WindowedJoinLeft", "WindowedJoinRight"];

/// The key of both arrangements: rows meet when their window and join key agree.
pub(crate) type JoinKey = (Window, Key);

/// One side's record: `(window, join key)` and the row's id.
pub(crate) type JoinRecord = (JoinKey, Key);

/// The spine of one side.
type JoinSpine = ValSpine<JoinKey, Key, Time, i64>;

/// A shared handle to one side's trace.
pub(crate) type JoinTrace = TraceAgent<JoinSpine>;

/// The batch type of a [`JoinTrace`].
type JoinBatch = <JoinTrace as TraceReader>::Batch;

/// A change of the join's output in an open window: `count` more (or fewer) pairs of the
/// left row `left` and the right row `right`.
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

/// One worker's handles on its instance of the join.
pub(crate) struct RenderedJoin {
    /// Timely's identifier of the dataflow (to drop it on abort).
    pub(crate) index: usize,
    /// Passes a time once the join's output before it is in `pairs`.
    pub(crate) probe: ProbeHandle<Time>,
    /// The join's output changes in open windows since they were last taken.
    pub(crate) pairs: Rc<RefCell<Vec<Pair>>>,
    /// Where each side's rows enter (`None` once closed: end of stream).
    pub(crate) inputs: Option<[InputSession<Time, JoinRecord, i64>; 2]>,
    /// Each side's trace (`None` once the stream ended).
    pub(crate) traces: Option<[JoinTrace; 2]>,
}

/// Builds `left, right -> arrange by (window, key) -> join -> collect` in `worker`.
pub(crate) fn render(worker: &mut Worker) -> RenderedJoin {
    let pairs = Rc::new(RefCell::new(Vec::new()));
    let index = worker.next_dataflow_index();
    let sink = Rc::clone(&pairs);
    let (inputs, traces, probe) =
        worker.dataflow_named::<Time, _, _>("thund-windowed-join", |scope| {
            let (left_in, left) = scope.new_collection::<JoinRecord, i64>();
            let (right_in, right) = scope.new_collection::<JoinRecord, i64>();
            let left = left.arrange_by_key_named(ARRANGEMENTS[0]);
            let right = right.arrange_by_key_named(ARRANGEMENTS[1]);
            let traces = [left.trace.clone(), right.trace.clone()];
            let (probe, _) = left
                .join_core(right, |k: &JoinKey, l: &Key, r: &Key| Some((k.0, *l, *r)))
                .inspect(move |((window, left, right), time, count)| {
                    // a closed window's eviction is not a change of its result
                    if *time < start_of(window.end) {
                        sink.borrow_mut().push(Pair {
                            window: *window,
                            left: *left,
                            right: *right,
                            count: *count,
                        });
                    }
                })
                .probe();
            ([left_in, right_in], traces, probe)
        });
    RenderedJoin {
        index,
        probe,
        pairs,
        inputs: Some(inputs),
        traces: Some(traces),
    }
}

/// Number of update records in a trace's batches.
pub(crate) fn trace_size(trace: &JoinTrace) -> usize {
    let mut n = 0;
    trace.map_spans(|span| {
        if let Some(b) = &span.inner {
            n += b.len();
        }
    });
    n
}

/// Lets a trace forget distinctions between times before `time` and merge up to it.
pub(crate) fn compact(trace: &mut JoinTrace, time: Time) {
    let f = [time];
    let f = AntichainRef::new(&f);
    trace.set_logical_compaction(f);
    trace.set_physical_compaction(f);
}

/// The rows a trace holds in `windows` (sorted), with their multiplicities (non-zero).
pub(crate) fn rows_in(trace: &JoinTrace, windows: &[Window]) -> Vec<(JoinRecord, i64)> {
    let (mut cursor, storage) = cursor_list(batches(trace));
    let mut out = Vec::new();
    for w in windows {
        cursor.seek_key(&storage, &(*w, 0));
        while let Some(key) = cursor.get_key(&storage) {
            if key.0 != *w {
                break;
            }
            push_rows(&mut cursor, &storage, *key, &mut out);
            cursor.step_key(&storage);
        }
    }
    out
}

/// Every row a trace holds in windows ending after `frontier`, with its multiplicity.
pub(crate) fn open_rows(trace: &JoinTrace, frontier: EventTime) -> Vec<(JoinRecord, i64)> {
    let (mut cursor, storage) = cursor_list(batches(trace));
    let mut out = Vec::new();
    while let Some(key) = cursor.get_key(&storage) {
        if key.0.end > frontier {
            push_rows(&mut cursor, &storage, *key, &mut out);
        }
        cursor.step_key(&storage);
    }
    out
}

/// The rows of the cursor's current key `key`, with their accumulated multiplicities
/// (non-zero), onto `out`.
fn push_rows<C>(
    cursor: &mut C,
    storage: &C::Storage,
    key: JoinKey,
    out: &mut Vec<(JoinRecord, i64)>,
) where
    C: for<'a> Cursor<Val<'a> = &'a Key, DiffGat<'a> = &'a i64>,
{
    while let Some(row) = cursor.get_val(storage) {
        let mut n = 0i64;
        cursor.map_times(storage, |_, d| n += *d);
        if n != 0 {
            out.push(((key, *row), n));
        }
        cursor.step_val(storage);
    }
}

/// The batches a trace holds now (shared, immutable).
fn batches(trace: &JoinTrace) -> Vec<JoinBatch> {
    let mut out = Vec::new();
    trace.map_spans(|span| {
        if let Some(b) = &span.inner {
            out.push(b.clone());
        }
    });
    out
}
