//! The options of the session commands: `baton send`, `watch` and `cancel`.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The user's message; `-` reads it from standard input.
    #[arg(required_unless_present_any = ["file", "context"], conflicts_with = "file")]
    pub text: Option<String>,

    /// Read the user's message from this file (any size: large tasks go
    /// through the claim-check).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,

    /// Start from a whole context, a JSON file with the fields of an
    /// envelope's `context` (messages, variables, state, trace, ...). The
    /// message, if given, is appended as the user's turn.
    #[arg(long, value_name = "FILE.json")]
    pub context: Option<PathBuf>,

    /// First agent type (default: the registry's best agent for --requires, else the router's
    /// default entry agent).
    #[arg(long)]
    pub to: Option<String>,

    /// Capabilities the first agent must have, comma-separated; the router asks the registry.
    #[arg(long, value_delimiter = ',', value_name = "CAP,...")]
    pub requires: Vec<String>,

    /// Publish straight to the agent's subject instead of the ingress (needs --to).
    #[arg(long, requires = "to")]
    pub direct: bool,

    /// Send the message as the next turn of conversation ID; an id not seen before starts
    /// one (--to is where it starts). The turn goes to the agent that holds the
    /// conversation, with the conversation so far; when an agent of it asked the user a
    /// question, the message is the answer. Needs the conversations bucket (the operator
    /// role's rights).
    #[arg(long, value_name = "ID", conflicts_with_all = ["context", "requires", "direct", "max_hops", "deadline_ms"])]
    pub conversation: Option<String>,

    /// With --conversation, what the message does while a turn runs: enqueue (it runs next,
    /// the default), reject (an error that names the running turn) or interrupt (the
    /// running turn is cancelled; the new one runs with both messages).
    #[arg(long, requires = "conversation", value_parser = super::conversation::overlap)]
    pub overlap: Option<baton_proto::Overlap>,

    /// Shared context variable KEY=VALUE (VALUE is read as JSON, else as a string). Repeatable.
    #[arg(long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,

    /// Hop budget of the session.
    #[arg(long)]
    pub max_hops: Option<u32>,

    /// Fail the session if it has not ended this many ms from now.
    #[arg(long)]
    pub deadline_ms: Option<u64>,

    /// The most the session may spend on models, in tokens in and out across every hop.
    /// A model call that would pass it is not made: the session goes to the fallback with
    /// reason budget_exceeded, saying what was spent.
    #[arg(long, value_name = "TOKENS", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_tokens: Option<u64>,

    /// The most the session may cost, as a decimal amount (e.g. 0.50) in the currency of
    /// the agents' [llm.price] tables. Calls of agents without a price table cost nothing
    /// toward it.
    #[arg(long, value_name = "AMOUNT", allow_negative_numbers = true, value_parser = amount)]
    pub budget_cost: Option<u64>,

    #[command(flatten)]
    pub waiting: Waiting,
}

/// How `send` and `replay` show the session they start.
#[derive(Debug, Args)]
pub struct Waiting {
    /// Wait for the session to end and print its outcome; exit 1 if it failed, 3 if it
    /// waits for a person (see `baton inbox`).
    #[arg(long)]
    pub wait: bool,

    /// Do not ask for answers as they are written. By default the session asks its LLM
    /// agents to stream, and --wait (and `baton watch`) print the text as it comes.
    #[arg(long)]
    pub no_stream: bool,

    /// With --wait: how long to wait, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Session id, as `baton send` printed it.
    pub session: String,

    /// Why, recorded as the `failed` event's detail.
    #[arg(long, default_value = "cancelled by an operator")]
    pub detail: String,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Session id.
    pub session: String,

    /// Print each event as a JSON line.
    #[arg(long)]
    pub json: bool,

    /// Keep following after the terminal event (a replay may re-open the session).
    #[arg(long)]
    pub follow: bool,

    /// Do not print answers as they are written (the `delta` events of a session sent
    /// without --no-stream); print the other events only.
    #[arg(long)]
    pub no_stream: bool,

    /// How long to wait for the session's first event before saying there is none.
    #[arg(long, default_value_t = 5)]
    pub start_timeout_secs: u64,
}

/// A budget's amount (`0.50`), in millionths: more than zero, at most six
/// decimal places.
pub(crate) fn amount(text: &str) -> Result<u64, String> {
    match baton_proto::micros(text) {
        Some(0) => Err("a budget of 0 lets no model call through: give more than 0".to_owned()),
        Some(micros) => Ok(micros),
        None => Err(format!(
            "{text:?} is not an amount: give a decimal like 0.50 (at most six places)"
        )),
    }
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The finished session to run again, as `baton send` printed it.
    pub session: String,

    /// Run again from this hop of the session's path (from 1, as `baton diff` numbers
    /// them): the hops before it reuse their recorded answers, it and the hops after it
    /// call the model again. By default every recorded answer is reused.
    #[arg(long, value_name = "HOP", value_parser = clap::value_parser!(u64).range(1..))]
    pub from: Option<u64>,

    /// Set a variable in the task the replay starts with, KEY=VALUE (VALUE is read as JSON,
    /// else as a string). Repeatable. An agent whose input changes calls its model again.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// The model every LLM agent of the replay calls instead of its own (so each calls it
    /// again; priced by the agent's own [llm.price]).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,

    /// Call MCP tools again instead of reusing their recorded results: their side effects
    /// happen again.
    #[arg(long)]
    pub call_tools: bool,

    #[command(flatten)]
    pub waiting: Waiting,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first session (say, the one replayed).
    pub first: String,

    /// The second session (say, its replay).
    pub second: String,

    /// Exit 1 when the sessions differ (0 when they do not).
    #[arg(long)]
    pub exit_code: bool,

    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}
