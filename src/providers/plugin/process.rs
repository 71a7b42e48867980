//! Running one call of a plugin: `COMMAND… VERB` in a process group of its own, the request
//! written to its stdin, its stdout and stderr read to the end within their limits, all at
//! once so no pipe can fill and stall, and the whole group killed at the time limit.

use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;

use super::wire::Answer;
use super::Plugin;
use crate::providers::ProviderError;

/// The protocol version, in the plugin's environment as `SANDGUARD_PLUGIN_PROTOCOL`.
const PROTOCOL: &str = "1";

/// A reply larger than this is refused (the rest of stdout is read and discarded).
const MAX_REPLY: usize = 16 << 20;

/// How much of a plugin's stderr is kept for error messages.
const MAX_STDERR: usize = 64 << 10;

impl Plugin {
    /// Runs `COMMAND… verb` with `request` on stdin and collects its answer, killing the
    /// plugin's whole process group at the time limit.
    pub(super) async fn call(
        &self,
        verb: &str,
        request: serde_json::Value,
    ) -> Result<Answer, ProviderError> {
        let program = self.program();
        let mut body = request.to_string().into_bytes();
        body.push(b'\n');
        let Some((executable, args)) = self.command.split_first() else {
            return Err(ProviderError::fatal(format!(
                "plugin {} has no command",
                self.name
            )));
        };
        let mut child = tokio::process::Command::new(executable)
            .args(args)
            .arg(verb)
            .env("SANDGUARD_PLUGIN_PROTOCOL", PROTOCOL)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .map_err(|e| ProviderError::fatal(format!("cannot run plugin {program}: {e}")))?;
        let group = child.id();
        match tokio::time::timeout(self.timeout, exchange(&mut child, body)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(ProviderError::transient(format!(
                "cannot talk to plugin {program}: {e}"
            ))),
            Err(_) => {
                // The leader is not reaped yet (its wait never returned), so the group id
                // cannot have been reused.
                if let Some(group) = group {
                    if let Err(e) = crate::unix::kill_process_group(group) {
                        tracing::warn!("cannot kill plugin {program} (group {group}): {e}");
                    }
                }
                let _ = child.start_kill();
                Err(ProviderError::transient(format!(
                    "plugin {program} did not answer `{verb}` within {:?}; killed it",
                    self.timeout
                )))
            }
        }
    }
}

/// Writes the request, closes stdin, reads stdout and stderr to the end (keeping at most
/// their limits) and waits for the exit status, all at once so no pipe can fill and stall.
async fn exchange(child: &mut Child, body: Vec<u8>) -> std::io::Result<Answer> {
    let stdin = child.stdin.take();
    let write = async move {
        if let Some(mut stdin) = stdin {
            // A plugin that exits without reading its request is judged by its reply.
            let _ = stdin.write_all(&body).await;
        }
    };
    let (_, (stdout, stdout_truncated), (stderr, _)) = tokio::join!(
        write,
        read_capped(child.stdout.take(), MAX_REPLY),
        read_capped(child.stderr.take(), MAX_STDERR),
    );
    let status = child.wait().await?;
    Ok(Answer {
        status,
        stdout,
        stdout_truncated,
        stderr,
    })
}

/// Reads `reader` to its end, keeping the first `cap` bytes; `true` when more were discarded.
async fn read_capped(reader: Option<impl AsyncRead + Unpin>, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let Some(mut reader) = reader else {
        return (kept, truncated);
    };
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap - kept.len();
                truncated |= n > room;
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, truncated)
}
