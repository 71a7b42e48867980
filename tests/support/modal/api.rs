//! What the emulated service does with a call that got through: the sandboxes, their tags and
//! environments, the auth tokens it issued.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sandguard::testing::providers::modal::wire::{
    self, SandboxInfo, SandboxListRequest, SandboxListResponse, SandboxTag,
};
use tonic::metadata::MetadataMap;
use tonic::Status;

use super::server::Server;
use super::{TOKEN_ID, TOKEN_SECRET};

/// The environment an empty `environment_name` means.
pub const DEFAULT_ENVIRONMENT: &str = "main";

/// How a sandbox was made: through the V1 RPCs or the V2 ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gen {
    V1,
    V2,
}

/// One sandbox as the emulator keeps it.
#[derive(Debug, Clone)]
pub struct Sb {
    pub id: String,
    pub generation: Gen,
    pub environment: String,
    pub created_at: f64,
    pub tags: Vec<SandboxTag>,
    /// The `GenericStatus` it finished with.
    pub finished: Option<i32>,
}

pub struct State {
    pub server: Server,
    pub sandboxes: Mutex<Vec<Sb>>,
    pub clock: Mutex<f64>,
    pub next_id: Mutex<u64>,
    pub hide_tags: AtomicBool,
    pub page_size: AtomicUsize,
    pub token_lifetime: Mutex<Duration>,
    /// Every auth token issued, with its `exp`.
    pub tokens: Mutex<Vec<(String, f64)>>,
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn not_found(id: &str) -> Status {
    Status::not_found(format!("Sandbox {id} not found"))
}

impl State {
    pub fn new(page_size: usize) -> State {
        State {
            server: Server::default(),
            sandboxes: Mutex::new(Vec::new()),
            clock: Mutex::new(now_unix()),
            next_id: Mutex::new(0),
            hide_tags: AtomicBool::new(false),
            page_size: AtomicUsize::new(page_size),
            token_lifetime: Mutex::new(Duration::from_secs(3600)),
            tokens: Mutex::new(Vec::new()),
        }
    }

    /// The token id and secret every call must carry, and the client's type and version.
    pub fn authorize(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let get = |k: &str| metadata.get(k).and_then(|v| v.to_str().ok());
        if get("x-modal-token-id") != Some(TOKEN_ID)
            || get("x-modal-token-secret") != Some(TOKEN_SECRET)
        {
            return Err(Status::unauthenticated(
                "Token ID is malformed or invalid. Please check your Modal token.",
            ));
        }
        if get("x-modal-client-type").is_none() || get("x-modal-client-version").is_none() {
            return Err(Status::failed_precondition(
                "missing client type or version",
            ));
        }
        Ok(())
    }

    /// What a V2 RPC wants beside: an auth token this emulator issued, not yet expired.
    fn authorize_v2(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let Some(token) = metadata
            .get("x-modal-auth-token")
            .and_then(|v| v.to_str().ok())
        else {
            return Err(Status::unauthenticated("missing x-modal-auth-token"));
        };
        let now = now_unix();
        let tokens = self.tokens.lock().unwrap();
        match tokens.iter().find(|(t, _)| t == token) {
            Some((_, exp)) if now < *exp => Ok(()),
            Some(_) => Err(Status::unauthenticated("auth token expired")),
            None => Err(Status::unauthenticated("invalid auth token")),
        }
    }

    fn check(&self, generation: Gen, metadata: &MetadataMap) -> Result<(), Status> {
        match generation {
            Gen::V1 => Ok(()),
            Gen::V2 => self.authorize_v2(metadata),
        }
    }

    pub fn auth_token_get(
        &self,
        _: &MetadataMap,
        _: wire::AuthTokenGetRequest,
    ) -> Result<wire::AuthTokenGetResponse, Status> {
        let now = now_unix();
        let exp = now + self.token_lifetime.lock().unwrap().as_secs_f64();
        let mut tokens = self.tokens.lock().unwrap();
        let payload = format!(
            r#"{{"sub":"ak-emulator","iat":{},"exp":{exp},"jti":"{}"}}"#,
            now as u64,
            tokens.len()
        );
        let token = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#),
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(format!("emulated-signature-{}", tokens.len()))
        );
        tokens.push((token.clone(), exp));
        Ok(wire::AuthTokenGetResponse { token })
    }

    /// `SandboxList` lists V1 sandboxes only; `SandboxListV2` lists both, as Modal's SDK says
    /// of it ("Lists both V1 and V2 Sandboxes").
    pub fn list(
        &self,
        generation: Gen,
        metadata: &MetadataMap,
        req: SandboxListRequest,
    ) -> Result<SandboxListResponse, Status> {
        self.check(generation, metadata)?;
        if req.tags.iter().any(|t| t.tag_name.is_empty()) {
            return Err(Status::invalid_argument("tag names must not be empty"));
        }
        let environment = match req.environment_name.as_str() {
            "" => DEFAULT_ENVIRONMENT,
            name => name,
        };
        let hide_tags = self.hide_tags.load(Ordering::SeqCst);
        let all = self.sandboxes.lock().unwrap();
        if environment != DEFAULT_ENVIRONMENT && !all.iter().any(|s| s.environment == environment) {
            return Err(Status::not_found(format!(
                "Environment '{environment}' not found"
            )));
        }
        let mut matching: Vec<&Sb> = all
            .iter()
            .filter(|s| generation == Gen::V2 || s.generation == Gen::V1)
            .filter(|s| s.environment == environment)
            .filter(|s| req.app_id.is_empty() || req.app_id == app_id(s))
            .filter(|s| req.include_finished || s.finished.is_none())
            .filter(|s| req.before_timestamp <= 0.0 || s.created_at < req.before_timestamp)
            .filter(|s| req.tags.iter().all(|t| s.tags.contains(t)))
            .collect();
        matching.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        let sandboxes = matching
            .into_iter()
            .take(self.page_size.load(Ordering::SeqCst))
            .map(|s| info(s, hide_tags))
            .collect();
        Ok(SandboxListResponse { sandboxes })
    }

    /// The sandbox `id` as the RPCs of `generation` see it: one of the other generation is
    /// not found there (a V1 RPC answers NOT_FOUND for a V2 sandbox, and the other way round).
    fn find<'a>(all: &'a mut [Sb], generation: Gen, id: &str) -> Result<&'a mut Sb, Status> {
        all.iter_mut()
            .find(|s| s.id == id && s.generation == generation)
            .ok_or_else(|| not_found(id))
    }

    pub fn terminate(
        &self,
        generation: Gen,
        metadata: &MetadataMap,
        req: wire::SandboxTerminateRequest,
    ) -> Result<wire::SandboxTerminateResponse, Status> {
        self.check(generation, metadata)?;
        let mut all = self.sandboxes.lock().unwrap();
        let sb = Self::find(&mut all, generation, &req.sandbox_id)?;
        let existing_result = sb.finished.map(|status| wire::GenericResult {
            status,
            ..Default::default()
        });
        sb.finished.get_or_insert(3);
        Ok(wire::SandboxTerminateResponse { existing_result })
    }

    pub fn tags_get(
        &self,
        generation: Gen,
        metadata: &MetadataMap,
        req: wire::SandboxTagsGetRequest,
    ) -> Result<wire::SandboxTagsGetResponse, Status> {
        self.check(generation, metadata)?;
        let mut all = self.sandboxes.lock().unwrap();
        let sb = Self::find(&mut all, generation, &req.sandbox_id)?;
        Ok(wire::SandboxTagsGetResponse {
            tags: sb.tags.clone(),
        })
    }

    /// Replaces every tag, as Modal's `set_tags` says.
    pub fn tags_set(
        &self,
        generation: Gen,
        metadata: &MetadataMap,
        req: wire::SandboxTagsSetRequest,
    ) -> Result<wire::Empty, Status> {
        self.check(generation, metadata)?;
        if req.tags.iter().any(|t| t.tag_name.is_empty()) {
            return Err(Status::invalid_argument("tag names must not be empty"));
        }
        let mut all = self.sandboxes.lock().unwrap();
        let sb = Self::find(&mut all, generation, &req.sandbox_id)?;
        sb.tags = req.tags;
        Ok(wire::Empty {})
    }
}

/// Every sandbox belongs to one app of the emulator's.
pub fn app_id(_: &Sb) -> &'static str {
    "ap-emulated0000000000000"
}

fn info(s: &Sb, hide_tags: bool) -> SandboxInfo {
    SandboxInfo {
        id: s.id.clone(),
        created_at: s.created_at,
        tags: if hide_tags { vec![] } else { s.tags.clone() },
        app_id: app_id(s).into(),
        image_id: "im-emulated".into(),
        timeout_secs: 300,
        task_info: Some(wire::TaskInfo {
            id: format!("ta-{}", &s.id[3..]),
            started_at: s.created_at + 0.5,
            sandbox_id: s.id.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}
