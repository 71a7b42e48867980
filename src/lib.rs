//! sandguard makes sure no sandbox outlives the program that owns it.
//!
//! A *sandbox* is a Docker container (with its networks and volumes) or a cloud sandbox, found
//! through a *provider* driver. Every sandbox created under a guarded *session* carries the
//! session's labels (`sandguard.session`, `sandguard.owner`, …); sandguard decides ownership
//! by those labels and by explicit claims, never by names.
//!
//! # Map of the modules
//!
//! ```text
//! main.rs       args → logging → cli → exit code
//! cli/          one file per subcommand: parses its args, makes Settings, calls the library
//!               once and prints what it answers; error.rs (one Error, one exit code mapping);
//!               output.rs (tables, JSON shapes, stdout; output/colour.rs: state words
//!               coloured on a terminal, never with NO_COLOR; output/refusals.rs: refused
//!               creates, for `sessions show` and `report`);
//!               watch/terminal.rs (the sidecar's words on the wrapper's stderr); report.rs
//!               (`sandguard report`: the ledger's spend, printed); fleet.rs (`--fleet` of
//!               `sessions` and `report`: the fleet store read instead of the ledger)
//! wrapper/      `sandguard -- CMD` as a library service: mod.rs (the session made and handed
//!               to its sidecar, CMD exec'd with the session's variables; WrapError), init.rs
//!               (the wrapper as pid 1: CMD forked, signals forwarded, orphans reaped, the
//!               reclaim waited for)
//! session/      spawn.rs (the one way a sidecar is started, and its typed ready line),
//!               handoff.rs (what the wrapper hands its sidecar, one typed value encoded and
//!               decoded there), confirm.rs (the one confirmed claim, release, detach),
//!               guard.rs (the Rust SDK helper)
//! watch/        the sidecar: start/ (how it begins, up to ready, the proxies it serves), its
//!               event loop (mod.rs), arrival.rs (claims and detaches judged as they come),
//!               end.rs (the session's end), triggers.rs (what the loop waits on), service.rs
//!               (the library service that owns the loop's tasks), refusals.rs (the creates
//!               a limit refused, journaled per doubling), lease.rs (the boot-clock
//!               lease), ttl/ (server-side TTLs), limits.rs (the limits that remove while
//!               the owner lives), gone.rs (what the provider says went by itself,
//!               released: events, keepers' look-ups, before a refusal), fleet.rs (its
//!               fleet lease), daemon.rs (the detach from the terminal of `sandguard watch`)
//! proxy/        the two API proxies: docker/ (the Docker Engine API on a private socket) and
//!               cloud/ (E2B and Daytona on loopback, one file per API; removal.rs: what the
//!               program deletes, released); what both share:
//!               create.rs (the one create pipeline: read → decide → stamp → forward →
//!               claim), refusal.rs (why a proxy answers itself), named.rs (what a create
//!               names, for the record of its refusal), stamp.rs, claim.rs (a claim
//!               handed to the sidecar and acknowledged, and a create's slot asked for),
//!               release.rs (whether a DELETE's answer releases its claim: the one
//!               decision, on the path the provider routed), size.rs (a create's size, for
//!               prices), accept.rs, tasks.rs, path.rs, headers.rs, json.rs
//! budget/       limits per session and per provider (Limits, Budget), the one decision
//!               whether a create may go on (Slots::take, exceeded.rs: Exceeded and its
//!               words), the creates refused (refusals.rs: counted, journaled per
//!               doubling), and what was spent,
//!               metered for `spend` (meter.rs); the sidecar holds the slots and the meter,
//!               the proxies ask; watch/limits.rs removes at `lifetime` and a reclaiming
//!               `spend`
//! sweep/        one pass: judging the ledger and every provider (mod.rs); failure.rs (what
//!               the ledger or the fleet store could not do); service.rs (--every,
//!               adoption, the sweep lock, the metrics' baseline, a bounded stop); fleet.rs (`sweep --fleet`: the fleet store's
//!               expired leases, reclaimed once each under a lock in the store)
//! metrics/      `sweep --every --metrics`: the figures (mod.rs, prometheus-client),
//!               what the ledger's journals tell of the sidecars' reclaims (ledger.rs),
//!               the loopback or unix-socket endpoint (serve.rs)
//! fleet/        the fleet lease store behind a small trait (mod.rs, with the key layout):
//!               redis/ (Redis or Valkey; reads.rs parses sessions, spend.rs the day hashes),
//!               memory.rs (for unit tests), spend.rs (each session's sandbox time per day
//!               and provider, and `report --fleet` over every host's); the sidecar's side is
//!               watch/fleet.rs
//! notify/       `[notify]` events: Event and Notifier (mod.rs, a queue and a task per
//!               target), deliver.rs (the command, the webhook, retries), sweep.rs (what a
//!               pass is told as, with the memory across passes); the sidecar's side is
//!               watch/notify.rs
//! ownership/    the one ownership judgement: whether a sandbox may be removed or renewed
//!               (mod.rs), what a session is owed (judge_session), and why (verdict.rs);
//!               known.rs (what is known: the session's own view, other sessions' journals
//!               cached; Source, where every judge of a sidecar gets it), known/facts.rs (the judgement's facts, built there and nowhere
//!               else); detach.rs; stop.rs (what `stop --all` takes: the orphaned, the
//!               user's own, other users' live owners'); every path that removes or renews
//!               asks it (DESIGN's trust rules)
//! reclaim/      the one removal path: mod.rs (the passes), judged.rs (one provider's share
//!               judged, claims looked up first), plan.rs (Plan, Listed), report.rs
//!               (Outcome, Failure: what the provider said, Report), options.rs, list.rs
//!               (listings retried until the deadline), remove.rs (retries), target.rs
//!               (which ledger target names a sandbox), pace.rs (each provider's window, rate
//!               and Retry-After gate), stop.rs (`sandguard stop`: what was asked, journaled),
//!               ending.rs (the ONE journaled session ending, for the sidecar and the sweep),
//!               cutoff.rs (a reclaim cut short: the sweep service's stop)
//! providers/    the trait (mod.rs: Provider, Sandbox and the one naming rule), registry.rs,
//!               retry.rs (reads, paging, error chains), http/ and redact.rs (the REST layer;
//!               redact/url.rs: the one redaction of URLs, which every address printed uses);
//!               one module per driver: docker/ (daemon.rs: where the daemon listens),
//!               e2b.rs, daytona/, flyio/, tenki/, modal/ (its messages generated from
//!               proto/modal.proto), plugin/ (any executable speaking JSON)
//! ledger/       the state directory: journals, locks, the boots this machine ran, pruning;
//!               cause.rs (EndCause: why a session ended, journaled on reclaim_start),
//!               view.rs (a journal folded), story.rs (a journal told as a history, each
//!               sandbox's held stretches with it; story/refusals.rs: the creates refused),
//!               spend.rs (sandbox time per session and
//!               provider, from the story; `report` across the ledger, which cli/report.rs
//!               prints; spend/daily.rs: a session's per UTC day, for the fleet store;
//!               spend/refused.rs: the refused creates `report` counts),
//!               price.rs (what a sandbox's time is estimated to cost),
//!               faults.rs (tests: writes that fail as a process dying there, or a full disk,
//!               would leave them)
//! protocol/     control lines (and their bounded reader), the sidecar's ready line, the
//!               SessionId rule (a leaf: the ledger and the labels carry it too)
//! config/       file + environment + flags → one Settings (dotenv.rs: Daytona's ./.env;
//!               docker/: where the daemon is, sockets/trust.rs: which found sockets are
//!               safe, address.rs: the address that prints only redacted)
//! identity/     owner identity, liveness (alive / dead / unknown), death.rs (watching a
//!               live owner die: pidfd, kqueue, /proc fallback)
//! labels.rs     the label keys a session stamps and the selector (a leaf every layer reads,
//!               so at the root rather than under session/); labels/inherited.rs (which
//!               labels a sandbox carries from its image count as its creator's)
//! unix/         the only module with unsafe: fd, process, signal, the platform seam
//!               (linux.rs, macos.rs); host.rs (this machine's, boot's and pid namespace's
//!               ids, below identity and config); owner.rs (whether only the user or root
//!               can change a file: the ledger's directory, an engine socket found)
//! model/        (unit tests only) random histories against a model of the trust rules; its
//!               generator and oracle are testing/rng.rs and testing/oracle.rs
//! timefmt.rs    RFC 3339, and the one way every table writes a span (`1m15s`)
//! backoff.rs    the one backoff schedule every retry waits by
//! ```
//!
//! # Where a change goes
//!
//! - **Add a provider**: a module under `providers/` implementing `Provider`
//!   (`src/providers/mod.rs` says what each method owes), one entry in
//!   `src/providers/registry.rs`, its settings in `src/config/`; when its API should be
//!   proxied, one file beside `src/proxy/cloud/e2b.rs` and `daytona.rs` (its routes, its
//!   stamp, its error shape). The emulator its tests run against goes in
//!   `tests/support/`, its tests in `tests/providers/`.
//! - **Add a limit to the create path**: a field of `Limits` and a check in `Slots::check`
//!   with a new variant of `Over` (`src/budget/mod.rs`; what it counts, through `Usage`),
//!   its key in `src/config/file.rs` (`FileLimits`, and `FileProviderLimits` for a
//!   provider's) and its flag in `src/cli/run.rs`'s `Limits`; a limit that removes asks the
//!   judgement as its own `Asker` (rule 7) from `src/watch/limits.rs`; the *decide* step of
//!   `src/proxy/create.rs`
//!   (both proxies run it) asks the sidecar for the slot and refuses with
//!   `Refusal::Limit` (`src/proxy/refusal.rs`), which each API words in its own error shape
//!   (`proxy::docker::forward`'s and `proxy::cloud`'s `refused`).
//! - **Add a sweep rule**: a session's verdict is `ownership::judge_session` and a sandbox's
//!   is `ownership`'s one judgement (`src/ownership/mod.rs`, its reasons in `verdict.rs`);
//!   the sweep (`src/sweep/mod.rs`) acts on them and prints their reason as given, so a rule
//!   is written there once and holds for the sidecar, `stop` and the sweep alike. Its test
//!   goes in `tests/sweep/rules.rs`, and in the model (`src/model/`) when it is a trust rule.
//!
//! Unit tests sit beside their code: an inline `#[cfg(test)] mod tests` when short, else
//! `<module>/tests.rs` declared as `mod tests;` (never through `#[path]`). Integration tests
//! are one binary, `tests/integration.rs`, grouped by subsystem (`tests/watch/`, `reclaim/`,
//! `sweep/`, `fleet/`, `proxy/`, `providers/`, `cli/`), the shared pieces in `tests/support/`.
//!
//! # Flow
//!
//! Data flows one way: `cli` → `wrapper` → `session` / `watch` / `sweep` (peers) →
//! `reclaim` → `providers`, `ledger` and `fleet`; every path that removes or renews asks
//! `ownership`. Nothing but `cli` and `wrapper` (the sidecar's handoff) import `watch`;
//! `watch` starts the `proxy`s, which sit above the
//! drivers. `sweep` and `watch` share the session ending through `reclaim::ending`, and owner
//! death through `identity::death`. Nothing below `cli` knows about clap; only `providers`
//! knows a provider's wire format, but for the creates the proxies stamp (`proxy::docker`,
//! `proxy::cloud::{e2b, daytona}`).
//!
//! # Public API
//!
//! [`Guard`] (with its builder, its [`Limits`] and errors), [`ByeOutcome`] and [`labels`] (the label keys
//! are a documented contract) are the library's API. Every other module is private, its items
//! `pub(crate)` (the `unreachable_pub` lint keeps them so). The binary, the integration tests,
//! the benchmarks and the fuzz targets reach the pieces they drive through one hidden module,
//! `sandguard::testing`, which names each of them once; it is not a stable interface.

#![deny(unsafe_code)]
#![warn(unreachable_pub)]

mod backoff;
mod budget;
mod cli;
mod config;
mod fleet;
mod identity;
pub mod labels;
mod ledger;
mod metrics;
#[cfg(test)]
mod model;
mod notify;
mod ownership;
mod protocol;
mod providers;
mod proxy;
mod reclaim;
mod session;
mod sweep;
mod timefmt;
mod unix;
mod watch;
mod wrapper;

pub use budget::Limits;
pub use protocol::ByeOutcome;
pub use session::guard::{Guard, GuardBuilder, GuardError};

/// The pieces the binary, the integration tests, the benchmarks and the fuzz targets drive
/// directly. Hidden from the documentation and not a stable interface: everything else in the
/// crate is `pub(crate)` (the `unreachable_pub` lint keeps it so), and what a test needs is
/// named here, once, rather than by making whole modules public.
#[doc(hidden)]
pub mod testing {
    /// The binary's entry points (`src/main.rs`).
    pub mod cli {
        pub use crate::cli::{init_logging, Invocation};
    }
    pub mod config {
        pub use crate::config::fleet::StoreUrl;
        pub use crate::config::{
            CloudSettings, FleetSettings, NotifySettings, Secret, Settings, Webhook,
        };
    }
    pub mod fleet {
        pub use crate::fleet::redis::RedisStore;
        pub use crate::fleet::{Changes, Holdings, SessionRecord, Store};
    }
    pub mod identity {
        pub use crate::identity::Identity;
    }
    pub mod ledger {
        pub use crate::ledger::journal::Journal;
        pub use crate::ledger::record::Record;
        pub use crate::ledger::{fold_journal, StateDir};
    }
    pub mod protocol {
        pub use crate::protocol::{parse_line, ByeOutcome, Target};
    }
    pub mod providers {
        pub use crate::providers::error::ProviderError;
        pub use crate::providers::{Provider, Sandbox};
        pub mod daytona {
            pub use crate::providers::daytona::{parse_list_body, Auth, DaytonaProvider};
        }
        pub mod e2b {
            pub use crate::providers::e2b::parse_list_body;
        }
        pub mod flyio {
            pub use crate::providers::flyio::{lease_wait, parse_list_body};
        }
        pub mod modal {
            pub use crate::providers::modal::{decode_list_page, wire};
        }
        pub mod tenki {
            pub use crate::providers::tenki::{parse_list_body, session_tag, TenkiProvider};
        }
    }
    /// The API proxies' pure steps, for the fuzz targets.
    pub mod proxy {
        pub mod docker {
            pub use crate::proxy::docker::create::{
                commit_target, named_volumes, scrub_commit, stamp,
            };
            pub use crate::proxy::docker::target::route;
        }
        pub use crate::proxy::json::Json;
        pub use crate::proxy::refusal::Unstampable;
        pub mod stamp {
            pub use crate::proxy::stamp::{take, Keys};
        }
    }
    pub mod timefmt {
        pub use crate::timefmt::{format_rfc3339, now_unix, parse_rfc3339};
    }
    pub mod unix {
        pub use crate::unix::{
            default_signal, geteuid, pipe, random_bytes, random_hex, spawn_detached,
            spawn_in_new_session, try_lock_exclusive,
        };
    }

    // --- The model tests' shared pieces : the one
    // seeded generator and the one oracle of the ownership rules, used by the in-process model
    // (`src/model`, a unit test) and the integration tests (`tests/reclaim/model.rs`). Files
    // of their own, `src/testing/`, since `src/model` is compiled for unit tests only.
    pub mod oracle;
    pub mod rng;
}
