//! What the sidecar's loop waits on ([`Triggers`]), and the small readers over each: the
//! control pipe and the proxy's claims, either of which may be absent (pending forever), and
//! the drain of claims still arriving while a session ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncRead;

use crate::identity::death::{ExitProbe, Gone};
use crate::ledger::Record;
use crate::protocol::{Command, LineReader, ProtocolError, Target};
use crate::providers::{Provider, Sandbox};
use crate::proxy::claim::Ask as ProxyAsk;
use crate::reclaim::ending::{self, SharedJournal};

/// The events the loop waits on, injected.
pub(crate) struct Triggers<R> {
    /// Resolves when the owner is gone ([`crate::identity::death::OwnerWatch::wait`] in production).
    pub owner: Pin<Box<dyn Future<Output = Gone> + Send>>,
    /// Learns how the owner ended, once it has ([`crate::identity::death::ExitProbe`]); `None`
    /// where nothing can tell.
    pub exit: Option<ExitProbe>,
    pub control: Option<LineReader<R>>,
    /// Claims from the Docker API proxy ([`crate::proxy::docker`]), when it runs.
    pub proxy: Option<tokio::sync::mpsc::UnboundedReceiver<ProxyAsk>>,
    pub stop: Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// Why a claim, release or detach of `t` can never be acted on by this session, if it cannot:
/// its provider is not configured, or that provider's parser refuses the id
/// ([`Provider::parse_claim`], [`crate::providers::ids`]). The loop asks it of every line from
/// the control pipe, and [`drain_claims`] of every late claim.
pub(super) fn refusal(providers: &[Arc<dyn Provider>], t: &Target) -> Option<String> {
    match crate::providers::by_name(providers, &t.provider) {
        None => Some(format!(
            "provider {:?} is not configured for this session",
            t.provider
        )),
        Some(p) => p.parse_claim(&t.id).err().map(|r| r.0),
    }
}

pub(super) async fn next_line<R: AsyncRead + Unpin>(
    control: &mut Option<LineReader<R>>,
) -> Option<Result<Command, ProtocolError>> {
    match control {
        Some(reader) => reader.next().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn next_aged(
    aged: &mut Option<tokio::sync::mpsc::UnboundedReceiver<super::limits::Aged>>,
) -> Option<super::limits::Aged> {
    match aged {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn next_claim(
    proxy: &mut Option<tokio::sync::mpsc::UnboundedReceiver<ProxyAsk>>,
) -> Option<ProxyAsk> {
    match proxy {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Claims still in the pipe when the owner died (or that a surviving child of the owner
/// writes while the first pass runs), read for at most `settle`, each journaled as it
/// arrives (refused ones as refused) so that `sandguard claim` sees it acknowledged.
pub(super) async fn drain_claims<R: AsyncRead + Unpin>(
    control: Option<LineReader<R>>,
    settle: Duration,
    journal: &SharedJournal,
    providers: &[Arc<dyn Provider>],
) -> Vec<Sandbox> {
    let Some(mut reader) = control else {
        return Vec::new();
    };
    let mut late = Vec::new();
    let deadline = tokio::time::sleep(settle);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            line = reader.next() => match line {
                Some(Ok(Command::Claim(t))) => match refusal(providers, &t) {
                    None => {
                        ending::append(journal, &Record::claim(&t));
                        if let Ok(s) = Sandbox::from_claim(providers, &t) {
                            late.push(s);
                        }
                    }
                    Some(reason) => ending::append(journal, &Record::Refused {
                        provider: t.provider,
                        id: t.id,
                        reason,
                    }),
                },
                Some(_) => {}
                None => break,
            }
        }
    }
    late
}
