//! Names the commit in `sandguard --version`: `SANDGUARD_VERSION` is the package version, plus
//! ` (COMMIT)` when the commit is known.
//!
//! Decisions:
//! - The commit is `$SANDGUARD_COMMIT` when the build sets it (a packager building from a
//!   tarball), else `git rev-parse --short=12 HEAD`, asked only when this package is the top of
//!   a git work tree (a crate unpacked inside someone else's repository must not name that
//!   repository's commit), else nothing: a build without git or without `.git` still works.
//! - Cheap: two `git rev-parse` calls, and the script reruns only when HEAD or the branch it
//!   points at moves (or the variable changes). A dirty tree is not marked (that would need a
//!   status walk on every build).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SANDGUARD_COMMIT");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = std::env::var("SANDGUARD_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit);
    match commit {
        Some(c) => println!("cargo:rustc-env=SANDGUARD_VERSION={version} ({})", c.trim()),
        None => println!("cargo:rustc-env=SANDGUARD_VERSION={version}"),
    }
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn git_commit() -> Option<String> {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let same = |a: &str, b: &str| {
        Path::new(a)
            .canonicalize()
            .ok()
            .is_some_and(|a| Path::new(b).canonicalize().ok() == Some(a))
    };
    if !same(&top, &manifest) {
        return None;
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Only files that exist: Cargo reruns a script on every build while one it watches is
    // missing (a branch whose ref is packed has no file of its own; `packed-refs` covers it).
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    let watched = ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref());
    for path in watched {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            if Path::new(&p).exists() {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    Some(commit)
}
