//! The cloud providers' settings: credentials and base URLs from each provider's own
//! environment variables (which win) or from `[providers.NAME]` in the config file.
//!
//! A cloud provider is *configured* exactly when its credential is present. Every table here
//! denies unknown keys, like the rest of the file.

use std::time::Duration;

use std::collections::BTreeMap;

use serde::Deserialize;

use super::values::Price;
use super::{ConfigError, Env, Positive, Rate, Secret};

/// One cloud provider, resolved. The field names are generic; each constructor below says
/// which variable and key feed them.
#[derive(Debug, Clone)]
pub struct CloudSettings {
    /// The credential (`E2B_API_KEY`, `DAYTONA_API_KEY`, `FLY_API_TOKEN`, `TENKI_API_KEY`,
    /// `MODAL_TOKEN_ID`). `None`: the provider is not configured (Daytona: unless by JWT).
    pub token: Option<Secret>,
    /// A second credential: `MODAL_TOKEN_SECRET`; Daytona's `DAYTONA_JWT_TOKEN`, used only
    /// without an API key.
    pub secret: Option<Secret>,
    /// The API's base URL.
    pub url: String,
    /// Where the credential acts: Fly.io's app name (`FLY_APP_NAME`, `[providers.flyio]
    /// app`); the organisation of Daytona's JWT (`DAYTONA_ORGANIZATION_ID`).
    pub app: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Calls a second never to exceed during a reclaim (`rate`), if set.
    pub rate: Option<f64>,
}

/// `[providers.e2b]`, `[providers.daytona]`, and `[providers.tenki]` through [`FileTenki`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileKeyed {
    api_key: Option<Secret>,
    api_url: Option<String>,
    timeout: Option<Positive>,
    rate: Option<Rate>,
    pub(super) limits: Option<super::file::FileProviderLimits>,
    pub(super) price_per_hour: Option<Price>,
    /// `[providers.NAME.prices]`: a price per hour for each size a create names.
    #[serde(default)]
    pub(super) prices: BTreeMap<String, Price>,
}

/// `[providers.tenki]`: [`FileKeyed`] without `prices`, as no Tenki create passes a proxy
/// that could read its size.
#[derive(Debug, Default, Deserialize)]
#[serde(try_from = "FileKeyed")]
pub(super) struct FileTenki(pub(super) FileKeyed);

/// Why `[providers.tenki]` was refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "no `prices` here: only e2b and daytona take prices per size (their creates pass the \
     cloud proxy); tenki takes price_per_hour alone"
)]
pub(super) struct NoSizes;

impl TryFrom<FileKeyed> for FileTenki {
    type Error = NoSizes;
    fn try_from(file: FileKeyed) -> Result<FileTenki, NoSizes> {
        match file.prices.is_empty() {
            true => Ok(FileTenki(file)),
            false => Err(NoSizes),
        }
    }
}

/// `[providers.flyio]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileFly {
    api_token: Option<Secret>,
    app: Option<String>,
    api_hostname: Option<String>,
    timeout: Option<Positive>,
    rate: Option<Rate>,
    pub(super) limits: Option<super::file::FileProviderLimits>,
    pub(super) price_per_hour: Option<Price>,
}

/// `[providers.modal]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileModal {
    token_id: Option<Secret>,
    token_secret: Option<Secret>,
    server_url: Option<String>,
    environment: Option<String>,
    timeout: Option<Positive>,
    rate: Option<Rate>,
    pub(super) limits: Option<super::file::FileProviderLimits>,
    pub(super) price_per_hour: Option<Price>,
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

fn first(env: &dyn Env, vars: &[&str]) -> Option<String> {
    vars.iter().find_map(|v| env.var(v))
}

fn timeout(t: Option<Positive>) -> Duration {
    t.map_or(DEFAULT_TIMEOUT, |d| d.0)
}

/// E2B: `E2B_API_KEY`; `E2B_API_URL`, else the file's `api_url`, else
/// `https://api.${E2B_DOMAIN}` (`E2B_DOMAIN` defaulting to `e2b.app`), as E2B's SDKs build it:
/// a self-hosted E2B is named by its domain alone. `E2B_DEBUG` is ignored (see the driver).
pub(super) fn e2b(file: FileKeyed, env: &dyn Env) -> CloudSettings {
    let domain = env.var("E2B_DOMAIN").unwrap_or_else(|| "e2b.app".into());
    keyed(
        file,
        env,
        &["E2B_API_KEY"],
        &["E2B_API_URL"],
        &format!("https://api.{domain}"),
    )
}

/// Daytona: `DAYTONA_API_KEY`; `DAYTONA_API_URL`, then the deprecated `DAYTONA_SERVER_URL`
/// (default `https://app.daytona.io/api`). As the Daytona SDK reads its environment, an API
/// key wins; without one, `DAYTONA_JWT_TOKEN` with `DAYTONA_ORGANIZATION_ID`, and a JWT
/// without an organisation is an error (the SDK raises one too) that never quotes the token.
pub(super) fn daytona(file: FileKeyed, env: &dyn Env) -> Result<CloudSettings, ConfigError> {
    let mut settings = keyed(
        file,
        env,
        &["DAYTONA_API_KEY"],
        &["DAYTONA_API_URL", "DAYTONA_SERVER_URL"],
        "https://app.daytona.io/api",
    );
    settings.secret = env.var("DAYTONA_JWT_TOKEN").map(Secret::new);
    settings.app = env.var("DAYTONA_ORGANIZATION_ID");
    if settings.token.is_none() && settings.secret.is_some() && settings.app.is_none() {
        return Err(ConfigError::JwtWithoutOrganization);
    }
    Ok(settings)
}

/// Tenki: `TENKI_AUTH_TOKEN`, then `TENKI_API_KEY`; `TENKI_API_ENDPOINT`, then `TENKI_API_URL`
/// (default `https://api.tenki.cloud`).
pub(super) fn tenki(FileTenki(file): FileTenki, env: &dyn Env) -> CloudSettings {
    keyed(
        file,
        env,
        &["TENKI_AUTH_TOKEN", "TENKI_API_KEY"],
        &["TENKI_API_ENDPOINT", "TENKI_API_URL"],
        "https://api.tenki.cloud",
    )
}

fn keyed(
    file: FileKeyed,
    env: &dyn Env,
    keys: &[&str],
    urls: &[&str],
    default_url: &str,
) -> CloudSettings {
    CloudSettings {
        token: first(env, keys).map(Secret::new).or(file.api_key),
        secret: None,
        url: first(env, urls)
            .or(file.api_url)
            .unwrap_or_else(|| default_url.to_string()),
        app: None,
        timeout: timeout(file.timeout),
        rate: file.rate.map(|r| r.0),
    }
}

/// Fly.io Machines: `FLY_API_TOKEN`, `FLY_APP_NAME`, `FLY_API_HOSTNAME` (default
/// `https://api.machines.dev`).
pub(super) fn flyio(file: FileFly, env: &dyn Env) -> CloudSettings {
    CloudSettings {
        token: env.var("FLY_API_TOKEN").map(Secret::new).or(file.api_token),
        secret: None,
        url: env
            .var("FLY_API_HOSTNAME")
            .or(file.api_hostname)
            .unwrap_or_else(|| "https://api.machines.dev".into()),
        app: env.var("FLY_APP_NAME").or(file.app),
        timeout: timeout(file.timeout),
        rate: file.rate.map(|r| r.0),
    }
}

/// Modal: `MODAL_TOKEN_ID`, `MODAL_TOKEN_SECRET`, `MODAL_SERVER_URL` (default
/// `https://api.modal.com:443`); and beside them the environment, `MODAL_ENVIRONMENT` or
/// `environment` (`None`: the account's default environment).
pub(super) fn modal(file: FileModal, env: &dyn Env) -> (CloudSettings, Option<String>) {
    let environment = env
        .var("MODAL_ENVIRONMENT")
        .or(file.environment)
        .filter(|e| !e.is_empty());
    let settings = CloudSettings {
        token: env.var("MODAL_TOKEN_ID").map(Secret::new).or(file.token_id),
        secret: env
            .var("MODAL_TOKEN_SECRET")
            .map(Secret::new)
            .or(file.token_secret),
        url: env
            .var("MODAL_SERVER_URL")
            .or(file.server_url)
            .unwrap_or_else(|| "https://api.modal.com:443".into()),
        app: None,
        timeout: timeout(file.timeout),
        rate: file.rate.map(|r| r.0),
    };
    (settings, environment)
}
