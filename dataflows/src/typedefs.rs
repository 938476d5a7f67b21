//! Spine and trace aliases, and the one place arrangements are made: named, sized, compacted.

use differential_dataflow::hashable::Hashable;
use differential_dataflow::operators::arrange::arrangement::arrange_core;
use differential_dataflow::operators::arrange::{Arranged, TraceAgent};
use differential_dataflow::trace::implementations::spine_fueled::SpineBatch;
use differential_dataflow::trace::implementations::KeyBatcher;
use differential_dataflow::trace::implementations::KeySpine;
use differential_dataflow::trace::TraceReader;
use differential_dataflow::VecCollection;
use timely::dataflow::channels::pact::Exchange;
use timely::progress::frontier::AntichainRef;

use crate::state::diff::Acc;
use crate::time::Time;
use crate::window::{Key, Window};

/// The hash that decides which worker owns a record (the host sends each update there):
/// of the key alone with panes (a key's panes must meet where its windows are folded),
/// else of `(window, key)`, which spreads a key's windows (and a global aggregate's) over
/// the workers.
pub(crate) fn owner_hash(data: &WindowKey, by_key: bool) -> u64 {
    if by_key {
        data.1.hashed()
    } else {
        data.hashed()
    }
}

/// The record of the windowed-aggregate arrangement: the window is part of the key.
pub(crate) type WindowKey = (Window, Key);

/// Where contributions enter a worker's dataflow, stamped with their time: the host
/// builds them so, and the worker hands its vectors on whole.
pub(crate) type WindowInput = timely::dataflow::InputHandleVec<Time, (WindowKey, Time, Acc)>;

/// A collection of windowed-aggregate contributions.
pub(crate) type WindowCollection<'scope> = VecCollection<'scope, Time, WindowKey, Acc>;

/// The spine holding `(window, key) -> Acc` (a key-only spine: the state is in the diff).
pub(crate) type WindowSpine = KeySpine<WindowKey, Time, Acc>;

/// A shared handle to a [`WindowSpine`].
pub(crate) type WindowTrace = TraceAgent<WindowSpine>;

/// The batch type of a [`WindowSpine`].
pub(crate) type WindowBatch = <WindowTrace as TraceReader>::Batch;

/// An arrangement made through [`arrange`]: its name and a handle on its trace.
pub(crate) struct NamedTrace {
    name: &'static str,
    trace: WindowTrace,
}

impl NamedTrace {
    /// The arrangement's name (also its operator name in timely's logs).
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// Number of update records held in the trace's batches (including both inputs of any
    /// merge in progress).
    pub(crate) fn size(&self) -> usize {
        let mut n = 0;
        self.trace.map_spans(|span| {
            if let Some(b) = &span.inner {
                n += b.len();
            }
        });
        n
    }

    /// Lets the trace forget distinctions between times before `frontier` and merge its
    /// batches up to it. A held handle pins history until this is called.
    pub(crate) fn compact_to(&mut self, frontier: &[Time]) {
        let f = AntichainRef::new(frontier);
        self.trace.set_logical_compaction(f);
        self.trace.set_physical_compaction(f);
    }

    /// Every batch currently in the trace (shared, immutable).
    pub(crate) fn batches(&self) -> Vec<WindowBatch> {
        let mut out = Vec::new();
        self.trace.map_spans(|span| {
            if let Some(b) = &span.inner {
                out.push(b.clone());
            }
        });
        out
    }
}

/// Arranges `collection` by `(window, key)`, naming the arrangement `name`. Records are
/// exchanged across workers by [`owner_hash`]: with `by_key`, every pane of a key lives on
/// one worker, where its windows are assembled.
pub(crate) fn arrange<'scope>(
    name: &'static str,
    collection: WindowCollection<'scope>,
    by_key: bool,
) -> (Arranged<'scope, WindowTrace>, NamedTrace) {
    let exchange = Exchange::new(move |update: &((WindowKey, ()), Time, Acc)| {
        owner_hash(&(update.0).0, by_key)
    });
    let arranged = arrange_core::<_, _, KeyBatcher<WindowKey, Time, Acc>, WindowSpine>(
        collection.map(|k| (k, ())).inner,
        exchange,
        name,
        KeyBatcher::new,
    );
    let trace = arranged.trace.clone();
    (arranged, NamedTrace { name, trace })
}
