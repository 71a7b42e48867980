//! The emulator's own messages of `modal.client.ModalClient`, written for it after the field
//! numbers of modal 1.6.4's `modal_proto` (the driver's are not used here: the two must be
//! able to disagree, so a test can catch it). Only the fields the emulator reads or answers.

use prost::Message;

/// The RPC paths the emulator answers.
pub mod path {
    pub const CLIENT_HELLO: &str = "/modal.client.ModalClient/ClientHello";
    pub const AUTH_TOKEN_GET: &str = "/modal.client.ModalClient/AuthTokenGet";
    pub const SANDBOX_LIST: &str = "/modal.client.ModalClient/SandboxList";
    pub const SANDBOX_LIST_V2: &str = "/modal.client.ModalClient/SandboxListV2";
    pub const SANDBOX_TERMINATE: &str = "/modal.client.ModalClient/SandboxTerminate";
    pub const SANDBOX_TERMINATE_V2: &str = "/modal.client.ModalClient/SandboxTerminateV2";
    pub const SANDBOX_TAGS_GET: &str = "/modal.client.ModalClient/SandboxTagsGet";
    pub const SANDBOX_TAGS_GET_V2: &str = "/modal.client.ModalClient/SandboxTagsGetV2";
    pub const SANDBOX_TAGS_SET: &str = "/modal.client.ModalClient/SandboxTagsSet";
    pub const SANDBOX_TAGS_SET_V2: &str = "/modal.client.ModalClient/SandboxTagsSetV2";
}

#[derive(Clone, PartialEq, Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, Message)]
pub struct ClientHelloResponse {
    #[prost(string, tag = "1")]
    pub warning: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct AuthTokenGetRequest {}

#[derive(Clone, PartialEq, Message)]
pub struct AuthTokenGetResponse {
    #[prost(string, tag = "1")]
    pub token: String,
}

#[derive(Clone, PartialEq, Eq, Message)]
pub struct Tag {
    #[prost(string, tag = "1")]
    pub tag_name: String,
    #[prost(string, tag = "2")]
    pub tag_value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListRequest {
    #[prost(string, tag = "1")]
    pub app_id: String,
    #[prost(double, tag = "2")]
    pub before_timestamp: f64,
    #[prost(string, tag = "3")]
    pub environment_name: String,
    #[prost(bool, tag = "4")]
    pub include_finished: bool,
    #[prost(message, repeated, tag = "5")]
    pub tags: Vec<Tag>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListResponse {
    #[prost(message, repeated, tag = "1")]
    pub sandboxes: Vec<Info>,
}

/// `SandboxInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(double, tag = "3")]
    pub created_at: f64,
    #[prost(message, optional, tag = "4")]
    pub task_info: Option<Task>,
    #[prost(string, tag = "5")]
    pub app_id: String,
    #[prost(message, repeated, tag = "6")]
    pub tags: Vec<Tag>,
    #[prost(string, tag = "8")]
    pub image_id: String,
    #[prost(uint32, tag = "11")]
    pub timeout_secs: u32,
}

/// `TaskInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct Task {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(double, tag = "2")]
    pub started_at: f64,
    #[prost(double, tag = "3")]
    pub finished_at: f64,
    #[prost(message, optional, tag = "4")]
    pub result: Option<Result_>,
    #[prost(string, tag = "7")]
    pub sandbox_id: String,
}

/// `GenericResult`: `status` is a `GenericStatus` (3 = TERMINATED).
#[derive(Clone, PartialEq, Message)]
pub struct Result_ {
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `SandboxTerminateRequest`, `SandboxTagsGetRequest`: a sandbox id in field 1.
#[derive(Clone, PartialEq, Message)]
pub struct ById {
    #[prost(string, tag = "1")]
    pub sandbox_id: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct TerminateResponse {
    #[prost(message, optional, tag = "1")]
    pub existing_result: Option<Result_>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TagsGetResponse {
    #[prost(message, repeated, tag = "1")]
    pub tags: Vec<Tag>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TagsSetRequest {
    #[prost(string, tag = "1")]
    pub environment_name: String,
    #[prost(string, tag = "2")]
    pub sandbox_id: String,
    #[prost(message, repeated, tag = "3")]
    pub tags: Vec<Tag>,
}

/// `modal.client.RPCStatus`, what `grpc-status-details-bin` carries.
#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<AnyMsg>,
}

#[derive(Clone, PartialEq, Message)]
struct AnyMsg {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct RetryPolicy {
    #[prost(float, tag = "1")]
    retry_after_secs: f32,
}

/// The details of a throttle: an `RPCRetryPolicy` asking for a wait of `secs`, packed under
/// Modal's `type.modal.com/` prefix.
pub fn retry_details(code: i32, message: &str, secs: f32) -> Vec<u8> {
    RpcStatus {
        code,
        message: message.to_string(),
        details: vec![AnyMsg {
            type_url: "type.modal.com/modal.client.RPCRetryPolicy".into(),
            value: RetryPolicy {
                retry_after_secs: secs,
            }
            .encode_to_vec(),
        }],
    }
    .encode_to_vec()
}
