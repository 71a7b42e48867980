//! The sidecar and the wrapper: `sandguard -- CMD` and `sandguard watch`, the owner's death
//! however it dies (the kill matrix, a crash, an exec, a plain exit), the control pipe and its
//! lines, leases, exit statuses, a restarted sidecar resuming its session, pid 1, and the Rust
//! SDK helper (`Guard`).
//!
//! - [`wrapper`]: the kill matrix, exit statuses, the session's environment, control lines.
//! - [`sidecar`]: what the sidecar promises: signals, durable claims, pid 1, descriptors.
//! - [`exits`]: exit codes a user scripts against, and the `/proc` polling fallback.
//! - [`resume`]: a restarted sidecar resumes its session.
//! - [`reliability`]: the kill matrix repeated, the journal under random sidecar kills.
//! - [`guard`]: the Rust SDK helper through a real program.

mod exits;
mod guard;
pub(crate) mod reliability;
mod resume;
pub(crate) mod sidecar;
pub(crate) mod wrapper;
