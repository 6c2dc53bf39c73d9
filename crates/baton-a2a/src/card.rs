//! Agent cards: one per exposed agent type, one for the ingress. The skills
//! come from the registry: each agent type's description, capabilities and
//! domains.

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HttpAuthSecurityScheme,
    SecurityRequirement, SecurityScheme, TRANSPORT_PROTOCOL_HTTP_JSON, TRANSPORT_PROTOCOL_JSONRPC,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use baton_proto::Candidate;
use sha2::Digest;

/// The name of the security scheme cards declare when a token is required.
const BEARER: &str = "bearer";

/// The skill of agent type `name`, described by its registry entry if any.
pub(crate) fn skill(name: &str, found: Option<&Candidate>) -> AgentSkill {
    let description = found
        .and_then(|c| c.description.clone())
        .unwrap_or_else(|| format!("The Baton agent type {name}"));
    let mut tags: Vec<String> = Vec::new();
    if let Some(c) = found {
        tags.extend(c.capabilities.iter().cloned());
        tags.extend(c.domains.iter().map(|d| format!("domain:{d}")));
        tags.push(format!("tier:{}", c.tier));
    }
    AgentSkill {
        id: name.to_owned(),
        name: name.to_owned(),
        description,
        tags,
        examples: None,
        input_modes: None,
        output_modes: None,
        security_requirements: None,
    }
}

/// How long a client may keep a card before asking again (it changes
/// when agent types come and go).
const MAX_AGE: &str = "public, max-age=60";

/// When this gateway first served each card content (by its `ETag`): its
/// `Last-Modified`. Cards change when agent types come and go, so few are
/// kept; past that many the record starts over.
fn first_served(etag: &str) -> chrono::DateTime<chrono::Utc> {
    const KEPT: usize = 256;
    static SEEN: std::sync::OnceLock<
        std::sync::Mutex<HashMap<String, chrono::DateTime<chrono::Utc>>>,
    > = std::sync::OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    let mut seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if seen.len() >= KEPT && !seen.contains_key(etag) {
        seen.clear();
    }
    *seen.entry(etag.to_owned()).or_insert_with(chrono::Utc::now)
}

/// `card` as the answer to a GET with `headers`: with `Cache-Control`, an
/// `ETag` (a hash of its JSON) and `Last-Modified` (when this gateway first
/// served that content); 304 when `If-None-Match` names it.
pub(crate) fn respond(card: &AgentCard, headers: &HeaderMap) -> Response {
    let body = serde_json::to_vec(card).unwrap_or_default();
    let digest = sha2::Sha256::digest(&body);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let etag = format!("\"{hex}\"");
    let matched = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/") == etag
        });
    let mut response = if matched {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut ok = body.into_response();
        ok.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        ok
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(MAX_AGE));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    let modified = first_served(&etag).format("%a, %d %b %Y %H:%M:%S GMT");
    if let Ok(value) = HeaderValue::from_str(&modified.to_string()) {
        headers.insert(header::LAST_MODIFIED, value);
    }
    response
}

/// A card named `name` whose bindings are at `url` (JSON-RPC at `url/`,
/// HTTP+JSON under `url`), with `skills`.
pub(crate) fn card(
    name: &str,
    description: String,
    url: &str,
    skills: Vec<AgentSkill>,
    token_required: bool,
) -> AgentCard {
    let modes = vec!["text/plain".to_owned(), "application/json".to_owned()];
    let (schemes, requirements) = if token_required {
        let scheme = SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
            scheme: "Bearer".to_owned(),
            description: Some("the gateway's access token".to_owned()),
            bearer_format: None,
        });
        let requirement: SecurityRequirement = HashMap::from([(BEARER.to_owned(), Vec::new())]);
        (
            Some(HashMap::from([(BEARER.to_owned(), scheme)])),
            Some(vec![requirement]),
        )
    } else {
        (None, None)
    };
    AgentCard {
        name: name.to_owned(),
        description,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        supported_interfaces: vec![
            AgentInterface::new(rpc_url(url), TRANSPORT_PROTOCOL_JSONRPC),
            AgentInterface::new(url, TRANSPORT_PROTOCOL_HTTP_JSON),
        ],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: None,
            extended_agent_card: Some(false),
        },
        default_input_modes: modes.clone(),
        default_output_modes: modes,
        skills,
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes: schemes,
        security_requirements: requirements,
        signatures: None,
    }
}

/// Where JSON-RPC calls go for a card at `url`: the ingress's `/`, an
/// agent type's `/agents/NAME` as it always was.
fn rpc_url(url: &str) -> String {
    if url.contains("/agents/") {
        url.to_owned()
    } else {
        format!("{url}/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_are_cached_by_etag() {
        let card = card("a", "d".to_owned(), "http://h/agents/a", Vec::new(), false);
        let first = respond(&card, &HeaderMap::new());
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(first.headers()[header::CACHE_CONTROL], MAX_AGE);
        let etag = first.headers()[header::ETAG].clone();
        let mut asking = HeaderMap::new();
        asking.insert(header::IF_NONE_MATCH, etag.clone());
        let again = respond(&card, &asking);
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(again.headers()[header::ETAG], etag);
        // The same content keeps the date it was first served.
        let modified = &first.headers()[header::LAST_MODIFIED];
        assert!(modified.to_str().unwrap().ends_with(" GMT"), "{modified:?}");
        assert_eq!(&again.headers()[header::LAST_MODIFIED], modified);
        asking.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"other\""));
        assert_eq!(respond(&card, &asking).status(), StatusCode::OK);
        let bindings: Vec<_> = card
            .supported_interfaces
            .iter()
            .map(|i| (i.protocol_binding.as_str(), i.url.as_str()))
            .collect();
        assert_eq!(
            bindings,
            [
                ("JSONRPC", "http://h/agents/a"),
                ("HTTP+JSON", "http://h/agents/a")
            ]
        );
    }
}
