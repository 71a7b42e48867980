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
//!
//! The proxy's own request goes through hyper's client on a connection of its own
//! (title-case header names, as the docker CLI writes them), not on the client's.

use std::io;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{CONNECTION, CONTENT_TYPE, HOST, USER_AGENT};
use hyper::Request;
use hyper_util::rt::TokioIo;

use super::create::Volume;
use super::target::Create;
use super::{claim_volume, create, Hold, Shared};
use crate::proxy::refusal::Refusal;

/// The largest answer read for a volume create.
const MAX_ANSWER: usize = 1024 * 1024;

/// Makes `volume` (if it does not exist yet) with the session's labels, and claims it if this
/// call made it: as a detach, with `sandguard.detached=true` among its labels, when the
/// container it is made for (`container`) or the mount's own labels ask to be detached.
pub(super) async fn precreate(
    shared: &Shared,
    version: &str,
    volume: &Volume,
    container: Hold,
) -> Result<(), Refusal> {
    let hold = volume.hold(container);
    let mut stamp = shared.labels.session.clone();
    if hold == Hold::Detach {
        stamp.insert(crate::labels::DETACHED.into(), "true".into());
    }
    let body = volume.create_body(&stamp);
    let name = &volume.name;
    let (status, answer) = match send(shared, version, body).await {
        Ok(a) => a,
        Err(e) => {
            let message =
                format!("sandguard: cannot create volume {name:?} for this container: {e}");
            return Err(Refusal::said(502, message));
        }
    };
    if !(200..300).contains(&status) {
        let said = serde_json::from_slice::<serde_json::Value>(&answer)
            .ok()
            .and_then(|v| v.get("message")?.as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&answer).trim().to_string());
        let message =
            format!("sandguard: cannot create volume {name:?} for this container: {said}");
        return Err(Refusal::said(status, message));
    }
    match create::claimable(Create::Volume, &answer, &shared.session) {
        Some(made) => claim_volume(shared, made, hold).await,
        None => tracing::debug!("docker proxy: volume {name:?} existed already; not claimed"),
    }
    Ok(())
}

/// One `POST {version}/volumes/create` on a fresh connection: the final answer's status and
/// body (at most [`MAX_ANSWER`] bytes).
async fn send(shared: &Shared, version: &str, body: Vec<u8>) -> io::Result<(u16, Bytes)> {
    let io = TokioIo::new(shared.upstream.connect().await?);
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(io)
        .await
        .map_err(io::Error::other)?;
    let req = Request::post(format!("{version}/volumes/create"))
        .header(HOST, "docker")
        .header(USER_AGENT, "sandguard")
        .header(CONTENT_TYPE, "application/json")
        .header(CONNECTION, "close")
        .body(Full::new(Bytes::from(body)))
        .map_err(io::Error::other)?;
    // The connection is driven alongside the exchange, and ends with it (the sender dropped).
    let exchange = async move {
        let answer = sender.send_request(req).await.map_err(io::Error::other)?;
        let status = answer.status().as_u16();
        let limited = Limited::new(answer.into_body(), MAX_ANSWER);
        let data = limited.collect().await.map_err(io::Error::other)?;
        Ok::<_, io::Error>((status, data.to_bytes()))
    };
    let (answer, _) = tokio::join!(exchange, conn);
    answer
}
