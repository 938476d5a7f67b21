//! The recompute path's checkpoint format, both directions: the buffered
//! rows of each source ([`operator::rows`]), Complete mode's closed results
//! ([`operator::COMPLETE_CLOSED`]) and, for sessions, the end of each key's
//! latest closed session ([`operator::SESSION_CLOSED`]).

use std::sync::Arc;

use arrow::array::{BinaryArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};

use super::{Emitter, Layout, OnTime, RecomputeView};
use crate::error::{Error, Result};
use crate::paths::closed::ClosedResults;
use crate::spec::OutputMode;
use crate::state::{operator, Export, StateFile};
use crate::time::{to_millis, EventTime};

/// The buffered state as files: everything when `want_full` (sessions always
/// write everything), else the rows and results taken in since the last export.
pub(super) fn export(v: &mut RecomputeView, want_full: bool) -> Result<Export> {
    let full = want_full || matches!(v.layout, Layout::Session(_));
    let n = v.sources.len();
    let mut per: Vec<(Vec<RecordBatch>, EventTime)> = vec![(Vec::new(), EventTime::MIN); n];
    if full {
        match &v.layout {
            Layout::All(a) => {
                for (i, r) in a.rows.iter().enumerate() {
                    per[i] = (r.clone(), EventTime::MAX);
                }
            }
            Layout::Time(t) => {
                for (p, by_source) in &t.panes {
                    for (i, b) in by_source.iter().enumerate() {
                        if !b.is_empty() {
                            per[i].0.extend(b.iter().cloned());
                            per[i].1 = per[i].1.max(t.windows().pane_expiry(*p));
                        }
                    }
                }
            }
            Layout::Session(s) => {
                per[0].0.extend(
                    s.open
                        .values()
                        .flatten()
                        .flat_map(|x| x.rows.iter().cloned()),
                );
                per[0].1 = EventTime::MAX;
            }
        }
    } else {
        for (i, b, exp) in &v.unsaved {
            per[*i].0.push(b.clone());
            per[*i].1 = per[*i].1.max(*exp);
        }
    }
    v.unsaved.clear();
    let mut files = Vec::new();
    for (src, (batches, expiry)) in v.sources.iter().zip(per) {
        let batches: Vec<RecordBatch> = batches.into_iter().filter(|b| b.num_rows() > 0).collect();
        if !batches.is_empty() {
            files.push(StateFile::new(
                operator::rows(&src.name),
                0,
                batches,
                expiry,
            ));
        }
    }
    files.extend(v.closed_results.export(full));
    if let Layout::Session(s) = &v.layout {
        if !s.closed_end.is_empty() {
            let keys: Vec<&[u8]> = s.closed_end.keys().map(|k| k.as_slice()).collect();
            let ends: Vec<EventTime> = s.closed_end.values().copied().collect();
            let schema = Arc::new(Schema::new(vec![
                Field::new("key", DataType::Binary, false),
                Field::new("end", DataType::Int64, false),
            ]));
            let b = RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(BinaryArray::from(keys)),
                    Arc::new(Int64Array::from(ends)),
                ],
            )?;
            files.push(StateFile::new(
                operator::SESSION_CLOSED,
                0,
                vec![b],
                EventTime::MAX,
            ));
        }
    }
    Ok(Export {
        files,
        full,
        deferred: None,
    })
}

/// Restore what [`export`] wrote at watermark `w`, and rebuild the open
/// windows' results (Update, Complete) so only later changes are emitted.
pub(super) fn import(
    v: &mut RecomputeView,
    w: Option<EventTime>,
    loaded: &thund_checkpoint::Loaded,
) -> Result<()> {
    let view = v.eval.view().to_string();
    let mut rows = Vec::new();
    for (si, src) in v.sources.iter().enumerate() {
        for b in loaded.batches(&operator::rows(&src.name)) {
            let b = crate::engine::conform(&src.name, &src.schema, b.clone())
                .map_err(|e| Error::format(&view, format!("stored rows: {e}")))?;
            let times = to_millis(b.column(src.event_time).as_ref())?;
            rows.push(OnTime {
                source: si,
                batch: b,
                times,
            });
        }
    }
    v.insert(rows, w)?;
    v.closed_results =
        ClosedResults::restored(loaded.batches(operator::COMPLETE_CLOSED).cloned().collect());
    v.unsaved.clear();
    let n = v.sources.len();
    let emit = Emitter {
        eval: &v.eval,
        out: &v.out,
        mode: v.mode,
        bound: v.bound.as_ref(),
        closed: &mut ClosedResults::default(),
    };
    let refresh = v.mode != OutputMode::Append;
    match &mut v.layout {
        Layout::All(a) if refresh => a.refresh(&emit)?,
        Layout::Time(t) if refresh => t.refresh(&emit, n)?,
        Layout::Session(s) if refresh => s.refresh(&emit)?,
        Layout::Time(t) => t.forget_dirty(),
        Layout::Session(s) => s.forget_dirty(),
        Layout::All(_) => {}
    }
    if let Layout::Session(s) = &mut v.layout {
        for b in loaded.batches(operator::SESSION_CLOSED) {
            let (Some(k), Some(e)) = (
                b.column(0).as_any().downcast_ref::<BinaryArray>(),
                b.column(1).as_any().downcast_ref::<Int64Array>(),
            ) else {
                return Err(Error::format(
                    &view,
                    "session-closed has unexpected columns",
                ));
            };
            for i in 0..b.num_rows() {
                s.closed_end.insert(k.value(i).to_vec(), e.value(i));
            }
        }
    }
    Ok(())
}
