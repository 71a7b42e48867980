//! The named volumes of a container create, made by the proxy before the create goes on.
//!
//! `docker run -v NAME:/path` (or `--mount type=volume,src=NAME`) makes the volume inside the
//! container create, with no labels and no answer naming it. So before forwarding the create
//! the proxy sends its own `POST [/vX.Y]/volumes/create` for each named volume (on a fresh
//! connection to the daemon, `Connection: close`), with the session's labels. Docker's volume
//! create is idempotent: a volume this call made comes back with the session's label and is
//! claimed (journaled before the container create goes on), one that already existed comes
//! back with its own labels and is left alone. The container create then finds the volume
//! there and uses it, as it would have used one it made itself.
//!
//! When the daemon refuses a volume (an unknown driver, an invalid name), the container
//! create would have failed on it too: the client gets the daemon's status and message, and
//! the create is not sent, so no volume is ever made unlabelled.

use std::io;

use tokio::io::{AsyncWriteExt, BufReader};

use super::create::Volume;
use super::exchange::Refusal;
use super::http::{self, Head, Message};
use super::target::Create;
use super::{body, claim, create, Hold, Shared};

/// The largest answer read for a volume create.
const MAX_ANSWER: u64 = 1024 * 1024;

/// Makes `volume` (if it does not exist yet) with the session's labels, and claims it if this
/// call made it: as a detach, with `sandguard.detached=true` among its labels, when the
/// container it is made for (`container`) or the mount's own labels ask to be detached.
pub async fn precreate(
    shared: &Shared,
    version: &str,
    volume: &Volume,
    container: Hold,
) -> Result<(), Refusal> {
    let hold = volume.hold(container);
    let mut stamp = shared.labels.clone();
    if hold == Hold::Detach {
        stamp.insert(crate::labels::DETACHED.into(), "true".into());
    }
    let body = volume.create_body(&stamp);
    let head = format!(
        "POST {version}/volumes/create HTTP/1.1\r\nHost: docker\r\nUser-Agent: sandguard\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let name = &volume.name;
    let (status, answer) = match send(shared, head.as_bytes(), &body).await {
        Ok(a) => a,
        Err(e) => {
            let message =
                format!("sandguard: cannot create volume {name:?} for this container: {e}");
            return Err(Refusal::new(502, message));
        }
    };
    if !(200..300).contains(&status) {
        let said = serde_json::from_slice::<serde_json::Value>(&answer)
            .ok()
            .and_then(|v| v.get("message")?.as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&answer).trim().to_string());
        let message =
            format!("sandguard: cannot create volume {name:?} for this container: {said}");
        return Err(Refusal::new(status, message));
    }
    match create::claimable(Create::Volume, &answer, &shared.session) {
        Some(id) => claim(shared, Create::Volume, &id, hold).await,
        None => tracing::debug!("docker proxy: volume {name:?} existed already; not claimed"),
    }
    Ok(())
}

/// One request on a fresh connection: the final answer's status and body.
async fn send(shared: &Shared, head: &[u8], body: &[u8]) -> io::Result<(u16, Vec<u8>)> {
    let mut up = shared.upstream.connect().await?;
    up.write_all(head).await?;
    up.write_all(body).await?;
    up.flush().await?;
    let mut r = BufReader::new(up);
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    loop {
        let Some(Head::Complete(head)) = http::read_head(&mut r).await? else {
            return Err(bad("the daemon's answer was cut short"));
        };
        let answer =
            Message::response(&head).ok_or_else(|| bad("the daemon's answer is not HTTP"))?;
        if (100..200).contains(&answer.status()) {
            continue;
        }
        let framing = answer
            .framing(true)
            .ok_or_else(|| bad("the daemon's answer has no framing"))?;
        let data = body::read_body(&mut r, framing, MAX_ANSWER).await?;
        return Ok((answer.status(), data));
    }
}
