//! Delivering events: a task per target (the command, the webhook), one event after another,
//! each tried up to `attempts` times.
//!
//! Decisions:
//! - **Command**: `argv` run in a process group of its own, the event's JSON and a newline on
//!   its stdin (then closed), stdout and stderr to nowhere (its output is not ours to print).
//!   Exit status 0 is delivered; anything else, or not exiting within `timeout` (the whole
//!   group is then killed), is a failed attempt.
//! - **Webhook**: a `POST` of the JSON (`Content-Type: application/json`) within `timeout`. A
//!   2xx is delivered. A connection error, a timeout, a 5xx or a 429 is retried (a 429's or
//!   503's `Retry-After`, in seconds, is waited when longer than the backoff, up to 60 s);
//!   any other status is final: the endpoint said no, and asking again would not change it.
//! - Between attempts the pause doubles from `retry_initial` (capped at 60 s); after the last
//!   attempt the event is given up, with one `warn` line. Log lines name the webhook by its
//!   scheme and host only ([`crate::config::Webhook::display`]); reqwest's error is printed
//!   without its URL.
//! - Events are delivered in order, one at a time per target: a target that hangs delays its
//!   own later events, never the other target's, never the caller
//!   ([`super::Notifier::send`] does not wait).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::Event;
use crate::backoff::Backoff;
use crate::config::{NotifySettings, Secret, Webhook};

/// The longest pause between two attempts (a `Retry-After` included).
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// Where events go.
enum To {
    Command(Vec<String>),
    Webhook(Webhook, reqwest::Client),
}

/// One target, and how hard to try it.
pub(crate) struct Target {
    to: To,
    timeout: Duration,
    attempts: u32,
    backoff: Backoff,
    host: String,
    secrets: Vec<Secret>,
}

/// Why one attempt failed, and whether another may do better.
struct Failed {
    message: String,
    retry: bool,
    wait: Option<Duration>,
}

impl Target {
    /// The targets `settings` name: the command, the webhook, or both.
    pub(crate) fn all(settings: &NotifySettings, host: &str, secrets: &[Secret]) -> Vec<Target> {
        let command = settings.command.clone().map(To::Command);
        let webhook = settings.webhook.clone().map(|hook| {
            let client = reqwest::Client::builder()
                .timeout(settings.timeout)
                .connect_timeout(settings.timeout)
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("sandguard/", env!("CARGO_PKG_VERSION")))
                .build()
                .unwrap_or_default();
            To::Webhook(hook, client)
        });
        command
            .into_iter()
            .chain(webhook)
            .map(|to| Target {
                to,
                timeout: settings.timeout,
                attempts: settings.attempts.max(1),
                backoff: Backoff::new(settings.retry_initial, MAX_PAUSE),
                host: host.to_string(),
                secrets: secrets.to_vec(),
            })
            .collect()
    }

    /// Delivers every event of `queue` until it closes.
    pub(crate) async fn run(self, mut queue: mpsc::Receiver<Event>) {
        while let Some(event) = queue.recv().await {
            let payload = event.payload(&self.host, &self.secrets);
            let mut body = payload.to_string().into_bytes();
            body.push(b'\n');
            let kind = event.kind.as_str();
            match &self.to {
                To::Command(argv) => {
                    let name = argv.first().map_or("", String::as_str);
                    let what = format!("command {}", crate::protocol::echo(name.as_bytes()));
                    self.attempt(kind, &what, || run_command(argv, &body, self.timeout))
                        .await;
                }
                To::Webhook(hook, client) => {
                    let what = format!("webhook {}", hook.display());
                    self.attempt(kind, &what, || post(client, hook, &body))
                        .await;
                }
            }
        }
    }

    /// Tries `once` up to `attempts` times; logs the give-up.
    async fn attempt<F, Fut>(&self, kind: &str, what: &str, once: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), Failed>>,
    {
        for n in 1..=self.attempts {
            let failed = match once().await {
                Ok(()) => {
                    tracing::debug!("notify: {kind} sent to {what}");
                    return;
                }
                Err(failed) => failed,
            };
            let message = crate::providers::redact::redact(&failed.message, &self.secrets);
            if !failed.retry || n == self.attempts {
                tracing::warn!(
                    "notify: {kind} not sent to {what} after {n} attempt{}: {message}; given up",
                    if n == 1 { "" } else { "s" }
                );
                return;
            }
            let pause = self
                .backoff
                .delay(n)
                .max(failed.wait.unwrap_or_default())
                .min(MAX_PAUSE);
            tracing::info!("notify: {kind} to {what} failed ({message}); again in {pause:?}");
            tokio::time::sleep(pause).await;
        }
    }
}

/// One run of the command with `body` on its stdin.
async fn run_command(argv: &[String], body: &[u8], timeout: Duration) -> Result<(), Failed> {
    let Some((program, args)) = argv.split_first() else {
        return Err(Failed {
            message: "no program".into(),
            retry: false,
            wait: None,
        });
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(|e| Failed {
            message: format!("cannot run it: {e}"),
            retry: true,
            wait: None,
        })?;
    let group = child.id();
    let stdin = child.stdin.take();
    let exchange = async {
        if let Some(mut stdin) = stdin {
            // A command that exits without reading is judged by its status.
            let _ = stdin.write_all(body).await;
        }
        child.wait().await
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(Failed {
            message: format!("it exited with {status}"),
            retry: true,
            wait: None,
        }),
        Ok(Err(e)) => Err(Failed {
            message: format!("cannot wait for it: {e}"),
            retry: true,
            wait: None,
        }),
        Err(_) => {
            // Not reaped (its wait never returned): the group id cannot have been reused.
            if let Some(group) = group {
                if let Err(e) = crate::unix::kill_process_group(group) {
                    tracing::warn!("notify: cannot kill the command's group {group}: {e}");
                }
            }
            let _ = child.start_kill();
            Err(Failed {
                message: format!("it did not exit within {timeout:?}; killed it"),
                retry: true,
                wait: None,
            })
        }
    }
}

/// One POST of `body` to `hook`.
async fn post(client: &reqwest::Client, hook: &Webhook, body: &[u8]) -> Result<(), Failed> {
    let sent = client
        .post(hook.expose())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_vec())
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => {
            return Err(Failed {
                message: e.without_url().to_string(),
                retry: true,
                wait: None,
            })
        }
    };
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let wait = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    Err(Failed {
        message: format!("it answered {status}"),
        retry: status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS,
        wait,
    })
}
