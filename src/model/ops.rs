//! The operations of a history, and the seeded generator that makes them.
//!
//! Decisions:
//! - **Names, not positions.** An operation names its session by the order of `start`s
//!   (`s0`, `s1`, …) and its sandbox by the order of creation (`x0`, `x1`, …), both fixed
//!   when the history is generated. Shrinking drops operations; an operation whose session or
//!   sandbox no longer exists, or whose precondition no longer holds (a claim by a session
//!   whose sidecar is gone), is skipped when it runs ([`crate::model::world`]), so every
//!   sub-history still runs.
//! - **A small PRNG of our own** (SplitMix64): no dependency, and a seed printed as one
//!   number replays the same history on any machine.
//! - The generator keeps a sketch of who lives (owners, sidecars) only to pick plausible
//!   operations; the oracle ([`super::oracle`]) is what judges them.

use std::fmt;

/// SplitMix64: small, fast, and good enough to pick operations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}

/// How the program makes a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Make {
    /// Stamped with the session's labels (`sandguard.detached=true` too, when `detached`).
    Labelled { detached: bool },
    /// Through the sidecar's proxy: stamped and claimed (the claim acknowledged first).
    Proxy { detached: bool },
    /// Without labels, then claimed with a `claim` line.
    ThenClaimed,
}

/// What labels a stranger's sandbox carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forge {
    None,
    /// A copy of session `s`'s labels (live or dead, as it was when generated).
    Of(usize),
}

/// How an owner dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Death {
    /// It exits by itself (its stdin closes).
    Exit,
    Sigkill,
    /// SIGTERM to the owner and, at the same moment, a stop request to its sidecar (what
    /// `kill -TERM -PGID` or `systemctl stop` does).
    GroupTerm,
}

/// How `stop ID` names its sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    Full,
    /// The first `n` characters of the id.
    Prefix(usize),
    Empty,
}

/// A provider fault, switched on until `heal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
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
pub enum Op {
    /// A new session `s`: a real owner process and its sidecar.
    Start {
        s: usize,
    },
    Create {
        s: usize,
        x: usize,
        provider: usize,
        how: Make,
    },
    Stranger {
        x: usize,
        provider: usize,
        forge: Forge,
    },
    Claim {
        s: usize,
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
}

/// The providers of every history: `fake` (with a server-side TTL) and `fake2`.
pub const PROVIDERS: [&str; 2] = ["fake", "fake2"];

/// The id of sandbox number `x`.
pub fn box_id(x: usize) -> String {
    format!("x{x}")
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |i: usize| PROVIDERS[i % PROVIDERS.len()];
        match *self {
            Op::Start { s } => write!(f, "start session s{s}"),
            Op::Create {
                s,
                x,
                provider,
                how,
            } => {
                write!(f, "s{s}'s program creates x{x} on {} ", p(provider))?;
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
            Op::Stranger { x, provider, forge } => match forge {
                Forge::None => write!(f, "a stranger creates x{x} on {} unlabelled", p(provider)),
                Forge::Of(s) => write!(
                    f,
                    "a stranger creates x{x} on {} with s{s}'s labels",
                    p(provider)
                ),
            },
            Op::Claim { s, x } => write!(f, "s{s} claims x{x}"),
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
            Op::Sweep { prune: false } => write!(f, "sandguard sweep"),
            Op::Sweep { prune: true } => {
                write!(f, "sandguard sweep --every (a pass, then pruning)")
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
        }
    }
}

/// What `stop` is given for a prefix cut of `x`'s id.
pub fn prefix(x: usize, n: usize) -> String {
    box_id(x).chars().take(n.max(1)).collect()
}

/// The generator's sketch of a session.
#[derive(Clone, Copy)]
struct Sketch {
    owner: bool,
    sidecar: bool,
}

/// A random history of `len` operations from `seed`.
pub fn generate(seed: u64, len: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut sessions: Vec<Sketch> = Vec::new();
    let mut boxes = 0usize;
    // Each sandbox's maker, when a session's program made it (detaches and releases mostly
    // name the session's own).
    let mut makers: Vec<Option<usize>> = Vec::new();
    // What each session detached: it never claims nor releases those again (DESIGN leaves
    // open whether that undoes the detach).
    let mut detached: Vec<(usize, usize)> = Vec::new();
    let mut ops = vec![Op::Start { s: 0 }];
    sessions.push(Sketch {
        owner: true,
        sidecar: true,
    });
    while ops.len() < len {
        let live: Vec<usize> = (0..sessions.len()).filter(|&s| sessions[s].owner).collect();
        let guarded: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&s| sessions[s].sidecar)
            .collect();
        let op = match rng.below(24) {
            0 | 1 if sessions.len() < 3 => Op::Start { s: sessions.len() },
            2..=6 if !live.is_empty() => {
                let s = rng.pick(&live);
                let how = match rng.below(5) {
                    0 | 1 => Make::Labelled {
                        detached: rng.chance(25),
                    },
                    2 | 3 if sessions[s].sidecar => Make::Proxy {
                        detached: rng.chance(25),
                    },
                    _ if sessions[s].sidecar => Make::ThenClaimed,
                    _ => Make::Labelled { detached: false },
                };
                boxes += 1;
                makers.push(Some(s));
                Op::Create {
                    s,
                    x: boxes - 1,
                    provider: rng.below(2),
                    how,
                }
            }
            7 | 8 => {
                let forge = if rng.chance(50) {
                    Forge::None
                } else {
                    Forge::Of(rng.below(sessions.len()))
                };
                boxes += 1;
                makers.push(None);
                Op::Stranger {
                    x: boxes - 1,
                    provider: rng.below(2),
                    forge,
                }
            }
            9 | 10 if !guarded.is_empty() && boxes > 0 => {
                let (s, x) = (rng.pick(&guarded), rng.below(boxes));
                if detached.contains(&(s, x)) {
                    continue;
                }
                Op::Claim { s, x }
            }
            11 | 12 if !guarded.is_empty() && boxes > 0 => {
                let s = rng.pick(&guarded);
                let own: Vec<usize> = (0..boxes).filter(|&x| makers[x] == Some(s)).collect();
                let x = if !own.is_empty() && rng.chance(75) {
                    rng.pick(&own)
                } else {
                    rng.below(boxes)
                };
                if detached.contains(&(s, x)) {
                    continue;
                }
                if rng.chance(65) {
                    detached.push((s, x));
                    Op::Detach { s, x }
                } else {
                    Op::Release { s, x }
                }
            }
            13 if boxes > 0 => {
                let x = rng.below(boxes);
                let cut = match rng.below(4) {
                    0 | 1 => Cut::Full,
                    2 => Cut::Prefix(1 + rng.below(2)),
                    _ => Cut::Empty,
                };
                if rng.chance(50) {
                    Op::Stop { x, cut }
                } else {
                    Op::StopAll {
                        s: rng.below(sessions.len()),
                    }
                }
            }
            14 | 15 if !live.is_empty() => {
                let s = rng.pick(&live);
                sessions[s].owner = false;
                sessions[s].sidecar = false;
                let how = rng.pick(&[Death::Exit, Death::Sigkill, Death::GroupTerm]);
                Op::Kill { s, how }
            }
            16 if !guarded.is_empty() => {
                let s = rng.pick(&guarded);
                sessions[s].sidecar = false;
                Op::SidecarDies { s }
            }
            17..=19 => Op::Sweep {
                prune: rng.chance(40),
            },
            20 => Op::FleetSweep {
                here: rng.chance(60),
                after_lease: rng.chance(70),
            },
            21 => Op::Prune,
            22 => Op::Heal,
            23 => {
                // A 429 teaches the pace a rate: the next calls wait up to a second, so it
                // is the rarest fault (the model runs in real time).
                let fault = match rng.below(9) {
                    0..=2 => Fault::Remove5xx(rng.pick(&[2, 1000])),
                    3 => Fault::Remove429(rng.pick(&[1, 2])),
                    4..=6 => Fault::ListFails(rng.pick(&[1, 1000])),
                    _ => Fault::Slow(rng.pick(&[2, 20])),
                };
                Op::Fault {
                    provider: rng.below(2),
                    fault,
                }
            }
            _ => continue,
        };
        if let Op::Start { .. } = op {
            sessions.push(Sketch {
                owner: true,
                sidecar: true,
            });
        }
        ops.push(op);
    }
    ops
}
