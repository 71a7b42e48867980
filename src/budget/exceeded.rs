//! Why a create was refused ([`Exceeded`]: the limit, and the count that reached it), in the
//! words every proxy puts after its `sandguard:` and the journal's `create_refused` records.
//!
//! Decision: **no article hangs on a provider's name.** The words read the same for `docker`,
//! `e2b` and a plugin's name (`on e2b`, `there`), so no provider reads "a e2b"; the count is
//! said as a sentence (`this session has 2`), as the book quotes it.

use std::fmt;

use super::Spend;

/// Why a create was refused: the limit it would pass (the session's, or `provider`'s alone),
/// and the count that reached it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Exceeded {
    pub provider: Option<String>,
    pub over: Over,
}

/// Which limit a create would pass, and the count that reached it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Over {
    /// `sandboxes`: `alive` sandboxes (held, or being created) already.
    Sandboxes { limit: u32, alive: u64 },
    /// `creates`: `made` sandboxes created (or being created) already.
    Creates { limit: u32, made: u64 },
    /// `spend`: `used` already (sandbox time, or estimated money).
    Spend { limit: Spend, used: Spend },
}

impl Exceeded {
    /// The limit as the config and the command line name it: `sandboxes`, or a provider's
    /// `providers.NAME.limits.sandboxes`.
    pub(crate) fn key(&self) -> String {
        match &self.provider {
            None => self.over.key().to_string(),
            Some(p) => format!("providers.{p}.limits.{}", self.over.key()),
        }
    }
}

impl fmt::Display for Exceeded {
    /// The reason, without the `sandguard:` each proxy puts before it, in words that read the
    /// same whatever the provider is called (no article hangs on its name): `limit
    /// `sandboxes` reached (at most 2 alive at once; this session has 2); nothing was
    /// created`, a provider's `(at most 2 alive at once on e2b; this session has 2 there)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = self.key();
        let (on, there) = match &self.provider {
            None => (String::new(), ""),
            Some(p) => (format!(" on {p}"), " there"),
        };
        let (max, reached) = (self.over.max(), self.over.reached());
        let what = match self.over {
            Over::Sandboxes { .. } => {
                format!("at most {max} alive at once{on}; this session has {reached}{there}")
            }
            Over::Creates { .. } => format!(
                "at most {max} over the session{on}; this session has made {reached}{there}"
            ),
            Over::Spend { .. } => {
                format!("at most {max}{on}; this session used {reached}{there}")
            }
        };
        write!(f, "limit `{key}` reached ({what}); nothing was created")
    }
}

impl Over {
    /// Its key in `[limits]`.
    pub(crate) fn key(&self) -> &'static str {
        match self {
            Over::Sandboxes { .. } => "sandboxes",
            Over::Creates { .. } => "creates",
            Over::Spend { .. } => "spend",
        }
    }

    /// The limit, in the refusal's words: `2`, `4s of sandbox time`, `$3.00 estimated`.
    pub(crate) fn max(&self) -> String {
        match self {
            Over::Sandboxes { limit, .. } | Over::Creates { limit, .. } => limit.to_string(),
            Over::Spend { limit, .. } => limit.to_string(),
        }
    }

    /// The count that reached it, in the refusal's words: `2`, `5s`, `$3.12`.
    pub(crate) fn reached(&self) -> String {
        match self {
            Over::Sandboxes { alive: n, .. } | Over::Creates { made: n, .. } => n.to_string(),
            Over::Spend {
                used: Spend::Time(d),
                ..
            } => crate::timefmt::format_span(*d),
            Over::Spend {
                used: Spend::Cost(c),
                ..
            } => format!("${c:.2}"),
        }
    }
}
