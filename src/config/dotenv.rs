//! Daytona's credentials where its SDKs find them: the environment, then `./.env.local`, then
//! `./.env` (the Python and TypeScript SDKs read both files with dotenv, in the working
//! directory, without putting them in the environment).
//!
//! Decisions:
//! - **Only the credential comes from the files**: `DAYTONA_API_KEY`, `DAYTONA_JWT_TOKEN`,
//!   `DAYTONA_ORGANIZATION_ID` and `DAYTONA_TARGET`. The endpoint (`DAYTONA_API_URL`) never
//!   does, as in the SDK: the working directory is not always written by whoever runs the
//!   program, and a file there must not send the key somewhere else.
//! - **Every command reads them**, from the directory it runs in, so that `sandguard -- CMD`,
//!   the sidecar it starts (which resolves its settings before it leaves that directory) and a
//!   `sandguard ps` in the same project see the same account. A sweep from cron runs elsewhere
//!   and sees what its own environment and config say.
//! - **Lenient like dotenv**: `KEY=VALUE`, an optional `export `, single quotes (literal),
//!   double quotes (`\n`, `\t`, `\"`, `\\` escapes), an unquoted value ending at ` #`. A line
//!   that is none of these is skipped; a file that cannot be read, or is over
//!   [`MAX_FILE`] bytes, counts as absent. Nothing read here is ever logged.
//! - The files are read once, and only when a name above is missing from the environment.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::Env;

/// The names the files may give, and nothing else.
pub(crate) const NAMES: [&str; 4] = [
    "DAYTONA_API_KEY",
    "DAYTONA_JWT_TOKEN",
    "DAYTONA_ORGANIZATION_ID",
    "DAYTONA_TARGET",
];

/// The files, in the order they win.
pub(crate) const FILES: [&str; 2] = [".env.local", ".env"];

/// A larger file is not a dotenv file.
pub(crate) const MAX_FILE: u64 = 1 << 20;

/// An environment with Daytona's credentials filled in from the dotenv files of `dir`.
pub(crate) struct WithDotenv<'a> {
    env: &'a dyn Env,
    dir: PathBuf,
    files: OnceLock<Vec<HashMap<String, String>>>,
}

impl<'a> WithDotenv<'a> {
    pub(crate) fn new(env: &'a dyn Env, dir: &Path) -> WithDotenv<'a> {
        WithDotenv {
            env,
            dir: dir.to_path_buf(),
            files: OnceLock::new(),
        }
    }

    /// `env` with the files of the current directory (none when it cannot be read).
    pub(crate) fn here(env: &'a dyn Env) -> WithDotenv<'a> {
        let dir = std::env::current_dir().unwrap_or_default();
        WithDotenv::new(env, &dir)
    }

    fn files(&self) -> &[HashMap<String, String>] {
        self.files.get_or_init(|| {
            FILES
                .iter()
                .map(|name| read(&self.dir.join(name)))
                .collect()
        })
    }
}

impl Env for WithDotenv<'_> {
    fn var(&self, name: &str) -> Option<String> {
        if let Some(value) = self.env.var(name) {
            return Some(value);
        }
        if !NAMES.contains(&name) || self.dir.as_os_str().is_empty() {
            return None;
        }
        self.files()
            .iter()
            .find_map(|f| f.get(name).filter(|v| !v.is_empty()).cloned())
    }
}

fn read(path: &Path) -> HashMap<String, String> {
    use std::io::Read;
    let mut text = String::new();
    let read =
        std::fs::File::open(path).and_then(|f| f.take(MAX_FILE + 1).read_to_string(&mut text));
    match read {
        Ok(n) if (n as u64) <= MAX_FILE => parse(&text),
        _ => HashMap::new(),
    }
}

/// The `NAMES` a dotenv text assigns (the last assignment of each wins, as in dotenv).
pub(crate) fn parse(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(line)
        .filter(|(k, _)| NAMES.contains(&k.as_str()))
        .collect()
}

fn line(raw: &str) -> Option<(String, String)> {
    let l = raw.trim();
    let l = l.strip_prefix("export ").map_or(l, str::trim_start);
    let (key, value) = l.split_once('=')?;
    let key = key.trim();
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
    if !valid {
        return None;
    }
    Some((key.to_string(), value_of(value.trim_start())?))
}

fn value_of(v: &str) -> Option<String> {
    if let Some(rest) = v.strip_prefix('\'') {
        let end = rest.find('\'')?;
        return Some(rest[..end].to_string());
    }
    if let Some(rest) = v.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Some(out),
                '\\' => match chars.next()? {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    other @ ('"' | '\\' | '\'') => out.push(other),
                    other => {
                        out.push('\\');
                        out.push(other);
                    }
                },
                c => out.push(c),
            }
        }
        return None;
    }
    let end = v.find(" #").unwrap_or(v.len());
    Some(v[..end].trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_dotenv_reads_and_only_the_credential() {
        let text = "# a comment\n\
                    export DAYTONA_API_KEY = 'k1 #literal'\n\
                    DAYTONA_TARGET=us # where\n\
                    DAYTONA_ORGANIZATION_ID=\"o\\\"rg\"\n\
                    DAYTONA_API_URL=http://evil.example\n\
                    not a line\n\
                    DAYTONA_JWT_TOKEN=\"unterminated\n";
        let got = parse(text);
        assert_eq!(got.get("DAYTONA_API_KEY").unwrap(), "k1 #literal");
        assert_eq!(got.get("DAYTONA_TARGET").unwrap(), "us");
        assert_eq!(got.get("DAYTONA_ORGANIZATION_ID").unwrap(), "o\"rg");
        assert!(!got.contains_key("DAYTONA_API_URL"), "never the endpoint");
        assert!(
            !got.contains_key("DAYTONA_JWT_TOKEN"),
            "a broken line is skipped"
        );
    }

    #[test]
    fn the_environment_wins_then_env_local_then_env() {
        let dir = std::env::temp_dir().join(format!("sandguard-dotenv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(".env"),
            "DAYTONA_API_KEY=from-env-file\nDAYTONA_TARGET=eu\n",
        )
        .unwrap();
        std::fs::write(dir.join(".env.local"), "DAYTONA_API_KEY=from-local\n").unwrap();
        let empty: HashMap<String, String> = HashMap::new();
        let env = WithDotenv::new(&empty, &dir);
        assert_eq!(env.var("DAYTONA_API_KEY").unwrap(), "from-local");
        assert_eq!(env.var("DAYTONA_TARGET").unwrap(), "eu");
        assert_eq!(env.var("E2B_API_KEY"), None);
        let set = HashMap::from([("DAYTONA_API_KEY".to_string(), "from-process".to_string())]);
        assert_eq!(
            WithDotenv::new(&set, &dir).var("DAYTONA_API_KEY").unwrap(),
            "from-process"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
