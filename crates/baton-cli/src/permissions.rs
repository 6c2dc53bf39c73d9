//! `baton permissions`: the NATS `permissions` block each role needs, as
//! tight as the calls it makes allow. Every role replies through its own
//! inbox prefix, and the block grants only that prefix.

use std::fmt::Write as _;

use baton_proto::{AgentName, Subjects};
use clap::ValueEnum;

use crate::args::PermissionsArgs;

/// What a `baton` process does, as far as NATS permissions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleKind {
    /// A worker of one agent type (`baton worker`).
    Worker,
    /// The ingress router (`baton router`).
    Router,
    /// A registry replica (`baton registry`).
    Registry,
    /// Sends tasks, follows and cancels them (`baton send`, `watch`, `cancel`, `agents`,
    /// `mcp serve`).
    Client,
    /// Dead letters, the human inbox and checks (`baton dlq`, `baton inbox`, `baton doctor`,
    /// `baton console`, `baton a2a serve`).
    Operator,
}

/// A role and, for a worker, its agent type.
#[derive(Debug, Clone)]
pub struct Role {
    pub kind: RoleKind,
    pub agent: Option<AgentName>,
}

impl Role {
    pub fn worker(agent: &AgentName) -> Self {
        Self {
            kind: RoleKind::Worker,
            agent: Some(agent.clone()),
        }
    }

    pub fn of(kind: RoleKind) -> Self {
        Self { kind, agent: None }
    }

    /// The connection name the server shows for this role.
    pub fn connection_name(&self) -> String {
        match (&self.kind, &self.agent) {
            (RoleKind::Worker, Some(agent)) => format!("baton worker {agent}"),
            (kind, _) => format!("baton {}", kind_name(*kind)),
        }
    }

    /// The role's own reply subjects: `_INBOX_<role>` (`_INBOX_worker_<agent>`).
    pub fn default_inbox_prefix(&self) -> String {
        match (&self.kind, &self.agent) {
            (RoleKind::Worker, Some(agent)) => format!("_INBOX_worker_{agent}"),
            (kind, _) => format!("_INBOX_{}", kind_name(*kind)),
        }
    }
}

fn kind_name(kind: RoleKind) -> &'static str {
    match kind {
        RoleKind::Worker => "worker",
        RoleKind::Router => "router",
        RoleKind::Registry => "registry",
        RoleKind::Client => "client",
        RoleKind::Operator => "operator",
    }
}

/// What one role may publish and subscribe to.
#[derive(Debug, Default)]
struct Block {
    publish: Vec<String>,
    subscribe: Vec<String>,
    /// Lets a service answer requests on their reply subjects.
    allow_responses: bool,
    /// What stays open, and why.
    notes: Vec<String>,
}

impl Block {
    fn publish<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, subjects: I) {
        self.publish.extend(subjects.into_iter().map(Into::into));
    }

    fn subscribe<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, subjects: I) {
        self.subscribe.extend(subjects.into_iter().map(Into::into));
    }
}

/// JetStream API subjects, `$JS.API.<what>`.
fn api(what: impl std::fmt::Display) -> String {
    format!("$JS.API.{what}")
}

/// Reading and writing a key-value bucket that the role may create.
fn kv_bucket(block: &mut Block, bucket: &str) {
    let stream = format!("KV_{bucket}");
    block.publish([
        api(format_args!("STREAM.INFO.{stream}")),
        api(format_args!("STREAM.CREATE.{stream}")),
        api(format_args!("STREAM.MSG.GET.{stream}")),
        api(format_args!("DIRECT.GET.{stream}.>")),
        format!("$KV.{bucket}.>"),
    ]);
}

/// The bucket of cancelled sessions: every role follows it (workers stop
/// cancelled sessions); those that may cancel also write it.
fn cancels(block: &mut Block, subjects: &Subjects, write: bool) {
    let bucket = subjects.cancelled_bucket();
    let stream = format!("KV_{bucket}");
    block.publish([
        api(format_args!("STREAM.INFO.{stream}")),
        api(format_args!("STREAM.CREATE.{stream}")),
        api(format_args!("CONSUMER.CREATE.{stream}")),
        api(format_args!("CONSUMER.CREATE.{stream}.>")),
        api(format_args!("CONSUMER.DELETE.{stream}.>")),
        api(format_args!("STREAM.MSG.GET.{stream}")),
        api(format_args!("DIRECT.GET.{stream}.>")),
    ]);
    if write {
        block.publish([format!("$KV.{bucket}.>")]);
    }
}

/// The claim-check object store: large parts of envelopes.
fn claims(block: &mut Block, subjects: &Subjects) {
    let bucket = subjects.claims_bucket();
    let stream = format!("OBJ_{bucket}");
    block.publish([
        api(format_args!("STREAM.INFO.{stream}")),
        api(format_args!("STREAM.CREATE.{stream}")),
        api(format_args!("STREAM.MSG.GET.{stream}")),
        api(format_args!("STREAM.PURGE.{stream}")),
        api(format_args!("DIRECT.GET.{stream}.>")),
        api(format_args!("CONSUMER.CREATE.{stream}")),
        api(format_args!("CONSUMER.CREATE.{stream}.>")),
        api(format_args!("CONSUMER.DELETE.{stream}.>")),
        format!("$O.{bucket}.>"),
    ]);
}

/// What every role that uses JetStream needs: account info, the stream
/// list (to tell a missing stream from one electing its leader), and its
/// own permissions.
fn common(block: &mut Block, inbox: &str) {
    block.publish([
        api("INFO"),
        api("STREAM.NAMES"),
        "$SYS.REQ.USER.INFO".to_owned(),
    ]);
    block.subscribe([format!("{inbox}.>")]);
}

/// The three streams: read by everyone, created and raised by `create`.
fn streams(block: &mut Block, subjects: &Subjects, create: bool) {
    for stream in [
        subjects.tasks_stream(),
        subjects.events_stream(),
        subjects.dlq_stream(),
    ] {
        block.publish([api(format_args!("STREAM.INFO.{stream}"))]);
        if create {
            block.publish([
                api(format_args!("STREAM.CREATE.{stream}")),
                api(format_args!("STREAM.UPDATE.{stream}")),
            ]);
        }
    }
}

/// Pulling from durable consumer `consumer` of the tasks stream, and its
/// max-deliveries advisory.
fn pull(block: &mut Block, subjects: &Subjects, consumer: &str) {
    let tasks = subjects.tasks_stream();
    block.publish([
        api(format_args!("CONSUMER.INFO.{tasks}.{consumer}")),
        api(format_args!("CONSUMER.CREATE.{tasks}.{consumer}")),
        api(format_args!("CONSUMER.CREATE.{tasks}.{consumer}.>")),
        api(format_args!("CONSUMER.DURABLE.CREATE.{tasks}.{consumer}")),
        api(format_args!("CONSUMER.MSG.NEXT.{tasks}.{consumer}")),
        format!("$JS.ACK.{tasks}.{consumer}.>"),
        format!("$JS.ACK.*.*.{tasks}.{consumer}.>"),
        // The advisory net reads and removes the message it dead-letters.
        api(format_args!("STREAM.MSG.GET.{tasks}")),
        api(format_args!("STREAM.MSG.DELETE.{tasks}")),
    ]);
    block.subscribe([format!(
        "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{tasks}.{consumer}"
    )]);
}

/// Reading a stream from the start through ordered consumers.
fn read(block: &mut Block, stream: &str) {
    block.publish([
        api(format_args!("CONSUMER.CREATE.{stream}")),
        api(format_args!("CONSUMER.CREATE.{stream}.>")),
        api(format_args!("CONSUMER.DELETE.{stream}.>")),
        api(format_args!("CONSUMER.MSG.NEXT.{stream}.>")),
        api(format_args!("STREAM.MSG.GET.{stream}")),
    ]);
}

fn worker(block: &mut Block, subjects: &Subjects, agent: &AgentName, args: &PermissionsArgs) {
    streams(block, subjects, false);
    pull(block, subjects, &Subjects::agent_consumer(agent));
    let tasks = subjects.tasks_stream();
    // Whether a target agent type has workers.
    block.publish([api(format_args!("CONSUMER.INFO.{tasks}.*"))]);
    // Whether a session ended (deadlines).
    block.publish([api(format_args!(
        "STREAM.MSG.GET.{}",
        subjects.events_stream()
    ))]);
    block.publish([
        format!("{}.events.*", subjects.prefix()),
        // Unstored progress at `--events lean`.
        subjects.all_live(),
        subjects.dlq(agent),
        subjects.heartbeat(agent, "*"),
        subjects.lookup(),
    ]);
    kv_bucket(block, &subjects.joins_bucket());
    // LLM agents: the hop journal.
    kv_bucket(block, &subjects.journal_bucket());
    claims(block, subjects);
    cancels(block, subjects, false);
    if args.human {
        kv_bucket(block, &subjects.inbox_bucket());
    }
    if args.to.is_empty() {
        block.publish([format!("{}.agent.*", subjects.prefix())]);
        block.notes.push(format!(
            "publish to every agent type ({}.agent.*) is open: give the agent types this worker hands off, \
             delegates, escalates and answers to with --to A,B (its routes, its fallback, the agent types \
             that delegate to it, and the agent types its capability targets resolve to)",
            subjects.prefix()
        ));
    } else {
        block.publish(args.to.iter().map(|to| subjects.agent(to)));
    }
}

fn router(block: &mut Block, subjects: &Subjects) {
    streams(block, subjects, true);
    pull(block, subjects, Subjects::INGRESS_CONSUMER);
    pull(block, subjects, Subjects::DEADLINES_CONSUMER);
    let tasks = subjects.tasks_stream();
    block.publish([
        api(format_args!("CONSUMER.INFO.{tasks}.*")),
        api(format_args!("STREAM.MSG.GET.{}", subjects.events_stream())),
        format!("{}.agent.*", subjects.prefix()),
        format!("{}.events.*", subjects.prefix()),
        subjects.dlq(&router_name()),
        subjects.lookup(),
    ]);
    // The session service: reads and cancels for clients, and the
    // session's events it waits for.
    block.subscribe([
        subjects.all_session_requests(),
        format!("{}.events.*", subjects.prefix()),
        subjects.all_live(),
    ]);
    block.allow_responses = true;
    claims(block, subjects);
    cancels(block, subjects, true);
    block.notes.push(
        "the router forwards tasks to any agent type, so it may publish to all of them".to_owned(),
    );
}

fn router_name() -> AgentName {
    AgentName::new("ingress").unwrap_or_else(|_| unreachable!("a valid agent name"))
}

fn registry(block: &mut Block, subjects: &Subjects) {
    let tasks = subjects.tasks_stream();
    block.publish([
        api(format_args!("STREAM.INFO.{tasks}")),
        api(format_args!("CONSUMER.LIST.{tasks}")),
        api(format_args!("CONSUMER.INFO.{tasks}.*")),
    ]);
    block.subscribe([
        format!("{}.registry.heartbeat.>", subjects.prefix()),
        subjects.lookup(),
        // The NATS service API: discovery and stats.
        "$SRV.>".to_owned(),
    ]);
    block.allow_responses = true;
}

fn client(block: &mut Block, subjects: &Subjects) {
    // Only the tasks stream: the router reads sessions for a client, one
    // session per request, since JetStream's read calls (a consumer's
    // filter, a stream's subject list, a get by sequence) accept a wildcard
    // or a number where the session would go.
    let tasks = subjects.tasks_stream();
    block.publish([
        api(format_args!("STREAM.INFO.{tasks}")),
        subjects.ingress(),
        api(format_args!("CONSUMER.INFO.{tasks}.*")),
        subjects.lookup(),
        // `baton watch`, `send --wait`, `cancel`, the MCP gateway.
        subjects.session_read_any(),
        subjects.session_cancel_any(),
    ]);
    claims_write_only(block, subjects);
    block.notes.push(
        "every client user given this block may subscribe to its inbox prefix, where the router's \
         answers (a session's events) arrive: give each client user its own --inbox-prefix, and \
         generate its block with the same prefix"
            .to_owned(),
    );
}

/// Storing large tasks in the claim-check bucket without reading it: a
/// client checks whether an object is there (its metadata, by name) and
/// writes it, but reads no object's contents.
fn claims_write_only(block: &mut Block, subjects: &Subjects) {
    let bucket = subjects.claims_bucket();
    let stream = format!("OBJ_{bucket}");
    block.publish([
        api(format_args!("STREAM.INFO.{stream}")),
        api(format_args!("STREAM.CREATE.{stream}")),
        api(format_args!("DIRECT.GET.{stream}.$O.{bucket}.M.*")),
        format!("$O.{bucket}.C.>"),
        format!("$O.{bucket}.M.>"),
    ]);
}

fn operator(block: &mut Block, subjects: &Subjects) {
    streams(block, subjects, false);
    let dlq = subjects.dlq_stream();
    read(block, &dlq);
    read(block, &subjects.events_stream());
    // `baton console`: live progress and the agents' heartbeats.
    block.subscribe([subjects.all_live(), subjects.all_heartbeats()]);
    block.publish([
        api(format_args!("STREAM.MSG.DELETE.{dlq}")),
        // Replays and inbox answers go back to any agent type, or the ingress.
        format!("{}.agent.*", subjects.prefix()),
        subjects.ingress(),
        format!("{}.events.*", subjects.prefix()),
        api(format_args!("CONSUMER.INFO.{}.*", subjects.tasks_stream())),
        // `baton doctor`: every consumer, the joins bucket, live workers.
        api(format_args!("CONSUMER.LIST.{}", subjects.tasks_stream())),
        api(format_args!("STREAM.INFO.KV_{}", subjects.joins_bucket())),
        subjects.lookup(),
    ]);
    let inbox = subjects.inbox_bucket();
    kv_bucket(block, &inbox);
    // Listing the inbox (`baton inbox ls`, the console) reads its keys
    // through an ordered consumer.
    block.publish([
        api(format_args!("CONSUMER.CREATE.KV_{inbox}")),
        api(format_args!("CONSUMER.CREATE.KV_{inbox}.>")),
        api(format_args!("CONSUMER.DELETE.KV_{inbox}.>")),
    ]);
    claims(block, subjects);
    cancels(block, subjects, true);
    // `baton a2a serve`: the tasks it started, listed by ListTasks.
    let a2a = subjects.a2a_bucket();
    kv_bucket(block, &a2a);
    block.publish([
        api(format_args!("CONSUMER.CREATE.KV_{a2a}")),
        api(format_args!("CONSUMER.CREATE.KV_{a2a}.>")),
        api(format_args!("CONSUMER.DELETE.KV_{a2a}.>")),
    ]);
}

/// The permissions block of the role `args` names, as NATS config text.
pub fn render(
    args: &PermissionsArgs,
    subjects: &Subjects,
    inbox_prefix: Option<&str>,
) -> anyhow::Result<String> {
    let role = match (args.role, &args.agent) {
        (RoleKind::Worker, Some(agent)) => Role::worker(agent),
        (RoleKind::Worker, None) => {
            anyhow::bail!("name the worker's agent type: `baton permissions worker <AGENT>`")
        }
        (kind, None) => Role::of(kind),
        (_, Some(_)) => anyhow::bail!("only the worker role takes an agent type"),
    };
    let inbox = inbox_prefix.map_or_else(|| role.default_inbox_prefix(), str::to_owned);
    let mut block = Block::default();
    match (&role.kind, &role.agent) {
        (RoleKind::Worker, Some(agent)) => {
            common(&mut block, &inbox);
            worker(&mut block, subjects, agent, args);
        }
        (RoleKind::Router, _) => {
            common(&mut block, &inbox);
            router(&mut block, subjects);
        }
        (RoleKind::Registry, _) => {
            block.subscribe([format!("{inbox}.>")]);
            // Its own permissions, which every process reads at start.
            block.publish(["$SYS.REQ.USER.INFO".to_owned()]);
            registry(&mut block, subjects);
        }
        (RoleKind::Client, _) => {
            common(&mut block, &inbox);
            client(&mut block, subjects);
        }
        (RoleKind::Operator, _) => {
            common(&mut block, &inbox);
            operator(&mut block, subjects);
        }
        (RoleKind::Worker, None) => unreachable!("checked above"),
    }
    Ok(format_block(&role, &inbox, block))
}

fn format_block(role: &Role, inbox: &str, mut block: Block) -> String {
    for list in [&mut block.publish, &mut block.subscribe] {
        list.sort();
        list.dedup();
    }
    let mut text = format!(
        "# {} replies on {inbox}.> (the role's default inbox prefix; --inbox-prefix or \
         BATON_INBOX_PREFIX changes it, and then this block must be generated with the same)\n",
        role.connection_name()
    );
    for note in &block.notes {
        let _ = writeln!(text, "# open: {note}");
    }
    text.push_str("permissions {\n  publish {\n    allow: [\n");
    for subject in &block.publish {
        let _ = writeln!(text, "      \"{subject}\"");
    }
    text.push_str("    ]\n  }\n  subscribe {\n    allow: [\n");
    for subject in &block.subscribe {
        let _ = writeln!(text, "      \"{subject}\"");
    }
    text.push_str("    ]\n  }\n");
    if block.allow_responses {
        text.push_str("  allow_responses: true\n");
    }
    text.push_str("}\n");
    text
}
