//! The seeded generator of histories: [`generate`], drawing from the one PRNG of the test
//! suites ([`Rng`], `crate::testing::rng`: a seed printed as one number replays the same
//! history on any machine).
//!
//! Decisions:
//! - The generator keeps a sketch of who lives (owners, sidecars) only to pick plausible
//!   operations; the oracle (`crate::testing::oracle`) is what judges them.
//! - **Claims go where the keepers' judgement is tested**: half of them name a sandbox some
//!   other session claimed or detached, and, where a session with a limit runs, half are
//!   that session's; so a keeper running while its owner lives often holds what another
//!   session detached or claimed (a keeper told less than the ledger's facts removed or
//!   renewed such sandboxes, issue 55).

use super::*;

/// The generator's sketch of a session.
#[derive(Clone, Copy)]
struct Sketch {
    owner: bool,
    sidecar: bool,
    /// Started with a limit whose keeper removes while the owner lives.
    limited: bool,
}

/// A random history of `len` operations from `seed`.
pub(crate) fn generate(seed: u64, len: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut sessions: Vec<Sketch> = Vec::new();
    let mut boxes = 0usize;
    // Each sandbox's maker, when a session's program made it (detaches and releases mostly
    // name the session's own).
    let mut makers: Vec<Option<usize>> = Vec::new();
    // What each session detached: it never claims nor releases those again (DESIGN leaves
    // open whether that undoes the detach).
    let mut detached: Vec<(usize, usize)> = Vec::new();
    // Each claim made: (session, sandbox).
    let mut claimed: Vec<(usize, usize)> = Vec::new();
    let first = limit(&mut rng);
    let mut ops = vec![Op::Start {
        s: 0,
        crash: None,
        wrapper: false,
        limit: first,
    }];
    sessions.push(Sketch {
        owner: true,
        sidecar: true,
        limited: first.is_some(),
    });
    while ops.len() < len {
        let live: Vec<usize> = (0..sessions.len()).filter(|&s| sessions[s].owner).collect();
        let guarded: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&s| sessions[s].sidecar)
            .collect();
        let op = match rng.below(29) {
            0 | 1 if sessions.len() < 3 => {
                let crash = crash(&mut rng, 20);
                // A crashed start may leave the owner unguarded: the sketch says so, so that
                // restarts are generated (the world knows whether the sidecar runs).
                let limit = limit(&mut rng);
                sessions.push(Sketch {
                    owner: true,
                    sidecar: crash.is_none(),
                    limited: limit.is_some(),
                });
                ops.push(Op::Start {
                    s: sessions.len() - 1,
                    crash,
                    wrapper: rng.chance(30),
                    limit,
                });
                continue;
            }
            // Mostly of a session whose sidecar is gone; else a no-op the world skips.
            24 if !live.is_empty() => {
                let gone: Vec<usize> = live
                    .iter()
                    .copied()
                    .filter(|&s| !sessions[s].sidecar)
                    .collect();
                let s = if gone.is_empty() || rng.chance(20) {
                    rng.pick(&live)
                } else {
                    rng.pick(&gone)
                };
                sessions[s].sidecar = true;
                Op::Restart { s }
            }
            // It may die at once, at a later claim, or in its reclaim: the sketch keeps it
            // alive (the world knows when it died).
            25 if !guarded.is_empty() => {
                let s = rng.pick(&guarded);
                Op::CrashAt {
                    s,
                    after: rng.below(6) as u8,
                }
            }
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
                if !matches!(how, Make::Labelled { .. }) {
                    claimed.push((s, boxes - 1));
                }
                Op::Create {
                    s,
                    x: boxes - 1,
                    provider: rng.below(2),
                    how,
                    image: image(&mut rng, sessions.len()),
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
                    image: image(&mut rng, sessions.len()),
                }
            }
            9 | 10 if !guarded.is_empty() && boxes > 0 => {
                let limited: Vec<usize> = guarded
                    .iter()
                    .copied()
                    .filter(|&s| sessions[s].limited)
                    .collect();
                let s = if !limited.is_empty() && rng.chance(50) {
                    rng.pick(&limited)
                } else {
                    rng.pick(&guarded)
                };
                let of_others = |held: &[(usize, usize)]| -> Vec<usize> {
                    held.iter()
                        .filter(|&&(by, _)| by != s)
                        .map(|&(_, x)| x)
                        .collect()
                };
                let (theirs_detached, theirs_claimed) = (of_others(&detached), of_others(&claimed));
                let x = if !theirs_detached.is_empty() && rng.chance(40) {
                    rng.pick(&theirs_detached)
                } else if !theirs_claimed.is_empty() && rng.chance(35) {
                    rng.pick(&theirs_claimed)
                } else {
                    rng.below(boxes)
                };
                if detached.contains(&(s, x)) {
                    continue;
                }
                claimed.push((s, x));
                // A keeper's round after a claim, before anything else happens to it.
                if rng.chance(50) {
                    ops.push(Op::Claim { s, x });
                    Op::Pause
                } else {
                    Op::Claim { s, x }
                }
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
                    // The TTL keeper's round after a detach: nothing detached is renewed.
                    if rng.chance(30) {
                        ops.push(Op::Detach { s, x });
                        Op::Pause
                    } else {
                        Op::Detach { s, x }
                    }
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
            27 if !live.is_empty() && boxes > 0 => {
                let s = rng.pick(&live);
                let own: Vec<usize> = (0..boxes).filter(|&x| makers[x] == Some(s)).collect();
                if own.is_empty() {
                    continue;
                }
                let x = rng.pick(&own);
                match rng.below(3) {
                    0 => Op::Refused {
                        s,
                        x,
                        answer: rng.pick(&[
                            Refusal::NotRouted,
                            Refusal::RouterNotFound,
                            Refusal::Conflict,
                            Refusal::ServerError,
                        ]),
                    },
                    _ => Op::Removes {
                        s,
                        x,
                        proxy: rng.chance(50),
                    },
                }
            }
            28 if boxes > 0 => match rng.chance(50) {
                true => Op::Reuse {
                    x: rng.below(boxes),
                },
                false => Op::Vanish {
                    x: rng.below(boxes),
                },
            },
            17..=19 | 26 => Op::Sweep {
                prune: rng.chance(40),
                crash: crash(&mut rng, 15),
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
        ops.push(op);
    }
    ops
}

/// The image a create uses, a third of the time: any subset of a session's labels (the
/// creator's own or another's) and `sandguard.detached=true`.
fn image(rng: &mut Rng, sessions: usize) -> Option<Image> {
    if !rng.chance(33) {
        return None;
    }
    let session = rng.chance(60).then(|| rng.below(sessions));
    Some(Image {
        session,
        detached: session.is_none() || rng.chance(50),
        expires: rng.chance(40),
    })
}

/// A limit that removes while the owner lives, for a third of the sessions.
fn limit(rng: &mut Rng) -> Option<Limit> {
    if !rng.chance(33) {
        return None;
    }
    Some(rng.pick(&[Limit::Lifetime, Limit::Spend]))
}

/// A crash among an actor's journal writes, `percent` of the time: mostly a death (anywhere
/// in a sidecar's first dozen writes: its journal's creation takes six), sometimes a full disk
/// (within the creation only: a sidecar whose disk fills up later confirms nothing, which the
/// model can tell only by waiting out its patience).
fn crash(rng: &mut Rng, percent: u64) -> Option<Crash> {
    if !rng.chance(percent) {
        return None;
    }
    let full = rng.chance(30);
    let after = if full { rng.below(6) } else { rng.below(12) } as u8;
    Some(Crash { after, full })
}
