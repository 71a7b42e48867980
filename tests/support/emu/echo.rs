//! [`Faults::echo_auth`]: error answers that quote the request's credentials back, as a
//! careless server, proxy or gateway does in its error pages.

use super::{Request, Response};

/// Whether a request header carries a credential.
fn is_credential_header(name: &str) -> bool {
    ["auth", "key", "token", "secret"]
        .iter()
        .any(|w| name.contains(w))
}

/// `response` with the request's credential headers quoted, `name: value; …`, at the start of
/// every message a client shows: the `message` and `error` strings (or each string of a
/// `message` list) of a JSON object, else the whole body. At the start, because clients cut
/// long messages.
pub fn echo_credentials(req: &Request, mut response: Response) -> Response {
    let echo: Vec<String> = req
        .headers
        .iter()
        .filter(|(k, _)| is_credential_header(k))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    if echo.is_empty() {
        return response;
    }
    let echo = format!("request had {}", echo.join("; "));
    let quote = |v: &mut serde_json::Value| {
        if let Some(s) = v.as_str() {
            *v = serde_json::Value::from(format!("{echo}: {s}"));
        }
    };
    match serde_json::from_slice::<serde_json::Value>(&response.body) {
        Ok(serde_json::Value::Object(mut map)) => {
            for key in ["message", "error"] {
                match map.get_mut(key) {
                    Some(serde_json::Value::Array(items)) => items.iter_mut().for_each(quote),
                    Some(v @ serde_json::Value::Object(_)) => {
                        if let Some(m) = v.get_mut("message") {
                            quote(m);
                        }
                    }
                    Some(v) => quote(v),
                    None => {}
                }
            }
            if !map.contains_key("message") && !map.contains_key("error") {
                map.insert("message".into(), serde_json::Value::from(echo));
            }
            response.body = serde_json::Value::Object(map).to_string().into_bytes();
        }
        _ => {
            let text = String::from_utf8_lossy(&response.body).into_owned();
            response.body = format!("{echo}: {text}").into_bytes();
        }
    }
    response
}
