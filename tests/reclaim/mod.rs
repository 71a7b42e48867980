//! The one reclaim path and the one ownership judgement it asks, through the real binary:
//! a claim adopts and never steals, detach wins, ids are parsed before they reach a provider,
//! failed and unfinished removals are reported, and random histories against the real daemon
//! keep the ownership rules (checked by the one oracle, `sandguard::testing::oracle`).
//!
//! - [`judgement`]: the judgement's rules, one case each, on the real daemon.
//! - [`detach`]: a detached sandbox survives its owner and every sweep until its TTL.
//! - [`keepers`]: the limits and the TTL keeper, which act while the owner lives, judge with
//!   the ledger's facts (what another session detached stays so).
//! - [`failures`]: removals that fail or stay unfinished, and providers that cannot be listed.
//! - [`ids`]: ids no provider's parser accepts are refused and reach no provider.
//! - [`names`]: a name is not an identity to the end of a reclaim (two claims of one name).
//! - [`model`]: random histories through the real binary, against the oracle.

mod detach;
mod failures;
mod ids;
mod judgement;
mod keepers;
mod model;
mod names;
