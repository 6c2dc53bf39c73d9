//! Agent cards: one per exposed agent type, one for the ingress. The skills
//! come from the registry: each agent type's description, capabilities and
//! domains.

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HttpAuthSecurityScheme,
    SecurityRequirement, SecurityScheme, TRANSPORT_PROTOCOL_JSONRPC,
};
use baton_proto::Candidate;

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

/// A card named `name` served at `url`, with `skills`.
pub(crate) fn card(
    name: &str,
    description: String,
    url: String,
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
        supported_interfaces: vec![AgentInterface::new(url, TRANSPORT_PROTOCOL_JSONRPC)],
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
