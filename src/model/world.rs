//! The world a history runs in: the real code paths, against in-memory providers.
//!
//! - **Owners are real processes** (`sh -c 'read _'`, a child of the test), so the real judge
//!   ([`crate::identity::Judge`], reading `/proc`) and the real death source (a pidfd,
//!   [`OwnerWatch`]) see them live and die. Death: stdin closed (it exits), SIGKILL, or
//!   SIGTERM together with a stop request to the sidecar (a group SIGTERM).
//! - **Each session runs the real sidecar service** ([`crate::watch::service::run`]: the watch
//!   loop, the TTL keeper, the fleet registrar) with injected triggers: an in-memory control
//!   pipe, the proxy's claim channel, the stop request. Its death is an abort of its task,
//!   which drops its journal (freeing the lock) and its tasks, as a SIGKILL would.
//! - Deaths are in [`super::deaths`], control lines in [`super::control`], creates in
//!   [`super::making`], and `stop`, sweeps, pruning and provider faults in [`super::calls`].
//! - **The ledger lives on a tmpfs** (`/dev/shm` where there is one): every claim and every
//!   session ending is fsynced, which on a disk costs more than the rest of a step; the model
//!   checks the rules, not durability.
//! - **No fork while a sweep reads the ledger** ([`FORKS`]): histories run side by side in
//!   one process, and a child being spawned holds a copy of every descriptor until it execs,
//!   a journal's too, so a sidecar that just ended could look alive (its lock held) to a
//!   sweep of another history. A process would not see that; the model must not either.
//! - **A sidecar is gone when its lock is free**: after its task ends (the owner died, or it
//!   was aborted), the step waits until the journal's lock reads free. In-process the lock
//!   can outlive the task for a moment (seen under load, four histories at a time), which a
//!   sweep then takes for a live sidecar; a sidecar process frees it when it exits.
//! - **Real time, tiny delays** (retries of milliseconds, a 5 ms settle, an 80 ms reclaim
//!   deadline, a 90 ms fleet lease): the death source is a real pidfd, which tokio's paused
//!   clock would race past (with nothing else to do, the paused clock jumps to the next timer
//!   while the pidfd's readiness is still on its way). Every wait for the code is a poll with
//!   a deadline ([`PATIENCE`], 10 s: a hang, not a slow machine).
//! - **No verdict depends on the machine's speed.** The short reclaim deadline applies only
//!   where a provider may be faulty, and there the checks assert nothing about what is left;
//!   a sweep against healthy providers, after which "nothing of a dead owner is left" is
//!   checked, reclaims with [`PATIENCE`] ([`sweep_options`]). A late lease renewal under load
//!   is a lapse the oracle is told of (`World::lapsed`), never a false failure.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::ops::{box_id, Crash, PROVIDERS};
use super::oracle::Oracle;
use crate::fleet::memory::MemoryStore;
use crate::fleet::SessionRecord;
use crate::identity::death::OwnerWatch;
use crate::identity::Identity;
use crate::ledger::faults::Faults;
use crate::ledger::{Record, StateDir};
use crate::protocol::{LineReader, Target};
use crate::providers::fake::Fake;
use crate::providers::Provider;
use crate::proxy::claim::Ask as ProxyAsk;
use crate::reclaim::Options;
use crate::watch::fleet::Registration;
use crate::watch::{service, Ended, Triggers};

/// The fleet lease of every sidecar (renewed every third of it).
pub(super) const LEASE: Duration = Duration::from_millis(90);
/// How often a limited session's keeper runs ([`super::ops::Limit`]).
pub(super) const LIMIT_ROUNDS: Duration = Duration::from_millis(7);

/// How long [`super::ops::Op::Pause`] lets the keepers run: a few rounds of each (the limit
/// keeper's [`LIMIT_ROUNDS`], the TTL keeper's 10 ms). Time passing, not a synchronisation:
/// on a loaded machine a keeper may run fewer rounds, which can only miss a bug, never blame
/// correct code.
pub(super) const PAUSE: Duration = Duration::from_millis(30);

/// The budget of a session started with `limit`: a lifetime of 0 (every sandbox is past it),
/// or a spend of 1 ms of sandbox time that reclaims (reached as soon as anything is held).
fn budget(limit: Option<super::ops::Limit>) -> crate::budget::Budget {
    use super::ops::Limit;
    let limits = match limit {
        None => crate::budget::Limits::default(),
        Some(Limit::Lifetime) => crate::budget::Limits {
            lifetime: Some(Duration::ZERO),
            ..Default::default()
        },
        Some(Limit::Spend) => crate::budget::Limits {
            spend: Some(crate::budget::Spend::Time(Duration::from_millis(1))),
            on_spend: Some(crate::budget::OnSpend::Reclaim),
            ..Default::default()
        },
    };
    limits.into()
}

/// How long the model waits for the code to do something before it calls it stuck.
pub(super) const PATIENCE: Duration = Duration::from_secs(10);

/// Taken for writing while an owner is spawned, for reading while a sweep or a prune runs
/// (see the module docs).
pub(super) static FORKS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The reclaim deadline where a provider may be faulty: short, so that a removal failing for
/// good ends `pending` within the step, and nothing is asserted about what it left.
pub(super) const DEADLINE: Duration = Duration::from_millis(80);

pub(super) fn options(settle: Option<Duration>) -> Options {
    options_until(settle, DEADLINE)
}

/// The options of a sweep: when every provider is healthy at its start (none can turn faulty
/// during a step), its reclaim has [`PATIENCE`] rather than [`DEADLINE`]. The promise checked
/// after such a sweep, that nothing of a dead owner is left, must not depend on how fast the
/// machine runs: with 80 ms, a loaded machine (a starved runtime thread, a slow fsync) made a
/// correct sweep stop at its deadline, leave the rest pending, and fail `LeftBehind`. With
/// healthy providers nothing is retried, so the longer deadline costs no time; only a hang
/// would reach it, and the step then reports it as the sweep leaving work behind.
pub(super) fn sweep_options(healthy: bool) -> Options {
    options_until(None, if healthy { PATIENCE } else { DEADLINE })
}

fn options_until(settle: Option<Duration>, deadline: Duration) -> Options {
    Options {
        concurrency: 4,
        deadline,
        retry_initial: Duration::from_millis(2),
        retry_max: Duration::from_millis(10),
        settle,
        rates: Default::default(),
        paces: Default::default(),
        cutoff: Default::default(),
        windows: Default::default(),
    }
}

pub(super) struct Session {
    pub(super) id: String,
    pub(super) owner: Identity,
    pub(super) child: Child,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) pipe: Option<tokio::io::DuplexStream>,
    pub(super) proxy: Option<tokio::sync::mpsc::UnboundedSender<ProxyAsk>>,
    pub(super) stop: Option<oneshot::Sender<()>>,
    pub(super) run: Option<JoinHandle<Ended>>,
    /// Where its sidecar's journal writes fail (`crate::ledger::faults`).
    pub(super) faults: Faults,
    /// The limit its keeper keeps while the owner lives, if any ([`super::ops::Limit`]).
    pub(super) limit: Option<super::ops::Limit>,
}

/// A begun journal, and the session it resumed (`None`: a new one).
type Begun = (crate::ledger::Journal, Option<crate::ledger::SessionView>);

/// How a wedge's message starts: a start refused for good after a crash.
pub(super) const WEDGED: &str = "wedged: ";

/// How the message of a claim kept on what the provider said went by itself starts.
pub(super) const HELD_GONE: &str = "held gone: ";

/// How the message of a claim released on a removal the provider refused starts.
pub(super) const UNCONFIRMED: &str = "released unconfirmed: ";

/// A fresh directory for one history's ledger, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Scratch {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let shm = std::path::Path::new("/dev/shm");
        let root = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("sandguard-model-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) struct World {
    _dir: Scratch,
    pub state: StateDir,
    pub fakes: Vec<Arc<Fake>>,
    pub(super) providers: Vec<Arc<dyn Provider>>,
    pub(super) store: Arc<MemoryStore>,
    pub(super) sessions: BTreeMap<usize, Session>,
    /// Where each sandbox was made (provider index).
    pub(super) made: BTreeMap<usize, usize>,
    /// The identity of the object made last under each sandbox's id.
    pub(super) latest: BTreeMap<usize, String>,
    /// When each dead owner's reclaim began (its first removal call, else its sidecar's end).
    pub reclaim_began: BTreeMap<usize, Instant>,
    /// Fences written so far ([`super::control`]).
    pub(super) fences: usize,
    /// Objects made so far: each one's identity ([`crate::providers::Sandbox::identity`]).
    pub(super) generation: u64,
}

impl World {
    pub(super) fn new() -> World {
        let dir = Scratch::new();
        let state = StateDir::open(&dir.0).expect("a state directory for the model");
        let fakes: Vec<Arc<Fake>> = PROVIDERS
            .iter()
            .enumerate()
            .map(|(i, name)| {
                Arc::new(Fake {
                    name: Some((*name).to_string()),
                    ttl: i == 0,
                    reuses_ids: true,
                    // One provider follows its sessions as Docker does, its news of the
                    // last create always late: the reclaim that trusts following must still
                    // find that one (issue 44).
                    follows: i == 0,
                    ..Default::default()
                })
            })
            .collect();
        let providers = fakes
            .iter()
            .map(|f| f.clone() as Arc<dyn Provider>)
            .collect();
        World {
            _dir: dir,
            state,
            fakes,
            providers,
            store: Arc::new(MemoryStore::default()),
            sessions: BTreeMap::new(),
            made: BTreeMap::new(),
            latest: BTreeMap::new(),
            reclaim_began: BTreeMap::new(),
            fences: 0,
            generation: 0,
        }
    }

    /// Every sandbox id the providers hold.
    pub(super) fn ids(&self) -> BTreeSet<String> {
        self.fakes.iter().flat_map(|f| f.remaining()).collect()
    }

    pub(super) fn healthy(&self) -> bool {
        self.fakes.iter().all(|f| !f.faulty())
    }

    pub(super) fn session_id(s: usize) -> String {
        format!("s{s}")
    }

    pub(super) fn guarded(&self, s: usize) -> bool {
        self.sessions.get(&s).is_some_and(|x| x.run.is_some())
    }

    /// Session `s`: a real owner, then its sidecar started as `watch --session S` starts it
    /// (`begin_session`, then the service); `crash`: the sidecar's journal writes fail from
    /// the given one on (it dies there, or its disk is full), its journal's creation included.
    pub(super) async fn start(
        &mut self,
        s: usize,
        (crash, wrapper, limit): (Option<Crash>, bool, Option<super::ops::Limit>),
        o: &mut Oracle,
    ) -> Result<(), String> {
        if self.sessions.contains_key(&s) {
            return Ok(());
        }
        let child = {
            let _forking = FORKS.write().await;
            Command::new("sh")
                .args(["-c", "read _"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start an owner: {e}"))?
        };
        let owner = Identity::of_pid(child.id()).ok_or("the owner vanished at start")?;
        let id = World::session_id(s);
        let labels = crate::session::labels(&id, &owner);
        self.sessions.insert(
            s,
            Session {
                id,
                owner,
                child,
                labels,
                pipe: None,
                proxy: None,
                stop: None,
                run: None,
                faults: crash.map_or_else(Faults::counting, Crash::faults),
                limit,
            },
        );
        o.start(s);
        if limit.is_some() {
            o.limited(s);
        }
        let begun = match wrapper {
            true => self.hand_over(s),
            false => self.begin(s),
        };
        match begun {
            // Refused (its disk full), or dead in its start: the owner runs unguarded.
            Err(_) => {
                o.sidecar_dies(s);
                Ok(())
            }
            Ok(begun) => self.guard(s, begun),
        }
    }

    /// `watch --session S` for a live owner whose sidecar is gone: it must begin or resume the
    /// session (unless a live holder of the lock refuses it); anything else is a wedge.
    pub(super) async fn restart(&mut self, s: usize, o: &mut Oracle) -> Result<(), String> {
        let Some(session) = self.sessions.get_mut(&s) else {
            return Ok(());
        };
        if session.run.is_some() || !o.alive(s) {
            return Ok(());
        }
        session.faults = Faults::counting();
        match self.begin(s) {
            Ok(begun) => {
                self.guard(s, begun)?;
                o.restart(s);
                Ok(())
            }
            Err(crate::ledger::LedgerError::Locked { .. }) => Ok(()),
            Err(e) => Err(format!("{WEDGED}s{s}'s restarted sidecar was refused: {e}")),
        }
    }

    /// The journal of session `s`, begun or resumed as `watch --session S` does it, its writes
    /// failing as the session's faults say.
    fn begin(&self, s: usize) -> Result<Begun, crate::ledger::LedgerError> {
        let session = &self.sessions[&s];
        let (owner, pid) = (session.owner.to_label(), session.owner.pid);
        let start = Record::Start {
            owner: owner.clone(),
            pid,
            grace_ms: 600_000,
            labels: session.labels.clone(),
        };
        let resume = Record::Resume {
            owner,
            pid,
            grace_ms: 600_000,
            labels: session.labels.clone(),
        };
        let state = self.state.with_faults(session.faults.clone());
        state.begin_session(&session.id, start, &resume, Duration::from_millis(200))
    }

    /// The journal of new session `s` as the wrapper makes it (unsynced) and its sidecar takes
    /// it (synced), both writing as the session's faults say.
    fn hand_over(&self, s: usize) -> Result<Begun, crate::ledger::LedgerError> {
        let session = &self.sessions[&s];
        let start = Record::Start {
            owner: session.owner.to_label(),
            pid: session.owner.pid,
            grace_ms: 600_000,
            labels: session.labels.clone(),
        };
        let state = self.state.with_faults(session.faults.clone());
        let made = state.create_session_unsynced(&session.id, start)?;
        let file = made
            .file()
            .try_clone()
            .map_err(|e| crate::ledger::LedgerError::Io {
                op: "hand over",
                path: made.path().to_path_buf(),
                source: e,
            })?;
        // The wrapper execs the program: its copy of the descriptor goes, the lock stays.
        drop(made);
        Ok((state.handed_session(&session.id, file)?, None))
    }

    /// Runs session `s`'s sidecar service on its begun journal, holding what a resumed
    /// session held; unless its start already died (then the journal goes with it).
    fn guard(&mut self, s: usize, (journal, resumed): Begun) -> Result<(), String> {
        let session = self.sessions.get_mut(&s).ok_or("no such session")?;
        if session.faults.died() {
            return Ok(());
        }
        let id = session.id.clone();
        let record = SessionRecord {
            id: id.clone(),
            host: "here".into(),
            owner: session.owner.to_label(),
            pid: session.owner.pid,
            labels: session.labels.clone(),
            providers: PROVIDERS.iter().map(|p| (*p).to_string()).collect(),
            started_ms: resumed
                .as_ref()
                .map_or_else(crate::ledger::now_ms, |v| v.started_ms),
        };
        let held = resumed.map_or_else(Default::default, |v| crate::fleet::Holdings {
            claims: v.claims,
            detached: v.detached,
        });
        let began_ms = Some(record.started_ms);
        let plan = service::SidecarService {
            session: id,
            journal,
            began_ms,
            warm_up: Duration::ZERO,
            providers: self.providers.clone(),
            grace: Duration::from_secs(600),
            renew_every: Duration::from_millis(10),
            limit_rounds: Some(LIMIT_ROUNDS),
            options: options(Some(Duration::from_millis(5))),
            proxy: None,
            cloud: Vec::new(),
            fleet: Some(Registration {
                store: self.store.clone(),
                record,
                lease: LEASE,
                tally: None,
            }),
            bye_report: None,
            end_report: None,
            notice: None,
            notify: crate::notify::Lazy::none(),
            held,
            budget: (
                budget(session.limit),
                Default::default(),
                Default::default(),
            ),
        };
        let (pipe, end) = tokio::io::duplex(64 * 1024);
        let (proxy, claims) = tokio::sync::mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let mut watch = OwnerWatch::open(&session.owner);
        let triggers = Triggers {
            owner: Box::pin(async move { watch.wait().await }),
            exit: None,
            control: Some(LineReader::new(end)),
            proxy: Some(claims),
            stop: Box::pin(async move {
                let _ = stopped.await;
            }),
        };
        session.pipe = Some(pipe);
        session.proxy = Some(proxy);
        session.stop = Some(stop);
        session.run = Some(tokio::spawn(service::run(plan, triggers)));
        Ok(())
    }

    /// Session `s`'s running sidecar dies at its `after`-th journal write from now.
    pub(super) fn crash_at(&self, s: usize, after: u8) {
        if let Some(session) = self.sessions.get(&s).filter(|v| v.run.is_some()) {
            let die = crate::ledger::faults::Fault::Die;
            session.faults.arm(after.into(), die);
        }
    }

    /// Ends the sidecars that died at a journal write in the step (a process would be gone):
    /// their tasks aborted, their locks freed; the oracle is told.
    pub(super) async fn reap(&mut self, o: &mut Oracle) {
        let dead: Vec<usize> = self
            .sessions
            .iter()
            .filter(|(_, v)| v.faults.died())
            .map(|(&s, _)| s)
            .collect();
        for s in dead {
            self.sidecar_dies(s, o).await;
        }
    }

    pub(super) fn target(&self, x: usize) -> Option<Target> {
        let p = *self.made.get(&x)?;
        Target::new(PROVIDERS[p], &box_id(x)).ok()
    }

    /// What a proxy claims for sandbox `x`: its id pinned to the object there now (the Docker
    /// proxy pins a volume to the `CreatedAt` of its create's answer).
    pub(super) fn pinned(&self, x: usize) -> Option<Target> {
        let p = *self.made.get(&x)?;
        let id = box_id(x);
        let all = self.fakes[p].sandboxes.lock().unwrap();
        let now = all.iter().find(|s| s.id == id)?;
        Target::new(PROVIDERS[p], &self.fakes[p].claim_id(now)).ok()
    }

    /// Every session's ledger state, by model name.
    pub(super) fn ledger_states(&self) -> BTreeMap<usize, crate::ledger::SessionState> {
        let views = self.state.sessions().unwrap_or_default();
        self.sessions
            .iter()
            .filter_map(|(&s, v)| Some((s, views.iter().find(|w| w.id == v.id)?.state)))
            .collect()
    }

    /// Stops every sidecar and owner, and reaps the owners.
    pub(super) async fn shutdown(mut self) {
        for session in self.sessions.values_mut() {
            if let Some(run) = session.run.take() {
                run.abort();
                let _ = run.await;
            }
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for session in self.sessions.values_mut() {
            let _ = session.child.kill();
            let _ = session.child.wait();
        }
    }
}
