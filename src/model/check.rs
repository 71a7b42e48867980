//! The checks after every step ([`super`] lists the four promises), each against the oracle
//! as it was before the step and as it is after.
//!
//! Decisions:
//! - **Removals are judged by what disappeared** from the providers during the step, whoever
//!   removed it, including what the step made and removed within itself (a limit's keeper
//!   runs every few milliseconds): a removal is allowed when the oracle allowed it before
//!   the step or after it (a death in the step makes removal allowed; a claim may make it
//!   forbidden), or when it is what the step's `stop` named.
//! - **"Left behind" only after a sweep that ran against healthy providers** (no fault on at
//!   the start or at the end of the step): a faulty provider may leave work pending.
//! - **Renewals are judged against the start of the dead owner's reclaim** (its first removal
//!   call after the death), not the death: a keeper round already under way when the owner
//!   dies may finish; none may start once the reclaim has begun. A renewal counts against the
//!   object its call was pinned to: a live claimer of an object a stranger's reuse replaced
//!   may go on renewing the gone one (the provider answers "not found"), and that is no
//!   renewal of the new object's dead owner's (seed 782593264 counted it as one).
//! - **No renewal of what an owner detached**, once its `detach` was confirmed: not by the
//!   session that detached it, nor by a session that claimed it after (a keeper is told the
//!   ledger's facts, as every judge is). Timed from the end of the detaching step, against
//!   the object detached (a reuse makes a new one).
//! - **"Final" is checked when a session first reads final**, against what it owned then.

use std::collections::BTreeSet;

use super::ops::{self, box_id, Op};
use super::oracle::Oracle;
use super::world::World;
use super::Invariant;

/// What the providers held before a step.
pub(super) struct Before {
    ids: BTreeSet<String>,
    healthy: bool,
    lapsed: BTreeSet<usize>,
}

impl Before {
    pub(super) fn of(world: &World) -> Before {
        Before {
            ids: world.ids(),
            healthy: world.healthy(),
            lapsed: world.lapsed(),
        }
    }
}

/// What the checks remember from step to step.
#[derive(Default)]
pub(super) struct Checks {
    /// Sessions already seen final.
    finals: BTreeSet<usize>,
    /// Renewals already judged.
    renewals_seen: usize,
    /// When each object (sandbox number, identity) was seen detached by an owner: the end
    /// of the step that detached it.
    detached_at: std::collections::BTreeMap<(usize, String), tokio::time::Instant>,
}

type Found = Option<(Invariant, String)>;

impl Checks {
    /// Every check after step `op`; the first broken promise, if any.
    pub(super) fn after(
        &mut self,
        world: &World,
        op: Op,
        before: &Oracle,
        o: &mut Oracle,
        seen: &Before,
    ) -> Found {
        self.detaches(world, before, o);
        removals(world, op, before, o, seen)
            .or_else(|| left_behind(world, op, o, seen))
            .or_else(|| self.renewals(world, before, o))
            .or_else(|| self.finals(world, o))
    }

    /// Notes the objects an owner's `detach` detached in this step.
    fn detaches(&mut self, world: &World, before: &Oracle, o: &Oracle) {
        let now = tokio::time::Instant::now();
        for (&x, b) in &o.boxes {
            let was = before.boxes.get(&x).is_some_and(|w| w.detached);
            if b.detached && !was {
                let identity = world.latest.get(&x).cloned().unwrap_or_default();
                self.detached_at.entry((x, identity)).or_insert(now);
            }
        }
    }

    fn renewals(&mut self, world: &World, before: &Oracle, o: &Oracle) -> Found {
        let renewals = world.fakes[0]
            .renewals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let new = renewals.iter().skip(self.renewals_seen);
        self.renewals_seen = renewals.len();
        for (id, identity, at) in new {
            let Some(x) = number(id) else { continue };
            // A renewal pinned to an earlier object under the same id (one a stranger's reuse
            // replaced) renews what the oracle no longer follows: that object was gone before
            // this one was made, and its claimers are not this one's owners.
            if identity
                .as_ref()
                .is_some_and(|i| world.latest.get(&x) != Some(i))
            {
                continue;
            }
            // Made carrying `sandguard.detached=true`: no keeper ever renews it, whoever
            // claims it (a `detach` command's renewal already in flight is judged as a death's).
            if o.boxes.get(&x).is_some_and(|b| b.detached_label) {
                return Some((
                    Invariant::RenewedDetached,
                    format!("{id} was renewed, but it carries sandguard.detached=true"),
                ));
            }
            // Detached by an owner's confirmed `detach`: nobody's keeper renews it after.
            let object = identity
                .clone()
                .or_else(|| world.latest.get(&x).cloned())
                .unwrap_or_default();
            if let Some(t) = self.detached_at.get(&(x, object)).filter(|t| at > *t) {
                return Some((
                    Invariant::RenewedDetached,
                    format!(
                        "{id} was renewed {:?} after its owner detached it",
                        at.duration_since(*t)
                    ),
                ));
            }
            // The renewal is after the death only if it came after the last of its owners'
            // reclaims began (an owner that died in this step may have renewed it before).
            let owners = o.owners(x);
            let began = owners
                .iter()
                .map(|s| world.reclaim_began.get(s).copied())
                .collect::<Option<Vec<_>>>()
                .and_then(|b| b.into_iter().max());
            // A thief's keeper renews what it holds until the step that ended its claim.
            let renewable = o.renewable(x) || before.thief_lives(x);
            if let Some(began) = began.filter(|b| !renewable && at > b) {
                return Some((
                    Invariant::RenewedAfterDeath,
                    format!(
                        "{id} was renewed {:?} after its dead owner's reclaim began",
                        at.duration_since(began)
                    ),
                ));
            }
        }
        None
    }

    fn finals(&mut self, world: &World, o: &Oracle) -> Found {
        for (s, state) in world.ledger_states() {
            if !state.is_final() || !self.finals.insert(s) {
                continue;
            }
            let left = o.boxes.iter().find(|(&x, b)| {
                !b.gone
                    && !b.is_detached()
                    && (b.label == Some(s) || b.confirmed.contains(&s))
                    && o.owners(x).contains(&s)
            });
            if let Some((&x, _)) = left {
                return Some((
                    Invariant::FinalTooSoon,
                    format!(
                        "s{s} reads {} while its {} is still there",
                        state.as_str(),
                        box_id(x)
                    ),
                ));
            }
        }
        None
    }
}

/// Sandbox number `x` from its id `x{n}`.
fn number(id: &str) -> Option<usize> {
    id.strip_prefix('x').and_then(|n| n.parse().ok())
}

/// Every sandbox that disappeared in the step was the oracle's to remove; marks it gone.
fn removals(world: &World, op: Op, before: &Oracle, o: &mut Oracle, seen: &Before) -> Found {
    let now = world.ids();
    let mut lapsed = seen.lapsed.clone();
    lapsed.extend(world.lapsed());
    // What was there before the step, and what the step made (a limit's keeper may remove
    // a sandbox within the step that created it).
    let made: BTreeSet<String> = o
        .boxes
        .iter()
        .filter(|(_, b)| !b.gone)
        .map(|(&x, _)| box_id(x))
        .collect();
    let candidates: BTreeSet<&String> = seen.ids.union(&made).collect();
    for id in candidates.into_iter().filter(|id| !now.contains(*id)) {
        let Some(x) = number(id) else { continue };
        if let Err(why) = removable(before, o, op, x, &lapsed) {
            return Some((
                Invariant::RemovedNotItsOwn,
                format!("{id} was removed, but {why}"),
            ));
        }
        if let Some(b) = o.boxes.get_mut(&x) {
            b.gone = true;
        }
    }
    None
}

/// After a sweep against healthy providers, nothing whose every owner is dead is left.
fn left_behind(world: &World, op: Op, o: &Oracle, seen: &Before) -> Found {
    // A sweep that crashed among its writes leaves its work to the next one.
    let swept = matches!(op, Op::Sweep { crash: None, .. } | Op::FleetSweep { .. });
    if !(swept && seen.healthy && world.healthy()) {
        return None;
    }
    let remote = matches!(op, Op::FleetSweep { here: false, .. });
    let (x, why) = o
        .boxes
        .keys()
        .find_map(|&x| Some((x, o.must_be_gone(x, remote)?)))?;
    Some((
        Invariant::LeftBehind,
        format!(
            "{} is still there after a sweep against healthy providers, and {why}",
            box_id(x)
        ),
    ))
}

/// Whether `x`'s disappearance in step `op` is allowed; why not, if not.
/// `lapsed`: the sessions whose fleet lease had run out before or after the step.
pub(super) fn removable(
    before: &Oracle,
    after: &Oracle,
    op: Op,
    x: usize,
    lapsed: &BTreeSet<usize>,
) -> Result<(), String> {
    let named = match op {
        Op::Stop { x: named, cut } => {
            let given = match cut {
                ops::Cut::Full => box_id(named),
                ops::Cut::Prefix(n) => ops::prefix(named, n),
                ops::Cut::Empty => String::new(),
            };
            before.stop_may_take(&given, x, &box_id(x))
        }
        Op::StopAll { s } => before.stop_all_takes(s, x),
        Op::Removes { x: named, .. } | Op::Vanish { x: named } => named == x,
        Op::FleetSweep { here: false, .. } => before.fleet_elsewhere_takes(x, lapsed),
        _ => false,
    };
    if named {
        return Ok(());
    }
    before
        .may_remove(x)
        .or_else(|_| after.may_remove(x))
        .map_err(|why| match op {
            Op::Stop { .. } | Op::StopAll { .. } => format!("{why}, and `stop` did not name it"),
            _ => why.to_string(),
        })
}
