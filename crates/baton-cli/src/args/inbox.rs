//! `baton check`'s and `baton inbox`'s options: spec files, and what
//! waits for a person.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Spec files (TOML).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Also reach each LLM spec's [[mcp]] servers (starting `command` ones) and list every
    /// tool with its class: read-only, idempotent or keyed (an unknown outcome is repeated)
    /// or not repeatable (it goes to a person), and whether its calls need approval.
    #[arg(long)]
    pub tools: bool,
}

/// Who settles an inbox entry, recorded with the decision (default: $USER).
#[derive(Debug, Args)]
pub struct Person {
    /// Who decides, recorded with the decision (default: $USER).
    #[arg(
        long = "as",
        value_name = "NAME",
        env = "USER",
        default_value = "person"
    )]
    pub person: String,
}

#[derive(Debug, Subcommand)]
pub enum InboxCommand {
    /// List what waits for a person: tasks for a human agent, tool calls whose outcome is
    /// unknown (reason tool_outcome_unknown) and tool calls waiting for approval (reason
    /// approval_required), with id, agent, reason and the question or the call.
    Ls {
        /// Print JSON lines: id, session, agent, reason, since, query, and for a tool call
        /// tool and arguments (a JSON object) and made_at.
        #[arg(long)]
        json: bool,
    },
    /// Show one waiting task with its whole context.
    Show {
        /// Task id, as `baton inbox ls` shows it.
        id: String,
    },
    /// Answer a waiting task. The answer is added to the conversation; then the session
    /// completes with it (the default) or goes on to another agent.
    Reply {
        /// Task id, as `baton inbox ls` shows it.
        id: String,
        /// The answer.
        text: String,
        /// Hand the session to this agent type instead of completing it.
        #[arg(long, conflicts_with = "complete")]
        handoff: Option<String>,
        /// Complete the session with the answer (the default).
        #[arg(long)]
        complete: bool,
        /// Who answers, recorded as the instance on the path (default: $USER).
        #[arg(
            long = "as",
            value_name = "NAME",
            env = "USER",
            default_value = "person"
        )]
        person: String,
    },
    /// Settle a tool call whose outcome is unknown (reason tool_outcome_unknown): the worker
    /// stopped between making it and recording its result, and its tool must not be called
    /// twice. Check the system the tool acts on, then say what happened: exactly one of
    /// --happened, --not-happened and --fail.
    #[command(group(clap::ArgGroup::new("decision").required(true).args(["happened", "not_happened", "fail"])))]
    Resolve {
        /// Entry id, as `baton inbox ls` shows it.
        id: String,
        /// The call happened: the agent goes on with --result as the tool's result, without
        /// calling the tool or asking the model again.
        #[arg(long)]
        happened: bool,
        /// The call did not happen: the agent makes it, once.
        #[arg(long)]
        not_happened: bool,
        /// Fail the session (reason tool_outcome_unknown, with --note).
        #[arg(long)]
        fail: bool,
        /// With --happened: the call's result, as the model should read it.
        #[arg(long, value_name = "TEXT", requires = "happened")]
        result: Option<String>,
        /// With --fail: why, recorded in the session's failure.
        #[arg(long, value_name = "TEXT", requires = "fail")]
        note: Option<String>,
        #[command(flatten)]
        person: Person,
    },
    /// Approve a tool call waiting for approval (reason approval_required): it is made once,
    /// with exactly the arguments shown.
    Approve {
        /// Entry id, as `baton inbox ls` shows it.
        id: String,
        #[command(flatten)]
        person: Person,
    },
    /// Deny a tool call waiting for approval: it is not made, and the model reads that it was
    /// denied, with --note.
    Deny {
        /// Entry id, as `baton inbox ls` shows it.
        id: String,
        /// Why, for the model.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
        #[command(flatten)]
        person: Person,
    },
}
