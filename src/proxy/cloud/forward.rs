//! Forwarding one request to the real API and its answer back, as HTTP/1.1 asks of an
//! intermediary: hop-by-hop headers stay on their hop, `Host` is the upstream's, bodies stream.

use crate::providers::retry::error_chain;
use crate::proxy::headers::strip_hop_by_hop;
use http_body_util::Either;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, CONNECTION, HOST, UPGRADE};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::proxy::tasks::Tasks;

use super::{answer, Body, Shared};

pub(super) type Client = hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Body>;

/// One pooled client for the proxy's upstream: `http` or `https` (rustls, webpki roots),
/// HTTP/1.1, no Nagle delay.
pub(super) fn client() -> Client {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https)
}

/// Whether a request asks to switch protocols (a websocket).
fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(UPGRADE)
        && headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// A request passed on unchanged (but for its hop's headers); an upgrade answered `101` is
/// then copied raw both ways.
pub(super) async fn pass(
    mut req: Request<Incoming>,
    shared: &Shared,
    tasks: &Tasks,
) -> Response<Body> {
    let upgrade = wants_upgrade(req.headers());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut resp = match send_as(parts, Either::Left(body), shared, upgrade).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    if let (Some(client_side), StatusCode::SWITCHING_PROTOCOLS) = (client_side, resp.status()) {
        tasks.splice("cloud proxy", client_side, hyper::upgrade::on(&mut resp));
        let (parts, body) = resp.into_parts();
        return Response::from_parts(parts, Either::Left(body));
    }
    answer_as_is(resp.map(Either::Left))
}

/// Sends a request (not an upgrade) upstream; `Err` is the proxy's own 502 answer.
pub(super) async fn send(
    parts: Parts,
    body: Body,
    shared: &Shared,
) -> Result<Response<Incoming>, Response<Body>> {
    send_as(parts, body, shared, false).await
}

async fn send_as(
    mut parts: Parts,
    body: Body,
    shared: &Shared,
    upgrade: bool,
) -> Result<Response<Incoming>, Response<Body>> {
    let up = &shared.upstream;
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let uri = format!("{}://{}{path}", up.scheme, up.authority);
    parts.uri = match uri.parse::<Uri>() {
        Ok(u) => u,
        Err(e) => return Err(answer(400, &format!("sandguard: bad request target: {e}"))),
    };
    strip_hop_by_hop(&mut parts.headers, upgrade);
    parts.headers.remove(HOST);
    parts.headers.remove(hyper::header::EXPECT);
    parts.version = hyper::Version::HTTP_11;
    shared
        .client
        .request(Request::from_parts(parts, body))
        .await
        .map_err(|e| {
            let message = format!(
                "sandguard: cannot reach the {} API at {}://{}: {}",
                shared.api.name(),
                up.scheme,
                up.authority,
                error_chain(&e)
            );
            answer(502, &message)
        })
}

/// An upstream answer for the program: status, headers and body as they came, without the
/// hop's headers.
pub(super) fn answer_as_is(resp: Response<Body>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    Response::from_parts(parts, body)
}
