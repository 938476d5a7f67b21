//! Rendering of the windowed-aggregate family: builds its dataflow in one worker.

use std::cell::RefCell;
use std::rc::Rc;

use differential_dataflow::AsCollection;
use timely::dataflow::operators::vec::Input;
use timely::dataflow::ProbeHandle;
use timely::worker::Worker;

use crate::operators::{collect_changes, fold_changes};
use crate::state::agg::AggKind;
use crate::state::diff::Acc;
use crate::state::open::OpenWindows;
use crate::time::Time;
use crate::typedefs::{arrange, NamedTrace, WindowInput, WindowKey};
use crate::window::Panes;

/// Name of the windowed-aggregate arrangement.
pub(crate) const ARRANGEMENT: &str = "WindowedAggregate";

/// One worker's handles on its instance of the dataflow (besides its input and its trace,
/// which [`render`] returns beside it: the worker releases them at the end of the stream).
pub(crate) struct Rendered {
    /// Timely's identifier of the dataflow (to drop it on abort).
    pub(crate) index: usize,
    /// Passes a time once the arrangement's output before it is folded into `open`.
    pub(crate) probe: ProbeHandle<Time>,
    /// Current states of this worker's open windows.
    pub(crate) open: Rc<RefCell<OpenWindows>>,
}

/// Builds `input -> arrange by (window, key) -> collect` in `worker` (with `trace`), or
/// `input -> exchange -> fold` (without: nothing would read the trace);
/// returns the handles, the input (where contributions enter, at the current time) and,
/// with `trace`, the arrangement's trace of `(window, key) -> Acc`.
///
/// Contributions enter at the current input time with the window in the key, so every open
/// window's state is in the trace (readable for snapshots) once the input moves past it. When
/// a window closes, the worker retracts its contributions at the current time (see
/// `state/diff.rs`), so the trace keeps only open windows once compaction passes that time.
pub(crate) fn render(
    worker: &mut Worker,
    kinds: Vec<AggKind>,
    panes: Option<Panes>,
    trace: bool,
) -> (Rendered, WindowInput, Option<NamedTrace>) {
    let open = Rc::new(RefCell::new(OpenWindows::new(kinds, panes)));
    let index = worker.next_dataflow_index();
    let sink = Rc::clone(&open);
    let (input, trace, probe) =
        worker.dataflow_named::<Time, _, _>("thund-windowed-aggregate", |scope| {
            let (input, stream) = scope.new_input::<(WindowKey, Time, Acc)>();
            let contributions = stream.as_collection();
            if !trace {
                let probe = fold_changes(contributions, sink, panes.is_some());
                return (input, None, probe);
            }
            let (arranged, trace) = arrange(ARRANGEMENT, contributions, panes.is_some());
            let probe = collect_changes(arranged, sink);
            (input, Some(trace), probe)
        });
    (Rendered { index, probe, open }, input, trace)
}
