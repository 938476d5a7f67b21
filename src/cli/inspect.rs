//! `thund inspect` (a state root's epochs) and `thund explain` (a view's plan).

use super::run::{load_inputs, parse_inputs};
use super::{ExplainArgs, InspectArgs};
use crate::error::{Error, Result};
use crate::time::display;
use crate::{Engine, ViewSpec};

pub(super) fn inspect(a: InspectArgs) -> Result<()> {
    use thund_checkpoint::decision::{ManifestState, PointerState};
    let ck = |e: thund_checkpoint::Error| Error::checkpoint(format!("state root {}", a.url), e);
    let store = thund_checkpoint::BlockingCheckpointStore::open(&a.url).map_err(ck)?;
    let views = store.views().map_err(ck)?;
    if views.is_empty() {
        println!("{}: no views", a.url);
    }
    for v in views {
        let listing = store.list(&v).map_err(ck)?;
        let latest = match &listing.latest {
            PointerState::Points(e) => format!("epoch {e}"),
            PointerState::Missing => "missing".into(),
            PointerState::Unreadable(r) => format!("unreadable ({r})"),
        };
        println!("view {v}: latest pointer {latest}");
        for (epoch, el) in &listing.epochs {
            match &el.manifest {
                ManifestState::Missing => println!("  epoch {epoch}: not committed (no manifest)"),
                ManifestState::Unreadable(r) => {
                    println!("  epoch {epoch}: unreadable manifest: {r}")
                }
                ManifestState::Valid(m) => {
                    let rows: u64 = m.files.iter().map(|f| f.rows).sum();
                    let bytes: u64 = m.files.iter().map(|f| f.bytes).sum();
                    println!(
                        "  epoch {epoch}: COMMITTED, W {}, {} files, {rows} rows, {bytes} bytes, late {}, windows closed {}",
                        display(m.watermark),
                        m.files.len(),
                        m.counters.late_rows_dropped,
                        m.counters.windows_closed
                    );
                    for f in &m.files {
                        println!(
                            "    {} (operator {}, worker {}, {} rows, {} bytes, written by epoch {})",
                            f.path, f.operator, f.worker, f.rows, f.bytes, f.epoch
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

pub(super) fn explain(a: ExplainArgs) -> Result<()> {
    let mut spec = ViewSpec::from_toml_file(&a.view)?;
    let inputs = parse_inputs(&spec, &a.inputs)?;
    load_inputs(&mut spec, &inputs)?;
    let view = spec.name.clone();
    let mut engine = Engine::builder().build()?;
    engine.create_view(spec)?;
    print!("{}", engine.explain(&view)?);
    Ok(())
}
