//! The host side: the handle the root crate drives, and the timely worker threads it commands.

pub(crate) mod handle;
mod worker;
