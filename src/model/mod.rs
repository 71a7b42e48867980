//! Random histories against a model of the trust rules (issue 22, part E).
//!
//! A history is a short list of operations ([`ops::Op`]: sessions start, programs and strangers
//! create sandboxes, claims, releases, detaches, `stop`, owner and sidecar deaths, sweeps, fleet
//! sweeps, pruning, provider faults). Each runs through the real code ([`world`]) and the same
//! step is told to a small oracle of DESIGN's rules ([`oracle`]). After every step:
//!
//! 1. **Nothing that is not its own is removed**: every sandbox that disappeared was one the
//!    oracle lets some path remove (before or after the step), or the one `stop` named.
//!    Detached sandboxes are never removable, so this also says "nothing detached is removed".
//! 2. **Nothing of a dead owner is left**: after a sweep (local, or `--fleet`) that ran while
//!    every provider was healthy, no sandbox whose every owner is dead is still there.
//! 3. **No renewal after a death, none of a detached sandbox**: no sandbox owned only by dead
//!    sessions is renewed after its owner's reclaim began (the first removal call after the
//!    death), and none made carrying `sandguard.detached=true` is ever renewed.
//! 4. **Final means done**: when a session's ledger state first reads final (`reclaimed`,
//!    `clean`), nothing it owns (and did not detach) is left on any provider.
//! 5. (with 1) **A name is not an identity**: a program may remove its own sandbox (through
//!    the proxy, which releases the claim, or not) and a stranger may make another one under
//!    the same id ([`ops::Op::Reuse`]: the fakes' ids are names, as Docker volumes' are); a
//!    claim names the object there when it was made, never the stranger's.
//! 6. **A crash never wedges**: a sidecar, a sweep, or a sidecar's start may die (or find its
//!    disk full) at any of its journal writes, its journal's creation included
//!    ([`ops::Crash`], `crate::ledger::faults`); `watch --session S` started again for a live
//!    owner then begins or resumes the session, and the next sweep finishes what the dead one
//!    left (promises 1 to 4 hold through it).
//!
//! Running it: `cargo test --lib model`. `SANDGUARD_MODEL_CASES=N` sets how many histories
//! (default [`DEFAULT_CASES`]), `SANDGUARD_MODEL_JOBS=J` how many run at once (default
//! [`DEFAULT_JOBS`]), `SANDGUARD_MODEL_SEED=S` replays the one history of seed `S`,
//! `SANDGUARD_MODEL_BASE=B` the whole run whose seeds came from base `B` (every run prints its
//! base first, so a run that hung or was killed replays too),
//! and `SANDGUARD_MODEL_KEEP_GOING=1` runs every case and reports one minimal history for each
//! way a rule broke ([`Violation::key`]: how the bugs on a branch are catalogued) instead of
//! stopping at the first. A failing history prints its seed and is shrunk (operations dropped
//! one at a time while it still breaks the same rule the same way); the minimal history is
//! printed. A default run takes about 10 s on a loaded 2-core machine.
//!
//! Decisions:
//! - **A seeded generator of our own** ([`ops::Rng`]), not `proptest`: histories need real
//!   processes and a runtime per case, and what we want from a framework (a printed seed,
//!   dropping operations) is a few lines here; no new dependency.
//! - **Seeds differ from run to run** (from the clock, printed first), so CI explores new
//!   histories each time; any failure prints the seed that replays it.
//! - **Real time, verdicts independent of the machine's speed** (see [`world`]): the short
//!   reclaim deadline applies only where a provider may be faulty (nothing is then asserted
//!   about what is left); a sweep against healthy providers has the model's whole patience,
//!   so a loaded CI machine cannot fail a correct history. A history takes about 100 ms, nearly all of it waiting (on
//!   a process's death, a settle delay, a lease), so histories run four at a time, and the
//!   default run is a few hundred histories; CI can raise `SANDGUARD_MODEL_CASES`.
//! - **Shrinking runs one history at a time**, after the exploration, and keeps only what still
//!   breaks the same rule the same way ([`Violation::key`]).
//! - **Images are the fake's too**: a create may use an image carrying any subset of a
//!   session's labels and `sandguard.detached=true` ([`ops::Image`]); the fake lists its
//!   sandboxes through the same inheritance rule as Docker's driver
//!   (`crate::labels::inherited`), so the rule is checked here for every provider that uses it.

mod calls;
mod check;
mod control;
mod deaths;
mod making;
mod ops;
mod world;

/// The one oracle of the ownership rules, shared with the integration tests' model.
use crate::testing::oracle;

use ops::Op;
/// The seeded PRNG, for other generated tests too.
pub(crate) use ops::Rng;
use oracle::Oracle;
use world::World;

/// Histories a default run makes.
pub(crate) const DEFAULT_CASES: usize = 500;
/// Histories run at once.
pub(crate) const DEFAULT_JOBS: usize = 4;
/// The most operations a history has (and the fewest, [`MIN_LEN`]).
const MAX_LEN: usize = 25;
const MIN_LEN: usize = 5;
/// Re-runs a shrink may make.
const SHRINK_RUNS: usize = 150;

/// Which promise a history broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Invariant {
    RemovedNotItsOwn,
    LeftBehind,
    RenewedAfterDeath,
    RenewedDetached,
    FinalTooSoon,
    /// A sidecar started again after a crash was refused for good (`world::WEDGED`).
    Wedged,
    /// A live session still claims what its provider said went by itself
    /// (`world::HELD_GONE`).
    HeldGone,
    /// A claim was released on a removal the provider refused (`world::UNCONFIRMED`).
    Unconfirmed,
    /// The code did not do what the step needs within its patience (a hang, a panic).
    Stuck,
}

#[derive(Debug, Clone)]
struct Violation {
    invariant: Invariant,
    step: usize,
    message: String,
    /// What tells one bug from another: the invariant, the kind of step, and the rule's
    /// reason without names (a shrink keeps it, so it cannot drift to another bug).
    key: String,
}

/// Runs one history; the first violation, if any.
fn run(history: &[Op]) -> Option<Violation> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the model");
    runtime.block_on(async {
        let mut world = World::new();
        let found = steps(&mut world, history).await;
        world.shutdown().await;
        found
    })
}

async fn steps(world: &mut World, history: &[Op]) -> Option<Violation> {
    let mut o = Oracle::default();
    let mut checks = check::Checks::default();
    for (step, op) in history.iter().enumerate() {
        let before = o.clone();
        let seen = check::Before::of(world);
        let found = match apply(world, *op, &mut o).await {
            Err(e) if e.starts_with(world::WEDGED) => Some((Invariant::Wedged, e)),
            Err(e) if e.starts_with(world::HELD_GONE) => Some((Invariant::HeldGone, e)),
            Err(e) if e.starts_with(world::UNCONFIRMED) => Some((Invariant::Unconfirmed, e)),
            Err(e) => Some((Invariant::Stuck, e)),
            Ok(()) => checks.after(world, *op, &before, &mut o, &seen),
        };
        if let Some((invariant, message)) = found {
            return Some(Violation::new(invariant, step, *op, message));
        }
    }
    None
}

impl Violation {
    fn new(invariant: Invariant, step: usize, op: Op, message: String) -> Violation {
        let reason: String = match invariant {
            Invariant::RemovedNotItsOwn => message
                .split_once(", but ")
                .map_or("", |(_, why)| why)
                .chars()
                .filter(|c| !c.is_ascii_digit())
                .collect(),
            _ => String::new(),
        };
        let kind = format!("{op:?}");
        let kind = kind.split([' ', '{']).next().unwrap_or_default();
        Violation {
            invariant,
            step,
            key: format!("{invariant:?} at {kind}: {reason}"),
            message,
        }
    }
}

async fn apply(world: &mut World, op: Op, o: &mut Oracle) -> Result<(), String> {
    match op {
        Op::Start {
            s,
            crash,
            wrapper,
            limit,
        } => world.start(s, (crash, wrapper, limit), o).await?,
        Op::Restart { s } => world.restart(s, o).await?,
        Op::CrashAt { s, after } => world.crash_at(s, after),
        Op::Create {
            s,
            x,
            provider,
            how,
            image,
        } => world.create(s, x, provider, how, image, o).await?,
        Op::Stranger {
            x,
            provider,
            forge,
            image,
        } => world.stranger(x, provider, forge, image, o).await,
        Op::Claim { s, x } => world.claim(s, x, o).await?,
        Op::Removes { s, x, proxy } => world.removes(s, x, proxy, o).await,
        Op::Reuse { x } => world.reuse(x, o),
        Op::Vanish { x } => world.vanish(x, o).await?,
        Op::Refused { s, x, answer } => world.refused(s, x, answer, o).await?,
        Op::Pause => tokio::time::sleep(world::PAUSE).await,
        Op::Release { s, x } => world.release(s, x, o).await?,
        Op::Detach { s, x } => world.detach(s, x, o).await?,
        Op::Stop { x, cut } => world.stop(x, cut).await,
        Op::StopAll { s } => world.stop_all(s).await,
        Op::Kill { s, how } => world.kill(s, how, o).await?,
        Op::SidecarDies { s } => world.sidecar_dies(s, o).await,
        Op::Sweep { prune, crash } => world.sweep(None, prune, crash).await?,
        Op::FleetSweep { here, after_lease } => {
            world.sweep(Some((here, after_lease)), false, None).await?;
        }
        Op::Prune => world.prune().await,
        Op::Fault { provider, fault } => world.fault(provider, fault),
        Op::Heal => world.heal(),
    }
    world.reap(o).await;
    Ok(())
}

/// Drops operations while the history still breaks the same rule the same way; the smallest
/// history found.
fn shrink(mut history: Vec<Op>, mut found: Violation) -> (Vec<Op>, Violation) {
    // The same bug: the same invariant broken the same way.
    history.truncate(found.step + 1);
    let mut runs = 0;
    let mut progress = true;
    while progress && runs < SHRINK_RUNS {
        progress = false;
        let mut i = history.len();
        while i > 0 && runs < SHRINK_RUNS {
            i -= 1;
            let mut shorter = history.clone();
            shorter.remove(i);
            runs += 1;
            if let Some(v) = run(&shorter).filter(|v| v.key == found.key) {
                shorter.truncate(v.step + 1);
                i = i.min(shorter.len());
                history = shorter;
                found = v;
                progress = true;
            }
        }
    }
    (history, found)
}

fn report(seed: u64, history: &[Op], v: &Violation) -> String {
    let mut text = format!(
        "seed {seed} (replay: SANDGUARD_MODEL_SEED={seed} cargo test --lib model) breaks {:?}:\n  {}\n  [{}]\n  minimal history:\n",
        v.invariant, v.message, v.key
    );
    for (i, op) in history.iter().enumerate() {
        text.push_str(&format!("    {i:>2}. {op}\n"));
    }
    text
}

fn history_of(seed: u64) -> Vec<Op> {
    let len = MIN_LEN + (ops::Rng::new(seed ^ 0x5eed).below(MAX_LEN - MIN_LEN + 1));
    ops::generate(seed, len)
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs every seed's history on `jobs` threads (each with its own runtime and world: the
/// histories wait on processes and timers far more than they compute); the first failure of
/// each kind, with its seed and history. Without `keep_going`, the threads stop at the first.
fn explore(seeds: &[u64], jobs: usize, keep_going: bool) -> Vec<(u64, Vec<Op>, Violation)> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let found: Mutex<Vec<(u64, Vec<Op>, Violation)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                while !stop.load(Ordering::SeqCst) {
                    let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::SeqCst)) else {
                        return;
                    };
                    let history = history_of(seed);
                    let Some(v) = run(&history) else { continue };
                    let mut found = found
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if !found.iter().any(|(_, _, w)| w.key == v.key) {
                        found.push((seed, history, v));
                    }
                    if !keep_going {
                        stop.store(true, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    found
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn random_histories_keep_the_trust_rules() {
    let seeds: Vec<u64> = match env("SANDGUARD_MODEL_SEED") {
        Some(seed) => vec![seed],
        None => {
            let cases = env("SANDGUARD_MODEL_CASES").map_or(DEFAULT_CASES, |n| n as usize);
            let base = env("SANDGUARD_MODEL_BASE").unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
            // Printed first, so that a run that hangs or is killed can be replayed whole.
            eprintln!(
                "model: seeds from base {base} (replay this run: SANDGUARD_MODEL_BASE={base} \
                 SANDGUARD_MODEL_CASES={cases} cargo test --lib model)"
            );
            let mut rng = ops::Rng::new(base);
            (0..cases).map(|_| rng.next() % 1_000_000_000).collect()
        }
    };
    let keep_going = env("SANDGUARD_MODEL_KEEP_GOING") == Some(1);
    let jobs = env("SANDGUARD_MODEL_JOBS").map_or(DEFAULT_JOBS, |n| n as usize);
    let started = std::time::Instant::now();
    eprintln!("model: {} histories, {jobs} at a time", seeds.len());
    let mut texts = Vec::new();
    for (seed, history, v) in explore(&seeds, jobs, keep_going) {
        let (minimal, v) = shrink(history, v);
        let text = report(seed, &minimal, &v);
        eprintln!("{text}");
        texts.push(text);
    }
    eprintln!("model: done in {:?}", started.elapsed());
    assert!(texts.is_empty(), "{}", texts.join("\n"));
}
