//! Modal's messages, written by hand after the field numbers of `modal_proto/api.proto` as
//! modal 1.6.4 ships it (no build script, no protoc): only the RPCs and fields sandguard uses.
//! proto3 readers skip unknown fields, so the real service's larger messages decode into
//! these; the unit tests pin the field numbers. The `*V2` RPCs take and return the very
//! messages of their V1 namesakes; [`Api`] says which of the two a sandbox is reached through.

use std::time::Duration;

/// The gRPC service every path below belongs to.
pub const SERVICE: &str = "modal.client.ModalClient";
pub const CLIENT_HELLO: &str = "/modal.client.ModalClient/ClientHello";
pub const SANDBOX_LIST: &str = "/modal.client.ModalClient/SandboxList";
pub const SANDBOX_TERMINATE: &str = "/modal.client.ModalClient/SandboxTerminate";
pub const SANDBOX_TAGS_GET: &str = "/modal.client.ModalClient/SandboxTagsGet";
pub const SANDBOX_LIST_V2: &str = "/modal.client.ModalClient/SandboxListV2";
pub const SANDBOX_TERMINATE_V2: &str = "/modal.client.ModalClient/SandboxTerminateV2";
pub const SANDBOX_TAGS_GET_V2: &str = "/modal.client.ModalClient/SandboxTagsGetV2";
/// The short-lived token every `*V2` call carries in [`AUTH_TOKEN_HEADER`].
pub const AUTH_TOKEN_GET: &str = "/modal.client.ModalClient/AuthTokenGet";
pub const AUTH_TOKEN_HEADER: &str = "x-modal-auth-token";
/// How Modal packs a retry policy into an error's details.
pub const RETRY_POLICY_TYPE: &str = "type.modal.com/modal.client.RPCRetryPolicy";

/// Which generation of Modal's sandbox RPCs reaches a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// `SandboxList`, `SandboxTerminate`, `SandboxTagsGet`: the token id and secret alone.
    V1,
    /// `SandboxListV2`, `SandboxTerminateV2`, `SandboxTagsGetV2`: also an auth token.
    V2,
}

impl Api {
    /// The generation an id belongs to, decided as Modal's SDK decides it
    /// (`_is_v1_sandbox_id`): `sb-` and 22 ASCII letters or digits is V1; any other shape is
    /// V2, so that ids minted in newer formats go to the newer RPCs.
    pub fn of(sandbox_id: &str) -> Api {
        match sandbox_id.strip_prefix("sb-") {
            Some(rest) if rest.len() == 22 && rest.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                Api::V1
            }
            _ => Api::V2,
        }
    }

    pub fn list(self) -> &'static str {
        match self {
            Api::V1 => SANDBOX_LIST,
            Api::V2 => SANDBOX_LIST_V2,
        }
    }

    pub fn terminate(self) -> &'static str {
        match self {
            Api::V1 => SANDBOX_TERMINATE,
            Api::V2 => SANDBOX_TERMINATE_V2,
        }
    }

    pub fn tags_get(self) -> &'static str {
        match self {
            Api::V1 => SANDBOX_TAGS_GET,
            Api::V2 => SANDBOX_TAGS_GET_V2,
        }
    }

    /// The RPC's name, for messages: the last part of its path.
    pub fn rpc(path: &str) -> &str {
        path.rsplit('/').next().unwrap_or(path)
    }
}

/// `google.protobuf.Empty`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `AuthTokenGetRequest`: no fields.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthTokenGetRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthTokenGetResponse {
    /// A JWT; its payload's `exp` says until when it is good.
    #[prost(string, tag = "1")]
    pub token: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ClientHelloResponse {
    #[prost(string, tag = "1")]
    pub warning: String,
}

#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct SandboxTag {
    #[prost(string, tag = "1")]
    pub tag_name: String,
    #[prost(string, tag = "2")]
    pub tag_value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxListRequest {
    #[prost(string, tag = "1")]
    pub app_id: String,
    /// Only sandboxes created strictly before this (Unix seconds); 0 means no bound.
    #[prost(double, tag = "2")]
    pub before_timestamp: f64,
    #[prost(string, tag = "3")]
    pub environment_name: String,
    #[prost(bool, tag = "4")]
    pub include_finished: bool,
    /// Every tag must match.
    #[prost(message, repeated, tag = "5")]
    pub tags: Vec<SandboxTag>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxListResponse {
    /// Newest first.
    #[prost(message, repeated, tag = "1")]
    pub sandboxes: Vec<SandboxInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxInfo {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(double, tag = "3")]
    pub created_at: f64,
    #[prost(message, optional, tag = "4")]
    pub task_info: Option<TaskInfo>,
    #[prost(string, tag = "5")]
    pub app_id: String,
    #[prost(message, repeated, tag = "6")]
    pub tags: Vec<SandboxTag>,
    #[prost(string, tag = "7")]
    pub name: String,
    #[prost(string, tag = "8")]
    pub image_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskInfo {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(double, tag = "2")]
    pub started_at: f64,
    #[prost(double, tag = "3")]
    pub finished_at: f64,
    #[prost(message, optional, tag = "4")]
    pub result: Option<GenericResult>,
}

/// `GenericResult`; `status` is Modal's `GenericStatus` enum (an int32 on the wire).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GenericResult {
    #[prost(int32, tag = "1")]
    pub status: i32,
    #[prost(string, tag = "2")]
    pub exception: String,
}

impl GenericResult {
    /// The `GenericStatus` name in sandguard's lower-case words.
    pub fn status_word(&self) -> &'static str {
        match self.status {
            1 => "succeeded",
            2 => "failed",
            3 => "terminated",
            4 => "timeout",
            5 => "init-failure",
            6 => "internal-failure",
            7 => "idle-timeout",
            8 => "evicted",
            _ => "finished",
        }
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxTerminateRequest {
    #[prost(string, tag = "1")]
    pub sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxTerminateResponse {
    /// Set when the sandbox had already finished (the call was a no-op).
    #[prost(message, optional, tag = "1")]
    pub existing_result: Option<GenericResult>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxTagsGetRequest {
    #[prost(string, tag = "1")]
    pub sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxTagsGetResponse {
    #[prost(message, repeated, tag = "1")]
    pub tags: Vec<SandboxTag>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Any {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// What Modal puts in `grpc-status-details-bin` (compatible with `google.rpc.Status`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcRetryPolicy {
    #[prost(float, tag = "1")]
    pub retry_after_secs: f32,
}

/// The server's "retry after" from an error's details, if it sent one. Modal's own client
/// waits at least 0.1 s whatever the hint says, and so does this.
pub fn retry_after(details: &[u8]) -> Option<Duration> {
    use prost::Message;
    if details.is_empty() {
        return None;
    }
    let status = RpcStatus::decode(details).ok()?;
    let policy = status
        .details
        .iter()
        .find(|any| any.type_url == RETRY_POLICY_TYPE)?;
    let secs = f64::from(
        RpcRetryPolicy::decode(policy.value.as_slice())
            .ok()?
            .retry_after_secs,
    );
    secs.is_finite()
        .then(|| Duration::from_secs_f64(secs.clamp(0.1, 3600.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The details a server attaches to ask for a wait of `secs`.
    fn retry_details(code: i32, message: &str, secs: f32) -> Vec<u8> {
        RpcStatus {
            code,
            message: message.to_string(),
            details: vec![Any {
                type_url: RETRY_POLICY_TYPE.to_string(),
                value: RpcRetryPolicy {
                    retry_after_secs: secs,
                }
                .encode_to_vec(),
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn list_request_encoding_matches_the_proto_field_numbers() {
        let req = SandboxListRequest {
            before_timestamp: 1.5,
            include_finished: false,
            tags: vec![SandboxTag {
                tag_name: "k".into(),
                tag_value: "v".into(),
            }],
            ..Default::default()
        };
        let mut want = vec![0x11]; // field 2, fixed64
        want.extend_from_slice(&1.5f64.to_le_bytes());
        // field 5, length 6: { field 1 "k", field 2 "v" }
        want.extend_from_slice(&[0x2a, 6, 0x0a, 1, b'k', 0x12, 1, b'v']);
        assert_eq!(req.encode_to_vec(), want);
    }

    #[test]
    fn sandbox_info_decodes_from_the_proto_field_numbers() {
        let mut bytes = vec![0x0a, 2, b's', b'b']; // id = 1
        bytes.push(0x19); // created_at = 3, fixed64
        bytes.extend_from_slice(&100.25f64.to_le_bytes());
        bytes.extend_from_slice(&[0x32, 6, 0x0a, 1, b'a', 0x12, 1, b'b']); // tags = 6
        bytes.extend_from_slice(&[0x42, 2, b'i', b'm']); // image_id = 8
        bytes.extend_from_slice(&[0x58, 60]); // timeout_secs = 11, unknown here: skipped
        let info = SandboxInfo::decode(bytes.as_slice()).unwrap();
        assert_eq!(info.id, "sb");
        assert_eq!(info.created_at, 100.25);
        assert_eq!(info.tags[0].tag_name, "a");
        assert_eq!(info.tags[0].tag_value, "b");
        assert_eq!(info.image_id, "im");
    }

    #[test]
    fn the_retry_policy_is_read_from_status_details() {
        let d = retry_details(8, "slow down", 2.5);
        assert_eq!(retry_after(&d), Some(Duration::from_millis(2500)));
        assert_eq!(
            retry_after(&retry_details(8, "", 0.0)),
            Some(Duration::from_millis(100))
        );
        assert_eq!(retry_after(b""), None);
        assert_eq!(retry_after(b"\xff\xff"), None);
        let other = RpcStatus {
            code: 8,
            message: String::new(),
            details: vec![Any {
                type_url: "type.googleapis.com/google.rpc.DebugInfo".into(),
                value: vec![],
            }],
        };
        assert_eq!(retry_after(&other.encode_to_vec()), None);
    }

    #[test]
    fn ids_are_v1_or_v2_by_their_shape_as_the_sdk_decides() {
        assert_eq!(Api::of("sb-0123456789abcdefghijKL"), Api::V1);
        for v2 in [
            "sb-0123456789abcdefghijKLV",
            "sb-0123456789abcdefghijK",
            "sb-0123456789abcdefghij-L",
            "sb-0123456789abcdéfghijK",
            "sbx-0123456789abcdefghijK",
            "sb_0123456789abcdefghijKL",
            "",
        ] {
            assert_eq!(Api::of(v2), Api::V2, "{v2}");
        }
        assert_eq!(Api::V2.terminate(), SANDBOX_TERMINATE_V2);
        assert_eq!(Api::rpc(Api::V1.tags_get()), "SandboxTagsGet");
    }

    #[test]
    fn the_auth_token_is_field_one() {
        let reply = AuthTokenGetResponse::decode(&[0x0a, 3, b'a', b'.', b'b'][..]).unwrap();
        assert_eq!(reply.token, "a.b");
        assert!(AuthTokenGetRequest {}.encode_to_vec().is_empty());
    }
}
