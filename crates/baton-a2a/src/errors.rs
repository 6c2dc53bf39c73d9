//! A2A errors as each binding carries them (A2A 1.0, sections 5.4, 9.5 and
//! 11.6): a JSON-RPC error whose `data` is an array holding the error's
//! `google.rpc.ErrorInfo`, and over HTTP+JSON an AIP-193 body with the
//! status the spec maps the error to and the same `ErrorInfo` in `details`.

use a2a::{JsonRpcError, error_code};
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The `@type` of an `ErrorInfo` in ProtoJSON.
const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// The domain of every A2A error's `ErrorInfo`.
const DOMAIN: &str = "a2a-protocol.org";

/// The A2A-specific errors: the spec's reason, HTTP status and gRPC status
/// name for each JSON-RPC code.
fn a2a_specific(code: i32) -> Option<(&'static str, StatusCode, &'static str)> {
    Some(match code {
        error_code::TASK_NOT_FOUND => ("TASK_NOT_FOUND", StatusCode::NOT_FOUND, "NOT_FOUND"),
        error_code::TASK_NOT_CANCELABLE => (
            "TASK_NOT_CANCELABLE",
            StatusCode::CONFLICT,
            "FAILED_PRECONDITION",
        ),
        error_code::PUSH_NOTIFICATION_NOT_SUPPORTED => (
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            StatusCode::BAD_REQUEST,
            "UNIMPLEMENTED",
        ),
        error_code::UNSUPPORTED_OPERATION => (
            "UNSUPPORTED_OPERATION",
            StatusCode::BAD_REQUEST,
            "UNIMPLEMENTED",
        ),
        error_code::CONTENT_TYPE_NOT_SUPPORTED => (
            "CONTENT_TYPE_NOT_SUPPORTED",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "INVALID_ARGUMENT",
        ),
        error_code::INVALID_AGENT_RESPONSE => (
            "INVALID_AGENT_RESPONSE",
            StatusCode::BAD_GATEWAY,
            "INTERNAL",
        ),
        error_code::EXTENDED_CARD_NOT_CONFIGURED => (
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
        ),
        error_code::EXTENSION_SUPPORT_REQUIRED => (
            "EXTENSION_SUPPORT_REQUIRED",
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
        ),
        error_code::VERSION_NOT_SUPPORTED => (
            "VERSION_NOT_SUPPORTED",
            StatusCode::BAD_REQUEST,
            "UNIMPLEMENTED",
        ),
        _ => return None,
    })
}

/// An A2A error: code and message, and for an A2A-specific code its
/// `ErrorInfo` in `data`.
pub(crate) fn error(code: i32, message: impl Into<String>) -> JsonRpcError {
    JsonRpcError {
        code,
        message: message.into(),
        data: a2a_specific(code).map(|(reason, _, _)| info(reason)),
    }
}

/// Push notifications are not offered.
pub(crate) fn no_push() -> JsonRpcError {
    error(
        error_code::PUSH_NOTIFICATION_NOT_SUPPORTED,
        "push notifications are not supported: stream with SendStreamingMessage or SubscribeToTask",
    )
}

/// There is no extended card.
pub(crate) fn no_extended_card() -> JsonRpcError {
    error(
        error_code::EXTENDED_CARD_NOT_CONFIGURED,
        "there is no extended card: the public card is the whole card",
    )
}

/// The `data` (JSON-RPC) or `details` (HTTP+JSON) array of an A2A error.
fn info(reason: &str) -> serde_json::Value {
    serde_json::json!([{ "@type": ERROR_INFO, "reason": reason, "domain": DOMAIN }])
}

/// The HTTP status and `google.rpc.Code` name of `err`.
fn statuses(err: &JsonRpcError) -> (StatusCode, &'static str) {
    if let Some((_, http, grpc)) = a2a_specific(err.code) {
        return (http, grpc);
    }
    match err.code {
        error_code::METHOD_NOT_FOUND => (StatusCode::NOT_FOUND, "NOT_FOUND"),
        error_code::PARSE_ERROR | error_code::INVALID_REQUEST | error_code::INVALID_PARAMS => {
            (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
    }
}

/// `err` as an HTTP+JSON response (AIP-193): its status, and its body.
pub(crate) fn rest_body(err: &JsonRpcError) -> (StatusCode, serde_json::Value) {
    let (http, status) = statuses(err);
    // Standard errors get an `ErrorInfo` too, with the reason the A2A SDKs
    // map back to their error types (`INVALID_PARAMS`, ...).
    let details = err
        .data
        .clone()
        .filter(serde_json::Value::is_array)
        .unwrap_or_else(|| info(a2a::error_reason(err.code)));
    let body = serde_json::json!({
        "error": {
            "code": http.as_u16(),
            "status": status,
            "message": err.message,
            "details": details,
        }
    });
    (http, body)
}

/// `err` as an HTTP+JSON response (AIP-193).
pub(crate) fn rest(err: &JsonRpcError) -> Response {
    let (http, body) = rest_body(err);
    (http, Json(body)).into_response()
}

/// Whether a request's `Content-Type` is JSON (or absent: curl and some
/// clients send none).
pub(crate) fn is_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers.get(axum::http::header::CONTENT_TYPE) else {
        return true;
    };
    let essence = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// The version of A2A a request asks for (the `A2A-Version` header, or
/// the query parameter), refused unless it is 1.x; an empty or absent one
/// is 0.3 by the spec, whose calls this gateway answers as 1.0 ones.
pub(crate) fn version(
    headers: &axum::http::HeaderMap,
    query: Option<&str>,
) -> Result<(), JsonRpcError> {
    let header = headers
        .get(a2a::SVC_PARAM_VERSION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let asked = header.or_else(|| {
        query?.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            key.eq_ignore_ascii_case(a2a::SVC_PARAM_VERSION)
                .then(|| value.to_owned())
        })
    });
    let Some(version) = asked.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let major_minor: Vec<&str> = version.split('.').collect();
    let spoken = matches!(major_minor.as_slice(), ["1"] | ["1", _] | ["1", _, _])
        || matches!(major_minor.as_slice(), ["0", "3"] | ["0", "3", _]);
    if spoken {
        return Ok(());
    }
    Err(error(
        error_code::VERSION_NOT_SUPPORTED,
        format!("A2A version {version} is not supported; this server speaks 1.0"),
    ))
}

/// A request's JSON with its field names in lowerCamelCase: ProtoJSON
/// readers accept a field's proto name (`history_length`) as well as its
/// JSON name (`historyLength`). Free-form values (`metadata`, `data`) are
/// left as they are.
pub(crate) fn camel(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => map
            .into_iter()
            .map(|(key, value)| {
                let key = camel_case(&key);
                let free = matches!(key.as_str(), "metadata" | "data");
                (key, if free { value } else { camel(value) })
            })
            .collect(),
        serde_json::Value::Array(items) => items.into_iter().map(camel).collect(),
        other => other,
    }
}

/// `snake_case` as `snakeCase`; other names as they are.
pub(crate) fn camel_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' && !out.is_empty() {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2a_errors_carry_their_error_info_and_standard_ones_do_not() {
        let missing = error(error_code::TASK_NOT_FOUND, "no task x");
        let data = missing.data.clone().unwrap_or_default();
        assert_eq!(data[0]["@type"], ERROR_INFO);
        assert_eq!(data[0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(data[0]["domain"], "a2a-protocol.org");
        assert!(error(error_code::INVALID_PARAMS, "bad").data.is_none());
        let card = error(error_code::EXTENDED_CARD_NOT_CONFIGURED, "none");
        assert_eq!(
            card.data.unwrap_or_default()[0]["reason"],
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED"
        );
    }

    #[test]
    fn proto_names_read_as_json_names() {
        let value = serde_json::json!({"id": "t", "history_length": 1,
            "message": {"message_id": "m", "metadata": {"keep_me": 1}}});
        let camel = camel(value);
        assert_eq!(camel["historyLength"], 1);
        assert_eq!(camel["message"]["messageId"], "m");
        assert_eq!(camel["message"]["metadata"]["keep_me"], 1);
    }

    #[test]
    fn rest_errors_have_the_spec_status() {
        let cases = [
            (error_code::TASK_NOT_FOUND, 404),
            (error_code::TASK_NOT_CANCELABLE, 409),
            (error_code::CONTENT_TYPE_NOT_SUPPORTED, 415),
            (error_code::INVALID_AGENT_RESPONSE, 502),
            (error_code::VERSION_NOT_SUPPORTED, 400),
            (error_code::INVALID_PARAMS, 400),
            (error_code::INTERNAL_ERROR, 500),
        ];
        for (code, status) in cases {
            assert_eq!(rest(&error(code, "x")).status().as_u16(), status, "{code}");
        }
        let (_, body) = rest_body(&error(error_code::INVALID_PARAMS, "bad"));
        assert_eq!(body["error"]["details"][0]["reason"], "INVALID_PARAMS");
        assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
    }

    #[test]
    fn versions_one_and_none_are_spoken_others_refused() {
        let mut headers = axum::http::HeaderMap::new();
        assert!(version(&headers, None).is_ok());
        for spoken in ["1.0", "1", "1.0.3", "0.3", ""] {
            headers.insert(a2a::SVC_PARAM_VERSION, spoken.parse().unwrap());
            assert!(version(&headers, None).is_ok(), "{spoken}");
        }
        headers.insert(a2a::SVC_PARAM_VERSION, "99.0".parse().unwrap());
        let refused = version(&headers, None).unwrap_err();
        assert_eq!(refused.code, error_code::VERSION_NOT_SUPPORTED);
        let query = version(&axum::http::HeaderMap::new(), Some("A2A-Version=2.0"));
        assert!(query.is_err());
    }
}
