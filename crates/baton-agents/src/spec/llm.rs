//! The `[llm]` table of an agent spec: the model endpoint, its shared
//! rate limits (`[llm.limits]`), its price (`[llm.price]`), the agent's
//! cap per hop and the bound on the history it reads (`[llm.history]`).

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
    /// For a task that came through A2A, offer the model the built-in tool
    /// `a2a_reply`: it answers in A2A's own terms (a direct Message,
    /// artifacts of text, file and data parts, or a rejection), and the
    /// session completes with that answer.
    #[serde(default)]
    pub a2a_reply: bool,
    /// A bound on the conversation the model reads (`[llm.history]`);
    /// without it, the model reads the whole conversation.
    #[serde(default)]
    pub history: Option<HistorySpec>,
}

/// `[llm.history]`: past a bound, in messages or in estimated tokens, the
/// oldest exchanges of a conversation give way to one message that stands
/// for them: their summary, or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistorySpec {
    /// The most messages the model reads before the agent's own (the
    /// system prompt not counted).
    #[serde(default)]
    pub max_messages: Option<u32>,
    /// The most tokens those messages may hold, estimated at four
    /// characters a token.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// What becomes of the oldest exchanges: `summarize` (the default)
    /// or `drop`.
    #[serde(default)]
    pub older: Older,
    /// The model that summarises them, at the same endpoint; the agent's
    /// own model when left out.
    #[serde(default)]
    pub summary_model: Option<String>,
}

/// What becomes of the exchanges a bound leaves out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Older {
    /// A model summarises them into one message.
    #[default]
    Summarize,
    /// They are left out.
    Drop,
}

impl HistorySpec {
    /// What is wrong with the table, and the fix.
    #[must_use]
    pub fn problem(&self) -> Option<&'static str> {
        match (self.max_messages, self.max_tokens) {
            (None, None) => {
                Some("[llm.history] sets no bound: give max_messages = N, max_tokens = N, or both")
            }
            (Some(messages), _) if messages < 2 => Some(
                "[llm.history] max_messages must be at least 2: the newest exchange and what stands for the older ones",
            ),
            (_, Some(0)) => {
                Some("[llm.history] max_tokens = 0 leaves nothing to read: give at least 1")
            }
            _ if self.older == Older::Drop && self.summary_model.is_some() => Some(
                "[llm.history] summary_model has no use with older = \"drop\": leave one of them out",
            ),
            _ => None,
        }
    }

    /// The model that summarises, given the agent's own.
    #[must_use]
    pub fn summarizer<'a>(&'a self, own: &'a str) -> Option<&'a str> {
        match self.older {
            Older::Summarize => Some(self.summary_model.as_deref().unwrap_or(own)),
            Older::Drop => None,
        }
    }
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
