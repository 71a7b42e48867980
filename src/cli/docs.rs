//! `sandguard completions SHELL` and `sandguard man`: shell completions and a man page,
//! generated from the clap definitions themselves so they never drift from the real flags.
//! Packagers write them to files (see `packaging/README.md`).
//!
//! Decisions:
//! - One man page, `sandguard(1)`, with every subcommand in it (its usage, what it does and
//!   its options, under SUBCOMMANDS), rather than a page per subcommand: `sandguard man` prints
//!   one page that packagers install as one file, and the page names no other page that
//!   would not exist (clap_mangen's own SUBCOMMANDS section points at `sandguard-run(1)` and
//!   the like, so it is not used).
//! - EXIT STATUS and ENVIRONMENT are written here, from README's tables and the variables
//!   `crate::config` (and the wrapper and plugins) read; `tests/cli/packaging.rs` checks the page
//!   names them.

use clap::CommandFactory;

use super::output::{self, Exit};
use super::{Cli, Error};

#[derive(Debug, clap::Args)]
pub(super) struct CompletionArgs {
    /// bash, zsh, fish, elvish or powershell
    shell: clap_complete::Shell,
}

pub(super) fn completions(args: CompletionArgs) -> Result<Exit, Error> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "sandguard", &mut buf);
    output::emit(&String::from_utf8_lossy(&buf));
    Ok(Exit::Ok)
}

pub(super) fn man() -> Result<Exit, Error> {
    let page =
        render_man().map_err(|e| Error::Failed(format!("cannot render the man page: {e}")))?;
    output::emit(&page);
    Ok(Exit::Ok)
}

/// The whole page, in roff.
fn render_man() -> std::io::Result<String> {
    let mut cmd = Cli::command();
    cmd.build();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut buf = Vec::new();
    man.render_title(&mut buf)?;
    man.render_name_section(&mut buf)?;
    man.render_synopsis_section(&mut buf)?;
    man.render_description_section(&mut buf)?;
    man.render_options_section(&mut buf)?;
    let mut page = String::from_utf8_lossy(&buf).into_owned();
    page.push_str(".SH SUBCOMMANDS\n");
    for sub in cmd.get_subcommands_mut().filter(|c| !c.is_hide_set()) {
        let usage = sub.render_usage().to_string();
        let usage = usage.trim().trim_start_matches("Usage:").trim();
        page.push_str(&format!(".SS \"sandguard {}\"\n", sub.get_name()));
        page.push_str(&format!(".B {}\n", esc(usage)));
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            page.push_str(&format!(".PP\n{}\n", esc(&about.to_string())));
        }
        let mut options = Vec::new();
        clap_mangen::Man::new(sub.clone()).render_options_section(&mut options)?;
        let options = String::from_utf8_lossy(&options);
        // Its own `.SH OPTIONS` heading would end SUBCOMMANDS, and the preamble is already
        // at the top: the entries stay.
        let entries: Vec<&str> = options
            .lines()
            .filter(|l| ![".SH", ".ie", ".el"].iter().any(|p| l.starts_with(p)))
            .collect();
        if !entries.is_empty() {
            page.push_str(&entries.join("\n"));
            page.push('\n');
        }
    }
    page.push_str(EXIT_STATUS);
    page.push_str(ENVIRONMENT);
    let mut version = Vec::new();
    man.render_version_section(&mut version)?;
    page.push_str(&String::from_utf8_lossy(&version));
    Ok(once_preamble(&page))
}

/// Each section clap_mangen renders starts with the same `.ie`/`.el` preamble (defining the
/// `Aq` string): kept once, at the top.
fn once_preamble(page: &str) -> String {
    let preamble = |l: &&str| l.starts_with(".ie \\n(.g .ds Aq") || l.starts_with(".el .ds Aq");
    let head: Vec<&str> = page.lines().filter(preamble).take(2).collect();
    let body: Vec<&str> = page.lines().filter(|l| !preamble(l)).collect();
    let mut out = head.join("\n");
    out.push('\n');
    out.push_str(&body.join("\n"));
    out.push('\n');
    out
}

/// Text as a roff line: backslashes and dashes escaped, a leading dot or quote defused.
fn esc(text: &str) -> String {
    let body = text.replace('\\', "\\e").replace('-', "\\-");
    match body.chars().next() {
        Some('.' | '\'') => format!("\\&{body}"),
        _ => body,
    }
}

const EXIT_STATUS: &str = r#".SH "EXIT STATUS"
.SS "sandguard \-\- CMD, sandguard run"
.TP
CMD's own status
The program ran; its status is passed on (128+N when it died of signal N, as a shell shows it).
.TP
125
sandguard failed before the program ran (bad config, no sidecar).
.TP
126
The program cannot be executed.
.TP
127
The program was not found.
.SS "ps, stop, sweep, sessions, providers"
.TP
0
Clean: every provider answered, and everything asked for is gone.
.TP
1
A provider could not be queried, a target was not found (or several were), or a removal
failed or was unfinished at the deadline.
.TP
2
Bad usage or bad config (naming the file, the line and the key).
"#;

const ENVIRONMENT: &str = r#".SH ENVIRONMENT
Environment variables beat the config file; flags beat both.
.TP
SANDGUARD_CONFIG
The config file (default: $XDG_CONFIG_HOME/sandguard/config.toml, with ~/.config for an unset
XDG_CONFIG_HOME, then /etc/sandguard/config.toml).
.TP
SANDGUARD_STATE_DIR
The ledger's directory (default: $XDG_STATE_HOME/sandguard, else ~/.local/state/sandguard).
.TP
SANDGUARD_LOG
The log level on stderr: error, warn (default), info, debug, trace.
.TP
SANDGUARD_GRACE
The lease grace of an owner that sends heartbeats.
.TP
SANDGUARD_FLEET_STORE, SANDGUARD_FLEET_USER, SANDGUARD_FLEET_PASSWORD
The fleet lease store (redis:// or rediss://) and its credentials.
.TP
SANDGUARD_HOST_ID
This machine's name in the fleet store.
.TP
SANDGUARD_SESSION, SANDGUARD_LABELS, SANDGUARD_FD
Set by the wrapper for the program: the session id, the labels to stamp (k=v,k=v), and the
pipe to the sidecar that \fBclaim\fR, \fBrelease\fR and \fBdetach\fR write to.
.TP
SANDGUARD_BIN
The binary the library helpers start (default: sandguard on PATH).
.TP
DOCKER_HOST
The Docker daemon, unix:///path or tcp://host:port; wins over every context.
.TP
DOCKER_CONTEXT
A Docker context whose endpoint is the daemon; then [providers.docker] host; then the current
context of \fBdocker context use\fR; then the first engine socket that exists. On macOS, in
this order: Docker Desktop's ~/.docker/run/docker.sock; Colima's default/docker.sock under
$COLIMA_HOME, ~/.colima or ~/.config/colima; OrbStack's ~/.orbstack/run/docker.sock; Rancher
Desktop's ~/.rd/docker.sock; Podman machine's $TMPDIR/podman/podman-machine-default-api.sock,
then ~/.local/share/containers/podman/machine/podman.sock; /var/run/docker.sock. On Linux,
/var/run/docker.sock. With none, unix:///var/run/docker.sock. \fBsandguard providers\fR says
which was chosen, why, and which others exist.
.TP
DOCKER_CONFIG
The Docker CLI's config directory, where contexts are found (default: ~/.docker).
.TP
DOCKER_API_VERSION
Pins the Engine API version (otherwise negotiated).
.TP
E2B_API_KEY, E2B_API_URL, E2B_DOMAIN
E2B's key, and its API URL (default https://api.${E2B_DOMAIN}, the domain defaulting to e2b.app).
.TP
DAYTONA_API_KEY, DAYTONA_JWT_TOKEN, DAYTONA_ORGANIZATION_ID, DAYTONA_API_URL, DAYTONA_SERVER_URL
Daytona's key (or a JWT with its organisation), and its API URL.
.TP
FLY_API_TOKEN, FLY_APP_NAME, FLY_API_HOSTNAME
Fly.io Machines: the token, the app, and the API URL.
.TP
MODAL_TOKEN_ID, MODAL_TOKEN_SECRET, MODAL_SERVER_URL, MODAL_ENVIRONMENT
Modal's token pair, its API URL and the environment.
.TP
TENKI_API_KEY, TENKI_AUTH_TOKEN, TENKI_API_URL, TENKI_API_ENDPOINT
Tenki's credential and its API URL.
.TP
HOME, XDG_CONFIG_HOME, XDG_STATE_HOME
Where the config file, the ledger and the Docker CLI's config are looked for.
.TP
COLIMA_HOME, TMPDIR, XDG_DATA_HOME
Where Colima's and Podman machine's sockets are looked for on macOS.
"#;
