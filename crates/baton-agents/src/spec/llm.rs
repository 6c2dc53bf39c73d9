//! The `[llm]` table of an agent spec: the model endpoint, its shared
//! rate limits (`[llm.limits]`), its price (`[llm.price]`) and the agent's
//! cap per hop.

use serde::Deserialize;

/// Settings of an LLM agent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSpec {
    /// The endpoint's base URL, up to and including `/v1`.
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The model name.
    pub model: String,
    /// The environment variable that holds the API key; no key is sent when unset.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The system prompt, first in every conversation.
    #[serde(default)]
    pub system_prompt: String,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Longest answer, in tokens.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// How long one HTTP request may take, in ms.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// The most model calls and tool calls in one hop; passing it sends the
    /// session to the fallback with reason `max_steps`.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// The model endpoint's rate limits, shared by every worker of every
    /// agent type that calls the same endpoint and model (`[llm.limits]`).
    #[serde(default)]
    pub limits: Option<LimitsSpec>,
    /// The most tokens this agent's model calls may spend in one hop; a
    /// call that would pass it is not made (reason `budget_exceeded`).
    #[serde(default)]
    pub hop_budget_tokens: Option<u64>,
    /// What the model costs (`[llm.price]`), for cost budgets.
    #[serde(default)]
    pub price: Option<PriceSpec>,
    /// Asks the endpoint to stream its answers (`stream: true`) for a
    /// session that follows them live; `false` for an endpoint that refuses
    /// streaming. One that answers with plain JSON anyway is read whole.
    #[serde(default = "default_true")]
    pub stream: bool,
    /// In a conversation's turn, offer the model the built-in tool
    /// `ask_user(question)`: the turn waits for the user's answer, which is
    /// the tool's result when it resumes.
    #[serde(default = "default_true")]
    pub ask_user: bool,
    /// Offer the model the built-in tool `hand_back(answer)`: it answers
    /// the user and hands the conversation back to its entry, so the
    /// user's next message starts there instead of at this agent.
    #[serde(default)]
    pub hand_back: bool,
}

fn default_true() -> bool {
    true
}

/// `[llm.price]`: what the model costs per million tokens, in the currency
/// of the deployment's cost budgets.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceSpec {
    /// Per million tokens read (the prompt).
    pub input_per_million: f64,
    /// Per million tokens written (the answer).
    pub output_per_million: f64,
}

impl PriceSpec {
    /// What `input` tokens read and `output` written cost, in millionths.
    #[must_use]
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    pub fn micros(&self, input: u64, output: u64) -> u64 {
        // A price per million tokens is, per token, in millionths.
        let cost = input as f64 * self.input_per_million + output as f64 * self.output_per_million;
        cost.ceil().max(0.0) as u64
    }
}

/// `[llm.limits]`: what the provider allows per minute, for this endpoint
/// and model, across the whole deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// Requests per minute.
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Tokens per minute, prompt and answer together (the prompt estimated
    /// before the call, corrected by the reported usage after it).
    #[serde(default)]
    pub tokens_per_minute: Option<u32>,
}

fn default_max_steps() -> u32 {
    16
}

fn default_base_url() -> String {
    "https://api.openai.com/v1".to_owned()
}

fn default_request_timeout_ms() -> u64 {
    60_000
}
