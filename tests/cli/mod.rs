//! The commands a user types and what they answer, through the real binary: `ps`, `stop`,
//! `providers`, `sessions`, `sessions show` and `report`, bad configuration, the rough edges, secrets
//! kept out of every output, the documentation's snippets run as written, and what packagers
//! ship (systemd and launchd units, the man page, the container image).
//!
//! - [`ps_stop`]: `ps`, `stop` and `providers` against the real daemon.
//! - [`stop_all`]: `stop --all` on a shared engine: the question, `--yes`, `--dead`.
//! - [`session_ids`]: session ids, `sessions show` and refused detaches, answered honestly.
//! - [`report`]: spend: `report`, and the spend `sessions` and `sessions show` print.
//! - [`durations`]: times as every table writes them, adding up as a user adds them.
//! - [`colour`]: the state words of `ps` and `sessions`, coloured on a terminal only.
//! - [`edges`]: `ps --session/--state`, `sessions show`, log levels, verdicts said once.
//! - [`config_errors`]: bad configuration exits 2 naming file, line and key.
//! - [`security`]: secrets, unsafe state directories, look-alikes.
//! - [`readme`]: README's and the book's code blocks, run.
//! - [`packaging`], [`image`]: the packaging files and the container image.

mod colour;
mod config_errors;
mod durations;
mod edges;
pub(crate) mod image;
mod packaging;
mod ps_stop;
pub(crate) mod readme;
mod report;
mod security;
mod session_ids;
mod stop_all;
