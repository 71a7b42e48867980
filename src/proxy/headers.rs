//! What both API proxies (the Docker proxy and the cloud proxy) do to the headers of a
//! request or an answer they pass on: one hop's headers stay on that hop.

use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, UPGRADE};

/// The headers of one hop (RFC 9110 §7.6.1, and a proxy hop's `Proxy-*`).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Removes the hop-by-hop headers (and those `Connection` names); an upgrade keeps its
/// `Upgrade` and `Connection: Upgrade` (the token is case-insensitive; Docker's own spelling).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    let kept = upgrade.then(|| headers.get(UPGRADE).cloned()).flatten();
    for name in named.iter().chain(&HOP_BY_HOP.map(HeaderName::from_static)) {
        headers.remove(name);
    }
    if let Some(protocol) = kept {
        headers.insert(UPGRADE, protocol);
        headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    }
}
