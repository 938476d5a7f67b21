//! Writer fencing: the lease file `{state_root}/{view}/_thund_writer.json`.
//!
//! A writer creates the lease with a conditional create, so of two writers on
//! the same state root and view exactly one gets it; the other gets
//! [`Error::Fenced`](crate::Error::Fenced). Before committing each manifest the
//! writer re-reads the lease and stops with
//! [`Error::LeaseLost`](crate::Error::LeaseLost) if it is no longer its own.
//!
//! # Stale leases
//!
//! A process that dies without [`Writer::release`](crate::Writer::release)
//! (SIGKILL, power loss) leaves its lease behind. The lease records the
//! holder's pid, hostname and (on Linux) the process start time, so a
//! restarted process can take it over:
//!
//! * [`Takeover::IfStale`] takes over only a lease whose holder ran on *this*
//!   host and is no longer alive: no such pid, a zombie, or the pid now
//!   belongs to a process started at another time (pid reuse, e.g. pid 1 in
//!   a restarted container). A lease of *this* process is stale once the
//!   [`Writer`](crate::Writer) that took it was dropped (an in-process
//!   "crash", as tests simulate one). On systems without `/proc` the liveness
//!   of other processes cannot be checked and `IfStale` refuses their leases.
//! * [`Takeover::Force`] takes over any lease: for an operator who knows the
//!   old holder is gone (another host, an unreadable lease file).
//!
//! Takeover deletes the old lease (after re-reading it to check it has not
//! changed) and creates a new one conditionally, so two processes taking over
//! at once still end with one holder. An old holder that is in fact still
//! running finds out at its next commit ([`Error::LeaseLost`]); on stores
//! without atomic compare-and-swap that check narrows, but cannot close, the
//! window in which it may still write one epoch.
//!
//! [`Error::LeaseLost`]: crate::Error::LeaseLost

use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How [`CheckpointStore::acquire_with`](crate::CheckpointStore::acquire_with)
/// treats a lease held by someone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Takeover {
    /// Never take over: a held lease is [`Error::Fenced`](crate::Error::Fenced).
    #[default]
    Never,
    /// Take over a lease whose holder was on this host and is dead.
    IfStale,
    /// Take over unconditionally.
    Force,
}

/// The content of a lease file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// Random token identifying the holder (one per acquisition).
    pub owner: String,
    /// The holder's process id.
    pub pid: u32,
    /// The holder's hostname.
    pub hostname: String,
    /// The holder's process start time (Linux: clock ticks since boot, field
    /// 22 of `/proc/{pid}/stat`), to detect pid reuse.
    pub process_start: Option<u64>,
    /// When the lease was acquired, Unix milliseconds.
    pub acquired_at_ms: i64,
}

impl fmt::Display for LeaseInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} on host `{}` since {} ms (owner {})",
            self.pid, self.hostname, self.acquired_at_ms, self.owner
        )
    }
}

impl LeaseInfo {
    /// A fresh lease for the current process, with a new random owner token.
    pub fn for_this_process() -> Self {
        let pid = std::process::id();
        Self {
            owner: new_token(),
            pid,
            hostname: hostname(),
            process_start: process_start(pid),
            acquired_at_ms: now_ms(),
        }
    }

    /// Whether the holder is known to be dead: same host as us, and its pid is
    /// gone, a zombie, or reused by a process started at another time. `false`
    /// whenever that cannot be established.
    pub fn is_stale(&self) -> bool {
        if self.hostname != hostname() {
            return false;
        }
        let me = std::process::id();
        if self.pid == me {
            // Our own pid: either an earlier process that had the same pid
            // (container restart), or a writer of this process. The latter is
            // stale once that `Writer` is dropped: its token is no longer live.
            return match (self.process_start, process_start(me)) {
                (Some(recorded), Some(mine)) if recorded != mine => true,
                _ => !is_live(&self.owner),
            };
        }
        match liveness(self.pid) {
            Liveness::Dead => true,
            Liveness::Alive { start } => match (self.process_start, start) {
                (Some(recorded), Some(now)) => recorded != now,
                _ => false,
            },
            Liveness::Unknown => false,
        }
    }
}

/// Owner tokens of the `Writer`s alive in this process.
fn live_tokens() -> std::sync::MutexGuard<'static, HashSet<String>> {
    static LIVE: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let m = LIVE.get_or_init(Default::default);
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Marks a token as held by a live writer of this process.
pub(crate) fn register_live(token: &str) {
    live_tokens().insert(token.to_string());
}

/// Marks a token's writer as gone (dropped or released).
pub(crate) fn unregister_live(token: &str) {
    live_tokens().remove(token);
}

fn is_live(token: &str) -> bool {
    live_tokens().contains(token)
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// 128 random bits as hex: std's `RandomState` is randomly keyed per process
/// (and per instance), mixed with the time, pid and a counter.
fn new_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut halves = [0u64; 2];
    for (i, h) in halves.iter_mut().enumerate() {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(nanos);
        hasher.write_u32(std::process::id());
        hasher.write_u64(n);
        hasher.write_usize(i);
        *h = hasher.finish();
    }
    format!("{:016x}{:016x}", halves[0], halves[1])
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| std::env::var("COMPUTERNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown".to_string())
}

enum Liveness {
    Dead,
    Alive { start: Option<u64> },
    Unknown,
}

/// `(state, starttime)` from `/proc/{pid}/stat`.
fn proc_stat(pid: u32) -> Option<std::io::Result<(char, Option<u64>)>> {
    if !std::path::Path::new("/proc/self/stat").exists() {
        return None;
    }
    Some(
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| {
            // The command name (field 2) is in parentheses and may contain
            // spaces: fields after it start after the last `)`.
            let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let state = fields.first().and_then(|f| f.chars().next()).unwrap_or('?');
            // Field 3 is fields[0]; field 22 (starttime) is fields[19].
            let start = fields.get(19).and_then(|f| f.parse().ok());
            (state, start)
        }),
    )
}

fn liveness(pid: u32) -> Liveness {
    match proc_stat(pid) {
        None => Liveness::Unknown,
        Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Liveness::Dead,
        Some(Err(_)) => Liveness::Unknown,
        Some(Ok(('Z' | 'X', _))) => Liveness::Dead,
        Some(Ok((_, start))) => Liveness::Alive { start },
    }
}

fn process_start(pid: u32) -> Option<u64> {
    proc_stat(pid)?.ok()?.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ() {
        let a = LeaseInfo::for_this_process();
        let b = LeaseInfo::for_this_process();
        assert_ne!(a.owner, b.owner);
        assert_eq!(a.owner.len(), 32);
    }

    #[test]
    fn own_process_is_stale_only_when_its_writer_is_gone() {
        let l = LeaseInfo::for_this_process();
        register_live(&l.owner);
        assert!(!l.is_stale());
        unregister_live(&l.owner);
        assert!(l.is_stale());
    }

    #[test]
    fn other_host_is_never_stale() {
        let mut l = LeaseInfo::for_this_process();
        l.hostname = "some-other-host.invalid".into();
        l.pid = u32::MAX - 1;
        assert!(!l.is_stale());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dead_pid_on_this_host_is_stale() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn `true`");
        let pid = child.id();
        child.wait().expect("wait");
        let mut l = LeaseInfo::for_this_process();
        l.pid = pid;
        l.process_start = Some(1);
        assert!(l.is_stale());
        // Our own pid with a different recorded start time: a previous
        // incarnation (container restart).
        let mut me = LeaseInfo::for_this_process();
        me.process_start = me.process_start.map(|s| s + 1);
        assert!(me.is_stale());
    }
}
