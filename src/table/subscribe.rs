//! Subscriptions to a view's changes: each trigger's emitted rows, in the
//! view's output mode, through a bounded broadcast buffer shared by all
//! subscribers (a trigger's rows are held once, however many read them).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow::array::RecordBatch;
use futures::stream::{BoxStream, Stream, StreamExt};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::broadcast::Receiver;

use super::Tables;
use crate::time::EventTime;

/// What the engine broadcasts after a trigger.
pub(crate) struct Emitted {
    pub epoch: u64,
    pub watermark: Option<EventTime>,
    pub rows: Vec<RecordBatch>,
}

/// One item of a [`Subscription`].
#[derive(Clone, Debug)]
pub enum Change {
    /// One trigger's emitted rows (Update mode: with the `final` column),
    /// and the view's watermark after it. Triggers come in order, each once;
    /// a trigger that emitted nothing comes with no rows.
    Trigger {
        /// The trigger's epoch.
        epoch: u64,
        /// The view's watermark after it (`None` = −∞).
        watermark: Option<EventTime>,
        /// What the view emitted.
        rows: Vec<RecordBatch>,
    },
    /// The subscriber fell behind by more triggers than the buffer holds:
    /// `missed` triggers were dropped for it. In their place it gets the
    /// view's whole contents (as [`Tables::contents`] gives them) as of
    /// `epoch`; the triggers after `epoch` follow.
    Lagged {
        /// Triggers dropped.
        missed: u64,
        /// The epoch the contents are as of.
        epoch: u64,
        /// The view's contents then.
        contents: RecordBatch,
    },
}

/// A stream (a [`futures::Stream`], usable from tokio or any executor) of a
/// view's [`Change`]s from the trigger after it was taken.
///
/// Memory is bounded: the engine keeps at most the last
/// [`EngineBuilder::subscriber_buffer`](crate::EngineBuilder::subscriber_buffer)
/// triggers' rows for its subscribers (default 64). A subscriber that falls
/// further behind is not waited for: it is told so ([`Change::Lagged`]) and
/// resumes from the view's current contents. The stream ends when the
/// engine is dropped.
pub struct Subscription {
    inner: BoxStream<'static, Change>,
}

struct State {
    view: String,
    rx: Receiver<Arc<Emitted>>,
    tables: Tables,
    /// Triggers up to this epoch are already in what the subscriber has.
    seen: u64,
}

impl Subscription {
    pub(crate) fn new(view: &str, rx: Receiver<Arc<Emitted>>, tables: Tables, seen: u64) -> Self {
        let state = State {
            view: view.to_string(),
            rx,
            tables,
            seen,
        };
        let inner = futures::stream::unfold(state, |mut st| async move {
            loop {
                match st.rx.recv().await {
                    Ok(e) if e.epoch <= st.seen => continue,
                    Ok(e) => {
                        st.seen = e.epoch;
                        let change = Change::Trigger {
                            epoch: e.epoch,
                            watermark: e.watermark,
                            rows: e.rows.clone(),
                        };
                        return Some((change, st));
                    }
                    Err(RecvError::Closed) => return None,
                    Err(RecvError::Lagged(_)) => {
                        // skip to the newest trigger, then read the contents:
                        // they are published before the trigger's broadcast, so
                        // they hold every trigger skipped here
                        loop {
                            match st.rx.try_recv() {
                                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                                Err(TryRecvError::Empty) => break,
                                Err(TryRecvError::Closed) => return None,
                            }
                        }
                        let (epoch, contents) = match st.tables.contents(&st.view) {
                            Ok(c) => c,
                            Err(_) => return None,
                        };
                        // the triggers folded into the contents instead of delivered
                        let missed = epoch.saturating_sub(st.seen);
                        st.seen = epoch;
                        let change = Change::Lagged {
                            missed,
                            epoch,
                            contents,
                        };
                        return Some((change, st));
                    }
                }
            }
        })
        .boxed();
        Subscription { inner }
    }
}

impl Stream for Subscription {
    type Item = Change;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Change>> {
        self.inner.poll_next_unpin(cx)
    }
}
