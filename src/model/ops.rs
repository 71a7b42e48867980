//! The operations of a history ([`Op`] and what it names), and the seeded generator that
//! makes them.
//!
//! Decisions:
//! - **Names, not positions.** An operation names its session by the order of `start`s
//!   (`s0`, `s1`, …) and its sandbox by the order of creation (`x0`, `x1`, …), both fixed
//!   when the history is generated. Shrinking drops operations; an operation whose session or
//!   sandbox no longer exists, or whose precondition no longer holds (a claim by a session
//!   whose sidecar is gone), is skipped when it runs ([`crate::model::world`]), so every
//!   sub-history still runs.
//! - The generator is [`generate`] (in `ops/generate.rs`).

use std::fmt;

mod generate;

/// The one seeded generator of the test suites (`crate::testing::rng`).
pub(crate) use crate::testing::rng::Rng;
pub(super) use generate::generate;

/// How the program makes a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Make {
    /// Stamped with the session's labels (`sandguard.detached=true` too, when `detached`).
    Labelled { detached: bool },
    /// Through the sidecar's proxy: stamped and claimed (the claim acknowledged first).
    Proxy { detached: bool },
    /// Without labels, then claimed with a `claim` line.
    ThenClaimed,
}

/// The image a sandbox is created from: the sandguard labels it carries (a committed or built
/// image). The sandbox carries them too, unless its creator set its own; which of them count
/// is `crate::labels::inherited`'s rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Image {
    /// Session `s`'s labels (`sandguard.session` and `sandguard.owner`), as it was when the
    /// sandbox is created.
    pub session: Option<usize>,
    /// `sandguard.detached=true`.
    pub detached: bool,
    /// A `sandguard.expires` already past (a `--max-lifetime` session's container committed
    /// with its labels): it ends the sandbox only where the label it came with counts
    /// (ownership before age).
    pub expires: bool,
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(" from an image labelled")?;
        if let Some(s) = self.session {
            write!(f, " with s{s}'s labels")?;
        }
        if self.detached {
            f.write_str(" detached=true")?;
        }
        if self.expires {
            f.write_str(" expires=<past>")?;
        }
        Ok(())
    }
}

/// What labels a stranger's sandbox carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Forge {
    None,
    /// A copy of session `s`'s labels (live or dead, as it was when generated).
    Of(usize),
}

/// How an owner dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Death {
    /// It exits by itself (its stdin closes).
    Exit,
    Sigkill,
    /// SIGTERM to the owner and, at the same moment, a stop request to its sidecar (what
    /// `kill -TERM -PGID` or `systemctl stop` does).
    GroupTerm,
}

/// How `stop ID` names its sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    Full,
    /// The first `n` characters of the id.
    Prefix(usize),
    Empty,
}

/// Where an actor dies, or its disk fills up, among its journal writes (the ledger's
/// test-only faults, `crate::ledger::faults`): after `after` writes went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Crash {
    pub after: u8,
    /// The disk is full (ENOSPC) rather than the actor dead (SIGKILL, `SIGXFSZ`).
    pub full: bool,
}

impl Crash {
    pub(super) fn faults(self) -> crate::ledger::faults::Faults {
        use crate::ledger::faults::{Fault, Faults};
        let fault = if self.full { Fault::Full } else { Fault::Die };
        Faults::after(self.after.into(), fault)
    }
}

impl fmt::Display for Crash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.full {
            true => write!(f, "its disk full after {} journal writes", self.after),
            false => write!(f, "dying after {} journal writes", self.after),
        }
    }
}

/// A limit that removes while its owner lives, with which a session may start: its keeper
/// runs every few milliseconds, at random points of the history, and removes what the
/// session owns (every sandbox is past a lifetime of 0; a spend of 1 ms is reached at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Limit {
    Lifetime,
    Spend,
}

/// How the provider answers a `DELETE` the program sent through the proxy and that it did
/// not carry out: the sandbox is still there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// A path its router does not take as its removal (`/containers/ID/`, `/v2/sandboxes/ID`):
    /// the router's own `404`.
    NotRouted,
    /// The removal route, answered `404` naming no id (`page not found`).
    RouterNotFound,
    /// `409` (a removal already in progress).
    Conflict,
    /// `500`.
    ServerError,
}

/// A provider fault, switched on until `heal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    /// The next `n` removals answer 503.
    Remove5xx(u32),
    /// The next `n` removals answer 429 with a short `Retry-After`.
    Remove429(u32),
    /// The next `n` listings fail.
    ListFails(u32),
    /// Every call takes this many milliseconds.
    Slow(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// A new session `s`: a real owner process and its sidecar (`watch --session S`), which
    /// may crash among its journal writes (its journal's creation included).
    Start {
        s: usize,
        crash: Option<Crash>,
        /// Started as the wrapper starts one (`sandguard -- CMD`): the journal created unsynced
        /// and handed to the sidecar, which syncs it; else as `watch` does.
        wrapper: bool,
        /// With a limit whose keeper removes while the owner lives.
        limit: Option<Limit>,
    },
    /// `watch --session S` again for a live owner whose sidecar is gone (a restarted
    /// Kubernetes sidecar): it must begin or resume the session, never be refused for good.
    Restart {
        s: usize,
    },
    /// Session `s`'s running sidecar dies at its `after`-th journal write from now.
    CrashAt {
        s: usize,
        after: u8,
    },
    Create {
        s: usize,
        x: usize,
        provider: usize,
        how: Make,
        image: Option<Image>,
    },
    Stranger {
        x: usize,
        provider: usize,
        forge: Forge,
        image: Option<Image>,
    },
    Claim {
        s: usize,
        x: usize,
    },
    /// Session `s`'s program removes sandbox `x` itself: through the proxy (its claim released
    /// at once), or behind sandguard's back (its claim stays in the ledger).
    Removes {
        s: usize,
        x: usize,
        proxy: bool,
    },
    /// Session `s`'s program asks the proxy to remove its sandbox `x`, and the provider
    /// refuses (`answer`): the sandbox stays, and so must its claim.
    Refused {
        s: usize,
        x: usize,
        answer: Refusal,
    },
    /// A stranger makes another sandbox under `x`'s id once it is free (the one there now
    /// removed first): ids that are names (Docker volumes) are taken again.
    Reuse {
        x: usize,
    },
    /// The provider removes `x` by itself (an autoremove, its own TTL), and says so to the
    /// sessions it follows (Docker's `destroy`): whoever held it must see it gone.
    Vanish {
        x: usize,
    },
    Release {
        s: usize,
        x: usize,
    },
    Detach {
        s: usize,
        x: usize,
    },
    Stop {
        x: usize,
        cut: Cut,
    },
    StopAll {
        s: usize,
    },
    Kill {
        s: usize,
        how: Death,
    },
    /// The sidecar dies (SIGKILL): its tasks end, its lock is freed, its lease runs out.
    SidecarDies {
        s: usize,
    },
    /// `sandguard sweep`: one pass of the sweep service, fleet store told; `prune`: then
    /// its pruning of ended sessions, as `sweep --every` does after each pass.
    Sweep {
        prune: bool,
        crash: Option<Crash>,
    },
    /// `sandguard sweep --fleet` on this host (`here`) or another; `after_lease`: once every
    /// dead sidecar's fleet lease has run out.
    FleetSweep {
        here: bool,
        after_lease: bool,
    },
    /// The sweep service's pruning of ended sessions (everything ended counts as old).
    Prune,
    Fault {
        provider: usize,
        fault: Fault,
    },
    Heal,
    /// Time passes: every keeper (TTL, limits) runs a round or two while nothing else
    /// happens (`world::PAUSE`).
    Pause,
}

/// The providers of every history: `fake` (with a server-side TTL) and `fake2`.
pub(super) const PROVIDERS: [&str; 2] = ["fake", "fake2"];

/// The id of sandbox number `x`.
pub(super) fn box_id(x: usize) -> String {
    format!("x{x}")
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |i: usize| PROVIDERS[i % PROVIDERS.len()];
        match *self {
            Op::Start {
                s,
                crash,
                wrapper,
                limit,
            } => {
                write!(f, "start session s{s}")?;
                if wrapper {
                    write!(f, " with the wrapper")?;
                }
                match limit {
                    Some(Limit::Lifetime) => write!(f, " with --max-lifetime 0")?,
                    Some(Limit::Spend) => write!(f, " with --max-spend 1ms --on-spend reclaim")?,
                    None => {}
                }
                match crash {
                    Some(c) => write!(f, ", its sidecar {c}"),
                    None => Ok(()),
                }
            }
            Op::Restart { s } => write!(f, "sandguard watch --session s{s} again"),
            Op::CrashAt { s, after } => {
                write!(
                    f,
                    "s{s}'s sidecar dies at its journal write {after} from now"
                )
            }
            Op::Create {
                s,
                x,
                provider,
                how,
                image,
            } => {
                write!(f, "s{s}'s program creates x{x} on {}", p(provider))?;
                if let Some(image) = image {
                    write!(f, "{image}")?;
                }
                f.write_str(", ")?;
                match how {
                    Make::Labelled { detached } => {
                        write!(
                            f,
                            "labelled{}",
                            if detached { ", detached=true" } else { "" }
                        )
                    }
                    Make::Proxy { detached } => write!(
                        f,
                        "through the proxy{}",
                        if detached {
                            ", labelled detached=true"
                        } else {
                            ""
                        }
                    ),
                    Make::ThenClaimed => write!(f, "unlabelled, then `claim`s it"),
                }
            }
            Op::Stranger {
                x,
                provider,
                forge,
                image,
            } => {
                write!(f, "a stranger creates x{x} on {}", p(provider))?;
                if let Some(image) = image {
                    write!(f, "{image}")?;
                }
                match forge {
                    Forge::None => write!(f, ", unlabelled"),
                    Forge::Of(s) => write!(f, ", with s{s}'s labels"),
                }
            }
            Op::Claim { s, x } => write!(f, "s{s} claims x{x}"),
            Op::Removes { s, x, proxy } => write!(
                f,
                "s{s}'s program removes x{x} itself{}",
                if proxy {
                    " through the proxy"
                } else {
                    ", not through the proxy"
                }
            ),
            Op::Reuse { x } => write!(f, "a stranger makes another x{x} (the name taken again)"),
            Op::Vanish { x } => write!(f, "the provider removes x{x} by itself"),
            Op::Refused { s, x, answer } => write!(
                f,
                "s{s}'s program asks the proxy to remove x{x}, and the provider refuses \
                 ({answer:?})"
            ),
            Op::Release { s, x } => write!(f, "s{s} releases x{x}"),
            Op::Detach { s, x } => write!(f, "s{s} detaches x{x}"),
            Op::Stop { x, cut } => match cut {
                Cut::Full => write!(f, "sandguard stop x{x}"),
                Cut::Prefix(n) => write!(f, "sandguard stop {:?} (prefix of x{x})", prefix(x, n)),
                Cut::Empty => write!(f, "sandguard stop \"\""),
            },
            Op::StopAll { s } => write!(f, "sandguard stop --all --session s{s}"),
            Op::Kill { s, how } => write!(f, "s{s}'s owner dies ({how:?})"),
            Op::SidecarDies { s } => write!(f, "s{s}'s sidecar dies (SIGKILL)"),
            Op::Sweep { prune, crash } => {
                match prune {
                    false => write!(f, "sandguard sweep")?,
                    true => write!(f, "sandguard sweep --every (a pass, then pruning)")?,
                }
                match crash {
                    Some(c) => write!(f, ", {c}"),
                    None => Ok(()),
                }
            }
            Op::FleetSweep { here, after_lease } => write!(
                f,
                "sandguard sweep --fleet on {} host{}",
                if here { "this" } else { "another" },
                if after_lease {
                    ", once dead sidecars' leases ran out"
                } else {
                    ""
                }
            ),
            Op::Prune => write!(f, "the sweep service prunes the ledger"),
            Op::Fault { provider, fault } => write!(f, "{} fault: {fault:?}", p(provider)),
            Op::Heal => write!(f, "every provider heals"),
            Op::Pause => write!(f, "time passes: the keepers run"),
        }
    }
}

/// What `stop` is given for a prefix cut of `x`'s id.
pub(super) fn prefix(x: usize, n: usize) -> String {
    box_id(x).chars().take(n.max(1)).collect()
}
