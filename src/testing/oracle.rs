//! The one oracle of the ownership rules: DESIGN's trust rules ("Concepts", "Trust rules", "Sweep", "Many machines")
//! over a small abstract state, written from the rules and not from the code. Both model tests
//! ask it: the in-process one (`src/model`, thousands of histories against the fake
//! provider) and the one through the real binary (`tests/reclaim/model.rs`, the real Docker
//! daemon and the E2B emulator); the unit tests of the judgement (`src/ownership/tests.rs`)
//! check the code's branches one at a time, not against it.
//!
//! The state is who lives (each session's owner and sidecar) and, for each sandbox, what
//! makes it someone's: the session whose labels its creator set, the claims the rules let
//! stand, and whether it was detached. From that the oracle answers two questions:
//! - [`Oracle::may_remove`]: may *any* sidecar or sweep remove it now? Only when it is owned
//!   (labels or an allowed claim), not detached, and an owner is proven dead.
//! - [`Oracle::must_be_gone`]: must a sweep against healthy providers have removed it? When
//!   every owner a sweep can know of (labels, claims the sidecar journaled) is dead and it
//!   is not detached.
//!
//! Rules as the oracle reads them (each a decision; where DESIGN is ambiguous, the reading
//! that can never blame correct code):
//! - **Labels decide.** A sandbox carrying session S's labels is S's, whoever created it (a
//!   stranger who copies S's labels hands it to S: sandguard cannot tell, and DESIGN says a
//!   session owns whatever carries its label). An unlabelled sandbox is nobody's.
//! - **A claim adopts, it never steals.** A claim by S stands when the sandbox carries no
//!   live session's label but S's own, and no other live session's confirmed claim (one its
//!   sidecar journaled) stands on it.
//!   A claim that does not stand gives S nothing: removing the sandbox for S's death is a
//!   theft. The proxy's claim of what it just created always stands.
//! - **Detach wins everywhere**: `sandguard.detached=true` set by the creator, or the owner's
//!   confirmed `detach`, makes it removable by nothing but an explicit `stop ID` (a user
//!   naming one sandbox) or its TTL (not modelled). A detach by a session that does not own
//!   the sandbox changes nothing. Detaching is final: the generator never has the owner
//!   claim or release what it detached, which DESIGN leaves open (today a later claim
//!   undoes the detach in the sidecar, and a release undoes it in the ledger).
//! - **Unknown is not dead**; **proof of life beats a lease**: a sweep on this host sees
//!   every owner of the model (real processes here), so a live owner's sandboxes are never
//!   removable here, whatever its lease. A fleet sweep on *another* host cannot see the
//!   owner: there, a session whose sidecar died (its lease runs out) may be reclaimed.
//! - **A released claim is forgotten**: the sandbox is then owned by its labels only.
//! - **Ownership before age**: a sandbox whose `sandguard.expires` has passed may be removed
//!   by a sweep or `stop --all`, detached or not, but only when that expiry came with a
//!   session label that counts ([`Sandbox::expired`]); one a stranger's sandbox inherited from
//!   an image ends nothing.
//! - **A limit removes only what its session owns**: a live session with a limit that removes
//!   (a lifetime, a spend that reclaims) may have its keeper remove, while it lives, what it
//!   owns and did not detach ([`Oracle::keeper_takes`]); never what another session detached,
//!   though it claimed it later.
//! - `stop ID` removes the managed sandbox (one carrying a session label) the id names, or
//!   that a unique prefix names, detached or not (the user named it); an empty id names
//!   nothing (DESIGN says of claimed ids "never empty"; the oracle holds `stop` to it too:
//!   `stop ""` from an unset shell variable must not remove the only sandbox there is). `stop --all
//!   --session S` removes S's labelled sandboxes that are not detached.

use std::collections::{BTreeMap, BTreeSet};

/// Why the oracle says a sandbox may not be removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Kept {
    #[error("the model never made it")]
    NeverMade,
    #[error("it carries sandguard.detached=true (only its TTL ends it)")]
    DetachedLabel,
    #[error("its owner detached it (only its TTL ends it)")]
    Detached,
    #[error("no session owns it (no label of ours, no claim that stands)")]
    Unowned,
    /// Its owners, as `s1, s2`, all alive.
    #[error("its owners {0} live")]
    OwnersLive(String),
}

#[derive(Debug, Clone)]
pub struct Session {
    pub owner_alive: bool,
    pub sidecar_alive: bool,
    /// It has a limit whose keeper removes what it owns while it lives.
    pub limited: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    /// The session whose labels its creator set.
    pub label: Option<usize>,
    /// `sandguard.detached=true`, set by its creator or carried from its image.
    pub detached_label: bool,
    /// `label` came from its image, not its creator (it counts: the box was made while that
    /// session lived). A fleet sweep on another host cannot date the session's end, so it
    /// never counts such a label: it is not required to remove the box.
    pub inherited: bool,
    /// Sessions whose claim stands (the rules allow it).
    pub claimed: BTreeSet<usize>,
    /// Of those, the ones the sidecar confirmed: a sweep can know them from the ledger.
    pub confirmed: BTreeSet<usize>,
    /// Claims the sidecar confirmed although the rules forbid them (thefts).
    pub stolen: BTreeSet<usize>,
    /// Detached by an owner's confirmed `detach`.
    pub detached: bool,
    /// It carries a `sandguard.expires` already past that counts: it came with the session
    /// label it carries (from its image), and that label counts.
    pub expired: bool,
    pub gone: bool,
}

impl Sandbox {
    pub fn is_detached(&self) -> bool {
        self.detached_label || self.detached
    }
}

#[derive(Debug, Clone, Default)]
pub struct Oracle {
    pub sessions: BTreeMap<usize, Session>,
    pub boxes: BTreeMap<usize, Sandbox>,
}

impl Oracle {
    pub fn start(&mut self, s: usize) {
        self.sessions.insert(
            s,
            Session {
                owner_alive: true,
                sidecar_alive: true,
                limited: false,
            },
        );
    }

    /// Session `s` has a limit whose keeper removes what it owns while it lives.
    pub fn limited(&mut self, s: usize) {
        if let Some(x) = self.sessions.get_mut(&s) {
            x.limited = true;
        }
    }

    /// `x` carries an expiry already past that counts (see [`Sandbox::expired`]).
    pub fn expired(&mut self, x: usize) {
        if let Some(b) = self.boxes.get_mut(&x) {
            b.expired = b.label.is_some();
        }
    }

    pub fn alive(&self, s: usize) -> bool {
        self.sessions.get(&s).is_some_and(|x| x.owner_alive)
    }

    pub fn create(&mut self, x: usize, label: Option<usize>, detached_label: bool) {
        self.boxes.insert(
            x,
            Sandbox {
                label,
                detached_label,
                ..Default::default()
            },
        );
    }

    /// `x` was removed by its program, or a stranger: gone.
    pub fn gone(&mut self, x: usize) {
        if let Some(b) = self.boxes.get_mut(&x) {
            b.gone = true;
        }
    }

    /// Whether a claim of `x` by `s` stands, by the rules.
    pub fn claim_stands(&self, s: usize, x: usize) -> bool {
        let Some(b) = self.boxes.get(&x) else {
            return false;
        };
        let foreign_label = b.label.is_some_and(|l| l != s && self.alive(l));
        // A claim its sidecar never journaled (it died writing it) is known to no path: it
        // cannot make another session's claim a theft.
        let foreign_claim = b.confirmed.iter().any(|&c| c != s && self.alive(c));
        !foreign_label && !foreign_claim
    }

    /// A claim of `x` by `s`; `confirmed`: the sidecar journaled it (not refused). A claim
    /// names the object `x` is when it is made, and nothing made later under its id (a
    /// `create` of `x` replaces the box: the new object holds no claim).
    pub fn claim(&mut self, s: usize, x: usize, confirmed: bool) {
        let stands = self.claim_stands(s, x);
        let dead: BTreeSet<usize> = self
            .boxes
            .get(&x)
            .map(|b| {
                b.claimed
                    .iter()
                    .copied()
                    .filter(|&c| !self.alive(c))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(b) = self.boxes.get_mut(&x) {
            if stands && confirmed {
                // Adopting takes it over: the dead sessions that had claimed it give it up
                // (their reclaim leaves it to the adopter).
                b.claimed.retain(|c| !dead.contains(c));
                b.confirmed.retain(|c| !dead.contains(c));
            }
            match (stands, confirmed) {
                (true, true) => {
                    b.claimed.insert(s);
                    b.confirmed.insert(s);
                }
                (true, false) => {
                    b.claimed.insert(s);
                }
                (false, true) => {
                    b.stolen.insert(s);
                }
                (false, false) => {}
            }
        }
    }

    pub fn release(&mut self, s: usize, x: usize) {
        if let Some(b) = self.boxes.get_mut(&x) {
            b.claimed.remove(&s);
            b.confirmed.remove(&s);
            b.stolen.remove(&s);
        }
    }

    /// A confirmed `detach` of `x` by `s`.
    pub fn detach(&mut self, s: usize, x: usize) {
        let owns = self.owners(x).contains(&s);
        if let Some(b) = self.boxes.get_mut(&x) {
            b.stolen.remove(&s);
            if owns {
                b.claimed.remove(&s);
                b.confirmed.remove(&s);
                b.detached = true;
            }
        }
    }

    pub fn owner_dies(&mut self, s: usize) {
        if let Some(x) = self.sessions.get_mut(&s) {
            x.owner_alive = false;
            x.sidecar_alive = false;
        }
    }

    /// A new sidecar guards session `s` again (its owner alive).
    pub fn restart(&mut self, s: usize) {
        if let Some(x) = self.sessions.get_mut(&s) {
            x.sidecar_alive = true;
        }
    }

    pub fn sidecar_dies(&mut self, s: usize) {
        if let Some(x) = self.sessions.get_mut(&s) {
            x.sidecar_alive = false;
        }
    }

    /// Every session that owns `x`: its label's, and every claim that stands.
    pub fn owners(&self, x: usize) -> BTreeSet<usize> {
        self.boxes.get(&x).map_or_else(BTreeSet::new, |b| {
            b.label
                .into_iter()
                .chain(b.claimed.iter().copied())
                .collect()
        })
    }

    /// Whether a sidecar or a sweep on this host may remove `x` now; why not, if not.
    pub fn may_remove(&self, x: usize) -> Result<(), Kept> {
        if self.boxes.get(&x).is_some_and(|b| b.expired) {
            return Ok(());
        }
        self.may_ever_remove(x)?;
        let owners = self.owners(x);
        if owners.iter().any(|&s| !self.alive(s)) || self.keeper_takes(x) {
            return Ok(());
        }
        Err(Kept::OwnersLive(names(&owners)))
    }

    /// Whether a live session's limit keeper may remove `x` now: it owns `x` (its label, or a
    /// claim that stands) and `x` is not detached, by anyone that owned it. Whether its
    /// sidecar still runs is not asked: one that died in the step may have removed it first.
    pub fn keeper_takes(&self, x: usize) -> bool {
        self.may_ever_remove(x).is_ok()
            && self.owners(x).iter().any(|s| {
                self.sessions
                    .get(s)
                    .is_some_and(|v| v.limited && v.owner_alive)
            })
    }

    /// Whether any path but a `stop` naming `x` may remove it at all, whoever lives: only
    /// when a session owns it (its label, or a claim that stands) and it is not detached; why
    /// not, if not. [`Oracle::may_remove`] adds when: once an owner is dead.
    pub fn may_ever_remove(&self, x: usize) -> Result<(), Kept> {
        let Some(b) = self.boxes.get(&x) else {
            return Err(Kept::NeverMade);
        };
        if b.detached_label {
            return Err(Kept::DetachedLabel);
        }
        if b.detached {
            return Err(Kept::Detached);
        }
        if self.owners(x).is_empty() {
            return Err(Kept::Unowned);
        }
        Ok(())
    }

    /// `x`'s label is one its image carried (see [`Sandbox::inherited`]).
    pub fn inherited(&mut self, x: usize) {
        if let Some(b) = self.boxes.get_mut(&x) {
            b.inherited = b.label.is_some();
        }
    }

    /// Whether a sweep against healthy providers must have removed `x`: why, if so. `remote`:
    /// a fleet sweep on another host, which leaves what only an inherited label makes a dead
    /// session's.
    pub fn must_be_gone(&self, x: usize, remote: bool) -> Option<String> {
        let b = self.boxes.get(&x)?;
        if b.gone || b.is_detached() || (remote && b.inherited && b.confirmed.is_empty()) {
            return None;
        }
        let known: BTreeSet<usize> = b
            .label
            .into_iter()
            .chain(b.confirmed.iter().copied())
            .collect();
        let all_dead = !known.is_empty() && known.iter().all(|&s| !self.alive(s));
        let no_live_claim = b.claimed.iter().all(|&s| !self.alive(s));
        (all_dead && no_live_claim).then(|| format!("its owners {} are dead", names(&known)))
    }

    /// Whether `stop` given `given` may remove `x`, whose id is `id`: a managed sandbox (one
    /// carrying a session label) whose id is `given` or starts with it; an empty id names
    /// nothing. Which one a prefix names depends on what the listing found (a provider that
    /// failed hides its sandboxes), so any it is a prefix of may go.
    pub fn stop_may_take(&self, given: &str, x: usize, id: &str) -> bool {
        !given.is_empty()
            && id.starts_with(given)
            && self.boxes.get(&x).is_some_and(|b| b.label.is_some())
    }

    /// Whether `stop --all --session S` may remove `x`.
    pub fn stop_all_takes(&self, s: usize, x: usize) -> bool {
        self.boxes
            .get(&x)
            .is_some_and(|b| b.label == Some(s) && !b.is_detached())
    }

    /// Whether a fleet sweep on another host may remove `x`, when the sessions `lapsed` have
    /// no fleet lease: from there the owner cannot be seen, so an owner whose lease ran out
    /// may be reclaimed (not what is detached).
    pub fn fleet_elsewhere_takes(&self, x: usize, lapsed: &BTreeSet<usize>) -> bool {
        self.boxes
            .get(&x)
            .is_some_and(|b| !b.is_detached() && self.owners(x).iter().any(|s| lapsed.contains(s)))
    }

    /// Whether a renewal of `x` now could be a live session's: an owner lives, or a session
    /// that took it with a claim the rules forbid (its keeper renews what it holds; that
    /// theft is the bug, and it is caught when the thief dies).
    pub fn renewable(&self, x: usize) -> bool {
        self.boxes.get(&x).is_some_and(|b| {
            self.owners(x)
                .iter()
                .chain(b.stolen.iter())
                .any(|&s| self.alive(s))
        })
    }

    /// Whether a session holding a forbidden claim on `x` lives.
    pub fn thief_lives(&self, x: usize) -> bool {
        self.boxes
            .get(&x)
            .is_some_and(|b| b.stolen.iter().any(|&s| self.alive(s)))
    }
}

fn names(sessions: &BTreeSet<usize>) -> String {
    sessions
        .iter()
        .map(|s| format!("s{s}"))
        .collect::<Vec<_>>()
        .join(", ")
}
