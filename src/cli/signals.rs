//! SIGINT (Ctrl-C) and SIGTERM for `thund run`: the first asks the run to
//! stop between two triggers (the one in progress is applied and
//! checkpointed first); a second stops the process at once, which a
//! checkpoint survives like any crash (the manifest is the commit point).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// The signal that asked the run to stop, once one came.
#[derive(Clone)]
pub(super) struct Interrupt(Arc<AtomicI32>);

impl Interrupt {
    /// Handle SIGINT and SIGTERM from now on, on a thread of their own.
    pub(super) fn install() -> std::io::Result<Interrupt> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let got = Arc::new(AtomicI32::new(0));
        // registered here, before the run starts, so no signal is missed
        let waiting = {
            let _in = rt.enter();
            signals()?
        };
        let flag = got.clone();
        std::thread::Builder::new()
            .name("thund-signals".into())
            .spawn(move || {
                rt.block_on(async move {
                    let mut waiting = waiting;
                    loop {
                        let (signal, name) = waiting.next().await;
                        if flag.swap(signal, Ordering::SeqCst) != 0 {
                            eprintln!("thund run: {name} again: stopping now");
                            std::process::exit(128 + signal);
                        }
                        eprintln!(
                            "thund run: {name}: stopping after the trigger in progress \
                             (again to stop at once)"
                        );
                    }
                })
            })?;
        Ok(Interrupt(got))
    }

    /// The number and name of the signal received, if one was.
    pub(super) fn received(&self) -> Option<(i32, &'static str)> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            15 => Some((15, "SIGTERM")),
            n => Some((n, "SIGINT")),
        }
    }
}

#[cfg(unix)]
struct Waiting {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

#[cfg(unix)]
fn signals() -> std::io::Result<Waiting> {
    use tokio::signal::unix::{signal, SignalKind};
    Ok(Waiting {
        int: signal(SignalKind::interrupt())?,
        term: signal(SignalKind::terminate())?,
    })
}

#[cfg(unix)]
impl Waiting {
    async fn next(&mut self) -> (i32, &'static str) {
        tokio::select! {
            _ = self.int.recv() => (2, "SIGINT"),
            _ = self.term.recv() => (15, "SIGTERM"),
        }
    }
}

#[cfg(not(unix))]
struct Waiting;

#[cfg(not(unix))]
fn signals() -> std::io::Result<Waiting> {
    Ok(Waiting)
}

#[cfg(not(unix))]
impl Waiting {
    async fn next(&mut self) -> (i32, &'static str) {
        let _ = tokio::signal::ctrl_c().await;
        (2, "Ctrl-C")
    }
}
