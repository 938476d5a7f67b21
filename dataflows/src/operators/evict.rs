//! Eviction: every contribution is retracted at its window's end, so a closed window leaves
//! the collection (and, once compaction passes its end, the arrangement).

use differential_dataflow::AsCollection;
use timely::dataflow::operators::vec::Map;

use crate::time::start_of;
use crate::typedefs::WindowCollection;
use crate::window::{expiry, Panes};

/// Passes every update `((window, key), t, acc)` through and adds its retraction
/// `((window, key), expiry, -acc)`: at the window's end, or with `panes` at the end of the
/// last window holding the pane.
///
/// The input's times are all before `window.end` (the host rejects late updates), so the
/// accumulation at any time before the end is unchanged and at the end is exactly zero
/// (see [`crate::state::diff`]).
pub(crate) fn evict_at_expiry(
    collection: WindowCollection<'_>,
    panes: Option<Panes>,
) -> WindowCollection<'_> {
    collection
        .inner
        .flat_map(move |(data, time, diff)| {
            let end = start_of(expiry(panes, data.0));
            debug_assert!(time < end, "update at {time} for window {}", data.0);
            let retraction = diff.retraction();
            [(data, time, diff), (data, end, retraction)]
        })
        .as_collection()
}
