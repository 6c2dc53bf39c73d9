//! How a worker answers an MCP server: it introduces itself as Baton at
//! this build's version, and, when a server asks the user something during
//! a call (`elicitation/create`), it answers as the spec's `[[mcp]]
//! elicitation` says.
//!
//! Asking a person (`"ask"`), the question must be matched to the call it
//! came in: calls to such a server are made one at a time per worker
//! ([`Desk`]), and the call in flight carries the answers on record for it
//! ([`OneCall`]). A question with no answer on record is kept there, and
//! the call is cancelled; the worker parks it for a person, and makes the
//! call again once the answer is in the hop journal.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::handler::client::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation,
};
use rmcp::service::{RequestContext, RoleClient};
use serde_json::{Map, Value as Json};
use tokio::sync::Notify;

mod form;

pub use form::hint;

/// How long a question waits for its call to be cancelled before the
/// server is told it will not be answered on this call.
const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// What a worker says when an MCP server asks the user something during a
/// call (`elicitation/create`): `[[mcp]] elicitation` in a spec.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpElicitation {
    /// A person answers, as `ask_user` asks: in a conversation, the user's
    /// next message; otherwise the inbox. The call is cancelled while the
    /// question waits, and made again (with the same idempotency key) once
    /// the answer is in the hop journal, which answers the server's
    /// repeated question. Each call has a connection to itself while it is
    /// made, so each question is known to belong to its call.
    #[default]
    Ask,
    /// It accepts with the schema's defaults (SEP-1034), and declines a
    /// question with a required field that has none.
    Defaults,
    /// It declares no elicitation, so the server does not ask (a server that
    /// asks anyway is declined): MCP's behaviour for a client without it.
    Decline,
}

/// A worker's side of one MCP connection.
#[derive(Debug, Clone)]
pub struct Answering {
    elicitation: McpElicitation,
    desk: Arc<Desk>,
}

/// Where a server's questions meet the call in flight (`"ask"`).
#[derive(Debug)]
pub struct Desk {
    call: Mutex<Option<Arc<OneCall>>>,
    /// Whether a person can be asked: the worker may open the inbox.
    person: std::sync::atomic::AtomicBool,
}

impl Default for Desk {
    fn default() -> Self {
        Self {
            call: Mutex::new(None),
            person: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

impl Desk {
    /// From now on, `call` is the one in flight (or none).
    pub fn serve(&self, call: Option<Arc<OneCall>>) {
        *self
            .call
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = call;
    }

    /// No person can be asked: questions are declined.
    pub fn without_person(&self) {
        (self.person).store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a person can be asked.
    pub fn has_person(&self) -> bool {
        self.person.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn current(&self) -> Option<Arc<OneCall>> {
        let call = self
            .call
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        call.clone().filter(|_| self.has_person())
    }
}

/// A question a server asked that no answer on record answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The server's message.
    pub message: String,
    /// The requested schema (a flat object of primitive fields).
    pub schema: Json,
    /// Which of the call's answers it waits for (0: the first).
    pub n: u32,
    /// Why the answer before it could not be used, if one could not.
    pub problem: Option<String>,
    /// How many questions of this call were answered before it, on this
    /// attempt: after one, the server may have acted.
    pub after_answers: u32,
}

/// One call in flight on a server that asks a person.
#[derive(Debug, Default)]
pub struct OneCall {
    /// The call's answers on record, in the order asked, and how many the
    /// server's questions used so far.
    answers: Mutex<(Vec<String>, usize)>,
    /// Questions answered on this attempt.
    given: std::sync::atomic::AtomicU32,
    waiting: Mutex<Option<Question>>,
    /// Told when a question waits.
    pub asked: Notify,
    /// Told once the call is cancelled.
    pub cancelled: Notify,
}

impl OneCall {
    /// A call whose answers on record are `answers`.
    pub fn new(answers: Vec<String>) -> Self {
        Self {
            answers: Mutex::new((answers, 0)),
            ..Self::default()
        }
    }

    /// The question that waits for a person, if the server asked one.
    pub fn waiting(&self) -> Option<Question> {
        (self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
        .clone()
    }

    /// The next answer on record that `schema` accepts; else the question
    /// waits (`None`). An answer it refuses is passed over: the person was
    /// asked again after it.
    fn answer(&self, message: &str, schema: &Json) -> Option<ElicitResult> {
        let mut held = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (answers, used) = &mut *held;
        if self.waiting().is_some() {
            // A second question while the first waits: the call is being
            // cancelled, and asks it again when it is made again.
            return None;
        }
        let mut problem = None;
        while let Some(text) = answers.get(*used) {
            *used += 1;
            match form::read(text, schema) {
                Ok(result) => {
                    (self.given).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Some(result);
                }
                Err(refused) => problem = Some(refused.0),
            }
        }
        let question = Question {
            message: message.to_owned(),
            schema: schema.clone(),
            n: u32::try_from(*used).unwrap_or(u32::MAX),
            problem,
            after_answers: self.given.load(std::sync::atomic::Ordering::Relaxed),
        };
        *self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(question);
        None
    }
}

impl Answering {
    /// Answering as `elicitation` says, meeting calls at `desk`.
    pub fn new(elicitation: McpElicitation, desk: Arc<Desk>) -> Self {
        Self { elicitation, desk }
    }
}

impl ClientHandler for Answering {
    /// Baton at this build's version, speaking MCP 2025-11-25. It declares
    /// form elicitation unless it declines every question, so a server
    /// does not ask.
    fn get_info(&self) -> ClientConfig {
        let capabilities = match self.elicitation {
            McpElicitation::Decline => ClientCapabilities::default(),
            McpElicitation::Defaults | McpElicitation::Ask => {
                ClientCapabilities::builder().enable_elicitation().build()
            }
        };
        // MCP 2025-11-25, the version Baton is tested against (the SDK's
        // default is its newest, 2026-07-28); a server on an older one
        // answers with it, and the session goes on in that.
        ClientConfig::new(
            capabilities,
            Implementation::new("baton", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let decline = ElicitResult::new(ElicitationAction::Decline);
        let ElicitRequestParams::FormElicitationParams {
            requested_schema,
            message,
            ..
        } = request
        else {
            return Ok(decline);
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or(Json::Null);
        match self.elicitation {
            McpElicitation::Decline => Ok(decline),
            McpElicitation::Defaults => Ok(with_defaults(&message, &schema)),
            McpElicitation::Ask => {
                let Some(call) = self.desk.current() else {
                    tracing::info!(%message, "an MCP server asked the user outside a call, or no person can be asked: declined");
                    return Ok(decline);
                };
                if let Some(answer) = call.answer(&message, &schema) {
                    tracing::info!(%message, action = ?answer.action, "an MCP server asked the user: answered from the hop journal");
                    return Ok(answer);
                }
                call.asked.notify_one();
                // The call is cancelled now; the server's question ends with it.
                let _ = tokio::time::timeout(CANCEL_WAIT, call.cancelled.notified()).await;
                Err(McpError::internal_error(
                    "the question waits for a person; the call is cancelled and made again with the answer",
                    None,
                ))
            }
        }
    }
}

/// Accepted with the schema's defaults, or declined when a required
/// field has none (`"defaults"`).
fn with_defaults(message: &str, schema: &Json) -> ElicitResult {
    match defaults(schema) {
        Some(content) => {
            tracing::info!(%message, "an MCP server asked the user: accepted with the schema's defaults");
            ElicitResult::new(ElicitationAction::Accept).with_content(content)
        }
        None => {
            tracing::info!(%message, "an MCP server asked the user for a field without a default: declined");
            ElicitResult::new(ElicitationAction::Decline)
        }
    }
}

/// Every property of `schema` with its `default` (SEP-1034); `None` when a
/// required property has none.
fn defaults(schema: &Json) -> Option<Json> {
    let mut content = Map::new();
    form::fill_defaults(&mut content, schema);
    let required = schema.get("required").and_then(Json::as_array);
    let all_there = required
        .into_iter()
        .flatten()
        .filter_map(Json::as_str)
        .all(|name| content.contains_key(name));
    all_there.then_some(Json::Object(content))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_every_field_that_has_one_and_a_required_one_without_declines() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
                "note": {"type": "string"}
            },
            "required": ["name"]
        });
        assert_eq!(
            defaults(&schema),
            Some(serde_json::json!({"name": "John Doe", "age": 30, "status": "active"}))
        );
        let mut needs = schema.clone();
        needs["required"] = serde_json::json!(["name", "note"]);
        assert_eq!(defaults(&needs), None);
    }
}
