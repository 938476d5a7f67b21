//! Collection of results: folds contributions into the worker's table of open windows,
//! either from the arrangement's output batches or, for a dataflow without a trace,
//! straight from the exchanged input.

use std::cell::RefCell;
use std::rc::Rc;

use differential_dataflow::operators::arrange::Arranged;
use differential_dataflow::trace::{Cursor, Navigable};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::ProbeHandle;

use crate::state::diff::Acc;
use crate::state::open::OpenWindows;
use crate::time::Time;
use crate::typedefs::{owner_hash, WindowCollection, WindowKey, WindowTrace};

/// Folds every update of every batch the arrangement emits into `open`, and returns a probe
/// whose frontier passes a time only once everything before it has been folded.
pub(crate) fn collect_changes(
    arranged: Arranged<'_, WindowTrace>,
    open: Rc<RefCell<OpenWindows>>,
) -> ProbeHandle<Time> {
    let (probe, _stream) = arranged
        .stream
        .inspect_core(move |event| {
            let Ok((_stamp, spans)) = event else { return };
            let mut open = open.borrow_mut();
            for span in spans {
                let Some(batch) = span.inner.as_ref() else {
                    continue;
                };
                let mut cursor = batch.cursor();
                while let Some(key) = cursor.get_key(batch) {
                    while cursor.get_val(batch).is_some() {
                        cursor.map_times(batch, |time, diff| open.apply(key, *time, diff));
                        cursor.step_val(batch);
                    }
                    cursor.step_key(batch);
                }
            }
        })
        .probe();
    probe
}

/// Routes every contribution to its owner (by [`owner_hash`]) and folds it into `open` as
/// it arrives, without arranging it; returns a probe whose frontier passes a time only
/// once everything before it has been folded.
///
/// For a dataflow that keeps no trace: the arrangement would only sort and consolidate the
/// contributions before the same fold. The fold is a commutative monoid's (see
/// `state/diff.rs`), so the order in which contributions arrive does not change a state;
/// the host never sends one for a unit that closed (the late rule refuses its rows).
pub(crate) fn fold_changes(
    contributions: WindowCollection<'_>,
    open: Rc<RefCell<OpenWindows>>,
    by_key: bool,
) -> ProbeHandle<Time> {
    let route = Exchange::new(move |u: &(WindowKey, Time, Acc)| owner_hash(&u.0, by_key));
    let (probe, _stream) = contributions
        .inner
        .unary::<CapacityContainerBuilder<Vec<()>>, _, _, _>(route, "FoldOpen", move |_, _| {
            move |input, _output| {
                let mut open = open.borrow_mut();
                input.for_each(|_cap, data| {
                    for (key, time, diff) in data.drain(..) {
                        open.apply(&key, time, &diff);
                    }
                });
            }
        })
        .probe();
    probe
}
