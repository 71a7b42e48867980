//! The headline command line, `sandguard [OPTIONS] -- CMD…`, read without clap.
//!
//! clap builds its whole command tree (every subcommand, every help text) before it reads a
//! word: about 0.3–0.45 ms of the wrapper's start, where the whole wrapper is meant to cost
//! no more than twice `tini` (issue 25). So the wrapper's own shape is read here first, and
//! anything this reader does not know for certain goes to clap, which then reads the line as
//! it always did (and reports any mistake).
//!
//! Decisions:
//! - Known: `run`'s options (`--docker-proxy`, `--no-docker-proxy`, `--cloud-proxy`,
//!   `--no-cloud-proxy`, `-q`/`--quiet`, `--grace D`/`--grace=D`) and the global
//!   `--config FILE`/`--config=FILE`, each at most once, then `--` and a non-empty CMD.
//! - Anything else, a repeated option, a value that is empty, starts with `-` or does not
//!   parse: clap decides. The two readers are held equal by a test that generates command
//!   lines and compares what both make of them.
//! - A proxy flag and its `--no-` twin override each other, the later one winning, as
//!   clap's `overrides_with` does.

use std::ffi::OsString;
use std::path::PathBuf;

use super::run;
use crate::config::HumanDuration;

/// `(config, args)` of `sandguard [OPTIONS] -- CMD…`, or `None`: clap reads it.
pub(super) fn wrapper(line: &[OsString]) -> Option<(Option<PathBuf>, run::Args)> {
    let mut options = run::Options::default();
    let mut config = None;
    let mut seen: Vec<&str> = Vec::new();
    let mut words = line.iter().skip(1);
    while let Some(word) = words.next() {
        let word = word.to_str()?;
        if word == "--" {
            let command: Vec<OsString> = words.cloned().collect();
            return (!command.is_empty()).then_some((config, run::Args { options, command }));
        }
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value)),
            _ => (word, None),
        };
        let name = match name {
            "-q" => "--quiet",
            other => other,
        };
        if seen.contains(&name) {
            return None;
        }
        seen.push(name);
        let mut value = || -> Option<String> {
            let v = match inline {
                Some(v) => v.to_string(),
                None => words.next()?.to_str()?.to_string(),
            };
            (!v.is_empty() && !v.starts_with('-')).then_some(v)
        };
        match (name, inline) {
            ("--docker-proxy", None) => {
                (options.docker_proxy, options.no_docker_proxy) = (true, false);
            }
            ("--no-docker-proxy", None) => {
                (options.docker_proxy, options.no_docker_proxy) = (false, true);
            }
            ("--cloud-proxy", None) => {
                (options.cloud_proxy, options.no_cloud_proxy) = (true, false);
            }
            ("--no-cloud-proxy", None) => {
                (options.cloud_proxy, options.no_cloud_proxy) = (false, true);
            }
            ("--quiet", None) => options.quiet = true,
            ("--grace", _) => options.grace = Some(value()?.parse::<HumanDuration>().ok()?),
            ("--config", _) => config = Some(PathBuf::from(value()?)),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Rng;
    use clap::Parser;

    const WORDS: &[&str] = &[
        "--docker-proxy",
        "--no-docker-proxy",
        "--cloud-proxy",
        "--no-cloud-proxy",
        "-q",
        "--quiet",
        "--grace",
        "5s",
        "--grace=2m",
        "--grace=",
        "--grace=soon",
        "--config",
        "/etc/x.toml",
        "--config=/y.toml",
        "--config=",
        "-x",
        "--bogus",
        "--docker-proxy=on",
        "run",
        "ps",
        "--help",
        "--version",
        "--",
        "--",
        "true",
        "-c",
    ];

    /// What clap makes of a line the fast reader took: the same config, options and CMD.
    #[test]
    fn the_fast_reader_agrees_with_clap_on_every_line_it_takes() {
        let mut taken = 0;
        for seed in 0..20_000u64 {
            let mut rng = Rng::new(seed);
            let len = rng.below(7);
            let mut line: Vec<OsString> = vec!["sandguard".into()];
            for _ in 0..len {
                line.push(rng.pick(WORDS).into());
            }
            if rng.chance(70) {
                line.push("--".into());
                for _ in 0..rng.below(3) {
                    line.push(rng.pick(WORDS).into());
                }
            }
            let Some((config, args)) = wrapper(&line) else {
                continue;
            };
            taken += 1;
            let cli = super::super::Cli::try_parse_from(&line).unwrap_or_else(|e| {
                panic!("{line:?}: the fast reader took what clap refuses: {e}")
            });
            assert!(cli.command.is_none(), "{line:?}");
            assert_eq!(cli.config, config, "{line:?}");
            assert_eq!(cli.wrapped, args.command, "{line:?}");
            assert_eq!(
                format!("{:?}", cli.run),
                format!("{:?}", args.options),
                "{line:?}"
            );
        }
        assert!(taken > 1_000, "only {taken} lines were fast");
    }

    #[test]
    fn the_headline_line_is_fast_and_everything_unsure_goes_to_clap() {
        let line = |words: &[&str]| -> Vec<OsString> { words.iter().map(Into::into).collect() };
        let (config, args) = wrapper(&line(&["sandguard", "--", "python", "agent.py"])).unwrap();
        assert_eq!(
            (config, args.command),
            (None, line(&["python", "agent.py"]))
        );
        for slow in [
            &["sandguard", "--"][..],
            &["sandguard", "run", "--", "true"],
            &["sandguard", "-q", "-q", "--", "true"],
            &["sandguard", "--grace", "--", "true"],
            &["sandguard", "--help"],
        ] {
            assert!(wrapper(&line(slow)).is_none(), "{slow:?}");
        }
    }
}
