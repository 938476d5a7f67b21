//! Collection of results: folds the arrangement's output batches into the worker's table of
//! open windows.

use std::cell::RefCell;
use std::rc::Rc;

use differential_dataflow::operators::arrange::Arranged;
use differential_dataflow::trace::{Cursor, Navigable};
use timely::dataflow::operators::{Inspect, Probe};
use timely::dataflow::ProbeHandle;

use crate::state::open::OpenWindows;
use crate::time::Time;
use crate::typedefs::WindowTrace;

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
