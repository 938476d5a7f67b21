//! Eviction: every contribution is retracted at its window's end, so a closed window leaves
//! the collection (and, once compaction passes its end, the arrangement).

use differential_dataflow::AsCollection;
use timely::dataflow::operators::vec::Map;

use crate::time::start_of;
use crate::typedefs::WindowCollection;

/// Passes every update `((window, key), t, acc)` through and adds its retraction
/// `((window, key), window.end, -acc)`.
///
/// The input's times are all before `window.end` (the host rejects late updates), so the
/// accumulation at any time before the end is unchanged and at the end is exactly zero
/// (see [`crate::state::diff`]).
pub(crate) fn evict_at_window_end(collection: WindowCollection<'_>) -> WindowCollection<'_> {
    collection
        .inner
        .flat_map(|(data, time, diff)| {
            let end = start_of(data.0.end);
            debug_assert!(time < end, "update at {time} for window {}", data.0);
            let retraction = diff.retraction();
            [(data, time, diff), (data, end, retraction)]
        })
        .as_collection()
}
