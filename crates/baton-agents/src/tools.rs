//! Tools from MCP servers, for LLM agents (`[[mcp]]` in a spec).
//!
//! At start, each server is reached (a `command` is started, once per
//! worker; a `url` is connected to over streamable HTTP) and its
//! `tools/list` read: names, descriptions and input schemas are offered to
//! the model beside the handoff and delegate tools. A server that cannot be
//! reached, a name two tools share, or an allow-list entry the server lacks
//! stops the worker with a message that names the server and the tool.
//!
//! A call's arguments are checked against the tool's schema before it is
//! made. A `command` server that died is started again at the next call.
//!
//! Each tool has a [`Class`]: whether a call whose outcome is unknown may be
//! made again. It comes from the server's annotations with MCP's defaults
//! (no annotation: not read-only, destructive, not idempotent), and the
//! spec may override it per server and per tool. A tool may also need a
//! person's approval before each call (`approve`).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value as Json, json};
use tokio::sync::Mutex;

mod asking;
mod class;

use crate::spec::{Approve, McpSpec};
use crate::{Error, ErrorKind};
pub(crate) use class::Class;
use class::approved_first;

/// How long reaching a server and listing its tools may take at start.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// One tool a server offers, as the model sees it.
#[derive(Debug)]
pub(crate) struct McpTool {
    /// The name offered to the model (the spec's prefix, then the server's name).
    pub(crate) name: String,
    pub(crate) description: String,
    /// The JSON Schema of its arguments.
    pub(crate) schema: Json,
    /// The server's own name for it.
    remote: String,
    server: usize,
    validator: jsonschema::Validator,
    /// Whether it may be called again when a call's outcome is unknown.
    pub(crate) class: Class,
    /// Whether each call waits for a person's approval first.
    pub(crate) approve: bool,
    /// Whether its server's questions during a call go to a person
    /// (`elicitation = "ask"`).
    pub(crate) asks: bool,
}

/// What a call gave back, for the model and the conversation.
#[derive(Debug, Clone)]
pub(crate) struct Called {
    /// The text for the model: the result's text parts, or its structured
    /// content as JSON when it has no text.
    pub(crate) text: String,
    /// The server said the call failed (`isError`).
    pub(crate) is_error: bool,
}

/// A connection to one server, made again when it is lost.
struct Server {
    spec: McpSpec,
    sign_in: crate::signin::SignIn,
    peer: Mutex<Option<Arc<Connection>>>,
    /// Where the server's questions meet the call in flight on `peer`.
    desk: Arc<baton_mcp_client::answering::Desk>,
    /// Calls on a server that asks a person: see [`asking`].
    lent: asking::Lent,
}

/// A connection to a server.
type Connection = RunningService<RoleClient, baton_mcp_client::answering::Answering>;

/// Every tool of a spec's MCP servers.
#[derive(Default)]
pub(crate) struct Toolbox {
    servers: Vec<Server>,
    tools: Vec<McpTool>,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts or reaches the server of `spec` and lists its tools.
    async fn reach(
        spec: &McpSpec,
        tokens: Option<&crate::signin::Tokens>,
    ) -> Result<(Self, Vec<rmcp::model::Tool>), Error> {
        let label = spec.label();
        let server = Server {
            spec: spec.clone(),
            sign_in: crate::signin::SignIn::of(spec, tokens)?,
            peer: Mutex::new(None),
            desk: Arc::default(),
            lent: asking::Lent::default(),
        };
        let peer = tokio::time::timeout(CONNECT_TIMEOUT, server.peer())
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::Mcp,
                    format!("[[mcp]] {label}: no answer within {CONNECT_TIMEOUT:?}"),
                )
            })??;
        let listed = peer.list_all_tools().await.map_err(|err| {
            Error::new(
                ErrorKind::Mcp,
                format!("[[mcp]] {label}: cannot list its tools: {err}"),
            )
        })?;
        server.lend_first().await;
        Ok((server, listed))
    }
}

impl Toolbox {
    /// Reaches every server of `specs` and reads its tools; `taken` are the
    /// names the model is offered already (handoffs, delegates).
    ///
    /// # Errors
    ///
    /// A message naming the server (and the tool) for an unreachable
    /// server, an unset token variable, a duplicate name, an allow-list
    /// entry the server does not have, or a schema that is not one.
    pub(crate) async fn connect(
        specs: &[McpSpec],
        taken: &[String],
        tokens: Option<&crate::signin::Tokens>,
    ) -> Result<Self, Error> {
        let mut toolbox = Self::default();
        let mut names: std::collections::HashMap<String, String> = taken
            .iter()
            .map(|name| {
                (
                    name.clone(),
                    "the spec's handoff and delegate tools".to_owned(),
                )
            })
            .collect();
        for (index, spec) in specs.iter().enumerate() {
            let label = spec.label();
            let (server, listed) = Server::reach(spec, tokens).await?;
            lists_only_what_it_has(spec, &listed)?;
            for tool in listed {
                if spec
                    .tools
                    .as_ref()
                    .is_some_and(|allowed| !allowed.iter().any(|name| name == tool.name.as_ref()))
                {
                    continue;
                }
                let name = format!("{}{}", spec.prefix, tool.name);
                if let Some(first) = names.insert(name.clone(), label.clone()) {
                    return Err(Error::config(format!(
                        "[[mcp]] {label}: tool {name:?} is also offered by {first}: give one of the servers a prefix = \"...\""
                    )));
                }
                let schema = Json::Object((*tool.input_schema).clone());
                let validator = jsonschema::validator_for(&schema).map_err(|err| {
                    Error::config(format!(
                        "[[mcp]] {label}: tool {name:?} has an input schema that is not a valid JSON Schema: {err}"
                    ))
                })?;
                let remote = tool.name.to_string();
                let annotations = tool.annotations.as_ref();
                let class = Class::of(spec, &remote, annotations);
                let read_only = annotations.and_then(|a| a.read_only_hint) == Some(true);
                let approve = approved_first(spec.approve.as_ref(), &remote, read_only);
                tracing::info!(server = %label, tool = %name, class = %class.as_str(), approve, "MCP tool");
                toolbox.tools.push(McpTool {
                    class,
                    approve,
                    asks: spec.elicitation == crate::spec::McpElicitation::Ask,
                    name,
                    description: tool.description.map(Cow::into_owned).unwrap_or_default(),
                    schema,
                    remote,
                    server: index,
                    validator,
                });
            }
            tracing::info!(server = %label, tools = toolbox.tools.iter().filter(|t| t.server == index).count(), "MCP server ready");
            toolbox.servers.push(server);
        }
        Ok(toolbox)
    }

    /// The tools, in the order the servers listed them.
    pub(crate) fn tools(&self) -> &[McpTool] {
        &self.tools
    }

    /// The tool the model named.
    pub(crate) fn find(&self, name: &str) -> Option<&McpTool> {
        self.tools.iter().find(|tool| tool.name == name)
    }

    /// What is wrong with `arguments` for `tool`, to tell the model.
    pub(crate) fn invalid(tool: &McpTool, arguments: &Json) -> Option<String> {
        let problems: Vec<String> = tool
            .validator
            .iter_errors(arguments)
            .take(5)
            .map(|err| {
                let at = err.instance_path.to_string();
                if at.is_empty() {
                    err.to_string()
                } else {
                    format!("{at}: {err}")
                }
            })
            .collect();
        (!problems.is_empty()).then(|| {
            format!(
                "the arguments do not match {}'s schema: {}",
                tool.name,
                problems.join("; ")
            )
        })
    }

    /// No person can be asked (the worker may not open the inbox): the
    /// servers' questions are declined.
    pub(crate) fn without_person(&self) {
        for server in &self.servers {
            server.desk.without_person();
        }
    }

    /// Calls `tool` with `arguments`, carrying `key` as the call's
    /// idempotency key (`_meta["baton/idempotency-key"]`); `answers` (a
    /// person's, on record) answer the server's questions during the call,
    /// in order.
    ///
    /// # Errors
    ///
    /// A message for the agent's retry: the server could not be reached or
    /// died mid-call, or did not answer within the spec's `timeout_ms`; or
    /// what must wait for a person: a new sign-in, an answer.
    pub(crate) async fn call(
        &self,
        tool: &McpTool,
        (arguments, key): (Json, &str),
        answers: &[String],
    ) -> Result<Called, CallError> {
        match self
            .call_once(tool, (arguments.clone(), key), answers)
            .await
        {
            // Refused before it ran: once more on a new connection, which
            // reads the kept sign-in afresh (another worker's, or a new
            // client's after a person signed in again), before a person is
            // asked.
            Err(CallError::Authorize(_)) => {
                self.servers[tool.server].flush();
                self.call_once(tool, (arguments, key), answers).await
            }
            called => called,
        }
    }

    /// One attempt of [`Toolbox::call`].
    async fn call_once(
        &self,
        tool: &McpTool,
        (arguments, key): (Json, &str),
        answers: &[String],
    ) -> Result<Called, CallError> {
        let server = &self.servers[tool.server];
        let label = server.spec.label();
        let mut params = CallToolRequestParams::new(tool.remote.clone());
        params.arguments = arguments.as_object().cloned();
        let mut meta = RequestMetaObject::new();
        meta.0
            .0
            .insert("baton/idempotency-key".to_owned(), json!(key));
        params.meta = Some(meta);
        let timeout = Duration::from_millis(server.spec.timeout_ms);
        let result = match server.made(params, timeout, answers).await {
            asking::Made::Unreachable(err) if err.kind() == ErrorKind::SignIn => {
                return Err(server.refused(crate::signin::refusal_in(&err)));
            }
            asking::Made::Unreachable(err) => return Err(CallError::Unreachable(err)),
            asking::Made::Asked(question) => return Err(CallError::Asked(question)),
            asking::Made::Done(Ok(result)) => result,
            asking::Made::Done(Err(err)) => {
                if let Some(refusal) =
                    crate::signin::refusal(&err).filter(|_| server.sign_in.by_person())
                {
                    return Err(server.refused(refusal));
                }
                return Err(CallError::Failed(format!(
                    "the call of {} on {label} failed: {err}",
                    tool.name
                )));
            }
            asking::Made::TimedOut => {
                return Err(CallError::Timeout(format!(
                    "{} on {label} did not answer within {timeout:?}",
                    tool.name
                )));
            }
        };
        Ok(Called {
            text: result_text(&result, server.spec.max_result_bytes, &tool.name),
            is_error: result.is_error.unwrap_or(false),
        })
    }
}

/// Why a tool call did not come back; each is retried by the agent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// The server could not be reached or started.
    #[error(transparent)]
    Unreachable(Error),
    /// The call failed on the way (the server may have died mid-call).
    #[error("{0}")]
    Failed(String),
    /// The server did not answer within the spec's `timeout_ms`.
    #[error("{0}")]
    Timeout(String),
    /// The server refused the sign-in a person left, before making the
    /// call: a person must sign in again (`baton inbox authorize`).
    #[error("{} refused the call: {}", .0.server, .0.why)]
    Authorize(baton_proto::Authorize),
    /// The server asked a question no answer on record answers: the call
    /// was cancelled, and waits for a person's answer.
    #[error("the server asks: {}", .0.message)]
    Asked(baton_mcp_client::answering::Question),
}

impl Server {
    /// The call waits for a person to sign in again, as `refusal` says.
    fn refused(&self, refusal: crate::signin::Refusal) -> CallError {
        tracing::warn!(server = %self.spec.label(), why = %refusal.why, "the MCP server refused the kept sign-in");
        CallError::Authorize(baton_proto::Authorize {
            server: self.spec.url.clone().unwrap_or_default(),
            scope: refusal.scope,
            why: refusal.why,
        })
    }

    /// How this worker answers the server.
    fn answering(&self) -> baton_mcp_client::answering::Answering {
        baton_mcp_client::answering::Answering::new(self.spec.elicitation, self.desk.clone())
    }

    /// The live connection, made (or made again) when there is none.
    async fn peer(&self) -> Result<Arc<Connection>, Error> {
        let mut peer = self.peer.lock().await;
        if let Some(live) = peer.as_ref().filter(|live| !live.is_transport_closed()) {
            return Ok(live.clone());
        }
        let running = Arc::new(self.connect(self.answering()).await?);
        *peer = Some(running.clone());
        Ok(running)
    }

    /// A new connection to the server, answering it as `answering` says.
    async fn connect(
        &self,
        answering: baton_mcp_client::answering::Answering,
    ) -> Result<Connection, Error> {
        let label = self.spec.label();
        let failed =
            |kind: ErrorKind, err: String| Error::new(kind, format!("[[mcp]] {label}: {err}"));
        let running = match (&self.spec.url, &self.spec.command) {
            (Some(url), _) => {
                let http = crate::http().build().map_err(|err| {
                    failed(
                        ErrorKind::Http,
                        format!("cannot build the HTTP client: {err}"),
                    )
                })?;
                (self.sign_in.connect(url, http, answering).await).map_err(|err| {
                    Error::with_source(err.kind(), format!("[[mcp]] {label}"), err)
                })?
            }
            (None, Some(command)) => {
                let (program, args) = command
                    .split_first()
                    .ok_or_else(|| failed(ErrorKind::Config, "command is empty".to_owned()))?;
                let mut process = tokio::process::Command::new(program);
                process.args(args);
                let transport =
                    rmcp::transport::TokioChildProcess::new(process).map_err(|err| {
                        failed(ErrorKind::Mcp, format!("cannot start {program}: {err}"))
                    })?;
                answering.serve(transport).await.map_err(|err| {
                    failed(
                        ErrorKind::Mcp,
                        format!("the server did not start MCP: {err}"),
                    )
                })?
            }
            (None, None) => {
                return Err(failed(ErrorKind::Config, "needs url or command".to_owned()));
            }
        };
        Ok(running)
    }

    /// Drops `dead`, if it is still the connection in use.
    async fn forget(&self, dead: &Arc<Connection>) {
        let mut peer = self.peer.lock().await;
        if peer.as_ref().is_some_and(|live| Arc::ptr_eq(live, dead)) {
            *peer = None;
        }
    }
}

/// Whether every tool `spec`'s lists name (`tools`, `idempotent_tools`,
/// `not_idempotent`, `approve`) is one the server `listed`.
fn lists_only_what_it_has(spec: &McpSpec, listed: &[rmcp::model::Tool]) -> Result<(), Error> {
    let lists = [
        ("tools", spec.tools.as_deref().unwrap_or_default()),
        ("idempotent_tools", spec.idempotent_tools.as_slice()),
        ("not_idempotent", spec.not_idempotent.as_slice()),
        (
            "approve",
            match &spec.approve {
                Some(Approve::Tools(tools)) => tools.as_slice(),
                _ => &[],
            },
        ),
    ];
    for (field, names) in lists {
        if let Some(missing) = names
            .iter()
            .find(|name| !listed.iter().any(|tool| tool.name == name.as_str()))
        {
            let have: Vec<&str> = listed.iter().map(|tool| tool.name.as_ref()).collect();
            return Err(Error::config(format!(
                "[[mcp]] {}: {field} lists {missing:?}, which the server does not have (it has {have:?})",
                spec.label()
            )));
        }
    }
    Ok(())
}

/// A result as the model reads it: its text parts (or its structured
/// content), or an error when it is larger than `limit` bytes.
fn result_text(result: &CallToolResult, limit: usize, tool: &str) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|content| content.as_text().map(|text| text.text.as_str()))
        .collect();
    let text = if texts.is_empty() {
        result
            .structured_content
            .as_ref()
            .map(Json::to_string)
            .unwrap_or_default()
    } else {
        texts.join("\n")
    };
    if text.len() > limit {
        return format!(
            "error: {tool} returned {} bytes, more than the {limit} this agent takes (max_result_bytes)",
            text.len()
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;

    fn spec(extra: &str) -> McpSpec {
        toml::from_str(&format!("command = [\"server\"]\n{extra}")).expect("a valid [[mcp]] table")
    }

    fn hints(read_only: Option<bool>, idempotent: Option<bool>) -> ToolAnnotations {
        let mut annotations = ToolAnnotations::default();
        annotations.read_only_hint = read_only;
        annotations.idempotent_hint = idempotent;
        annotations
    }

    #[test]
    fn annotations_decide_with_mcps_defaults() {
        let plain = spec("");
        let class = |a: Option<&ToolAnnotations>| Class::of(&plain, "t", a);
        assert_eq!(
            class(None),
            Class::NotRepeatable,
            "no annotations: not idempotent"
        );
        assert_eq!(class(Some(&hints(None, None))), Class::NotRepeatable);
        assert_eq!(class(Some(&hints(Some(true), None))), Class::ReadOnly);
        assert_eq!(
            class(Some(&hints(Some(false), Some(true)))),
            Class::Idempotent
        );
        assert_eq!(
            class(Some(&hints(Some(false), Some(false)))),
            Class::NotRepeatable
        );
    }

    #[test]
    fn the_spec_overrides_per_server_and_per_tool_both_ways() {
        let read_only = hints(Some(true), None);
        let keyed = spec("idempotent = true");
        assert_eq!(Class::of(&keyed, "t", None), Class::Keyed);
        assert_eq!(Class::of(&keyed, "t", Some(&read_only)), Class::ReadOnly);
        let never = spec("idempotent = false");
        assert_eq!(
            Class::of(&never, "t", Some(&read_only)),
            Class::NotRepeatable
        );
        let tools =
            spec("idempotent = false\nidempotent_tools = [\"up\"]\nnot_idempotent = [\"down\"]");
        assert_eq!(Class::of(&tools, "up", None), Class::Idempotent);
        assert_eq!(
            Class::of(&tools, "down", Some(&read_only)),
            Class::NotRepeatable
        );
        let old = spec("idempotent = true\nnot_idempotent = [\"refund\"]");
        assert_eq!(Class::of(&old, "refund", None), Class::NotRepeatable);
        assert_eq!(Class::of(&old, "lookup", None), Class::Keyed);
    }

    #[test]
    fn approve_picks_the_calls_that_wait() {
        let all = Approve::Class("all".to_owned());
        let destructive = Approve::Class("destructive".to_owned());
        let listed = Approve::Tools(vec!["refund".to_owned()]);
        assert!(!approved_first(None, "refund", false));
        assert!(approved_first(Some(&all), "lookup", true));
        assert!(approved_first(Some(&destructive), "refund", false));
        assert!(!approved_first(Some(&destructive), "lookup", true));
        assert!(approved_first(Some(&listed), "refund", false));
        assert!(!approved_first(Some(&listed), "close", false));
        assert_eq!(Class::NotRepeatable.as_str(), "not repeatable");
    }
}
