//! `baton eval TYPE --version V`: a version tried on recorded sessions
//! before it takes live traffic. What it runs and measures is
//! `baton_client::eval`'s; the command chooses the sessions, runs them a
//! few at a time, and prints each and the summary.

use std::process::ExitCode;
use std::time::Duration;

use baton_client::eval::{Recorded, Summary, Trial, Verdict};
use baton_proto::{AgentName, Subjects, Version};
use clap::Args;
use futures::StreamExt as _;

use super::{agent_type, version};
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The agent type to try another version of.
    pub agent: String,

    /// The version to try (a worker of it must have run; it needs no share of the rollout).
    #[arg(long, value_name = "V")]
    pub version: String,

    /// How many recorded sessions to try: the most recent finished ones that reached TYPE.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub sessions: u32,

    /// Only sessions that ended within this long before now: 15s, 10m, 1h, 7d, or seconds.
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,

    /// Try conversation turns that reached TYPE instead of sessions.
    #[arg(long)]
    pub conversations: bool,

    /// An agent type (of any kind) asked, for each session, whether the new answer is better,
    /// the same or worse than the recorded one; it runs as an evaluation too (no write, no
    /// person, never a live outcome).
    #[arg(long, value_name = "AGENT")]
    pub judge: Option<String>,

    /// Print one JSON object per line: one per session, then the summary (`{"summary": …}`).
    #[arg(long)]
    pub json: bool,

    /// How many sessions run at once.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub parallel: u32,

    /// How long each evaluation (and each judgement) may take: 15s, 10m, or seconds.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    pub timeout: String,
}

/// `baton eval`: runs the chosen sessions again with TYPE on the version
/// tried, and prints how each went and the summary. Exits 1 when a
/// session could not be tried.
pub async fn run(nats: &NatsArgs, subjects: Subjects, args: EvalArgs) -> anyhow::Result<ExitCode> {
    let agent = agent_type(&args.agent)?;
    let tried = version(&args.version)?;
    let duration = |flag: &str, text: &str| {
        baton_proto::Gated::interval_ms(text).ok_or_else(|| {
            anyhow::anyhow!("{flag} {text:?} is not a duration: write e.g. 15s, 10m, 1h or 7d")
        })
    };
    let since = match &args.since {
        Some(text) => Some(baton_proto::now_ms().saturating_sub(duration("--since", text)?)),
        None => None,
    };
    let timeout = Duration::from_millis(duration("--timeout", &args.timeout)?);
    let judge = args.judge.as_deref().map(agent_type).transpose()?;
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Operator).await?;
    client.check_version(&agent, &tried).await?;
    if let Some(judge) = &judge {
        client.check_served(judge).await?;
    }
    let count = usize::try_from(args.sessions).unwrap_or(usize::MAX);
    let ends = client
        .reached(&agent, since, args.conversations, count)
        .await?;
    if ends.is_empty() {
        return Err(nothing_recorded(&agent, &args));
    }
    let trying = Trying {
        client: &client,
        agent: &agent,
        version: &tried,
        judge: judge.as_ref(),
        timeout,
    };
    let parallel = usize::try_from(args.parallel).unwrap_or(1);
    let mut runs =
        futures::stream::iter(ends.iter().map(|recorded| trying.one(recorded))).buffered(parallel);
    let (mut trials, mut failed) = (Vec::new(), 0_u32);
    if !args.json {
        println!("trying {agent}@{tried} on {} recorded sessions", ends.len());
    }
    while let Some((session, trial)) = runs.next().await {
        match trial {
            Ok(trial) => {
                print_trial(&trial, args.json)?;
                trials.push(trial);
            }
            Err(err) => {
                failed += 1;
                eprintln!("session {session} could not be tried: {err:#}");
            }
        }
    }
    let summary = Summary::of(&trials);
    if args.json {
        println!("{}", serde_json::json!({ "summary": summary }));
    } else {
        print_summary(&summary, &tried);
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Why there is nothing to try, and where tried sessions come from.
fn nothing_recorded(agent: &AgentName, args: &EvalArgs) -> anyhow::Error {
    let within = (args.since.as_ref())
        .map(|since| format!(" in the last {since}"))
        .unwrap_or_default();
    let (what, instead) = if args.conversations {
        ("conversation turn", "")
    } else {
        ("session", " (--conversations tries conversation turns)")
    };
    anyhow::anyhow!(
        "no finished {what} that reached {agent} is recorded{within}: sessions sent by \
         `baton send`, the MCP and A2A gateways and conversations are, once they end{instead}"
    )
}

/// What every trial shares.
struct Trying<'a> {
    client: &'a baton_client::Client,
    agent: &'a AgentName,
    version: &'a Version,
    judge: Option<&'a AgentName>,
    timeout: Duration,
}

impl Trying<'_> {
    /// The session `recorded`, tried again, and judged when asked (a
    /// judgement that fails is `unclear`, and says why).
    async fn one(&self, recorded: &Recorded) -> (uuid::Uuid, anyhow::Result<Trial>) {
        let session = recorded.end.session;
        let tried = async {
            let mut trial = (self.client)
                .evaluate(recorded, (self.agent, self.version), self.timeout)
                .await?;
            if let Some(judge) = self.judge {
                let verdict = (self.client.judge(judge, &trial, self.timeout).await)
                    .unwrap_or_else(|err| {
                        eprintln!("session {session}: the judge said nothing: {err}");
                        Verdict::Unclear
                    });
                trial.verdict = Some(verdict);
            }
            anyhow::Ok(trial)
        };
        (session, tried.await)
    }
}

fn print_trial(trial: &Trial, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(trial)?);
        return Ok(());
    }
    let side = |measured: &baton_client::eval::Measured| {
        format!(
            "{} {:.1}s {} tok ${:.4}",
            measured.outcome,
            measured.latency_ms as f64 / 1000.0,
            measured.tokens,
            measured.cost_micros as f64 / 1e6,
        )
    };
    let verdict = match (&trial.would_write, trial.same_answer) {
        (Some(call), _) => format!("would_write: {call}"),
        (None, true) => "same".to_owned(),
        (None, false) => "DIFFERENT".to_owned(),
    };
    let judged = trial
        .verdict
        .map(|verdict| {
            format!(
                " (judge: {})",
                serde_json::to_value(verdict).unwrap_or_default()
            )
        })
        .unwrap_or_default();
    println!(
        "{}  base: {}  new: {}  {verdict}{}",
        trial.session,
        side(&trial.base),
        side(&trial.trial),
        judged.replace('"', "")
    );
    Ok(())
}

fn print_summary(summary: &Summary, tried: &Version) {
    let share = |share: &baton_client::eval::Share| {
        format!(
            "{:.1}% [{:.1}, {:.1}] of {}",
            share.share * 100.0,
            share.low * 100.0,
            share.high * 100.0,
            share.sessions
        )
    };
    let ratio = |ratio: Option<f64>| ratio.map_or_else(|| "-".to_owned(), |r| format!("x{r:.2}"));
    println!(
        "{} sessions: {} same, {} different ({} would_write, {} unfinished)",
        summary.sessions, summary.same, summary.different, summary.would_write, summary.unfinished
    );
    println!(
        "success: recorded {}; {tried} {} (95% Wilson intervals)",
        share(&summary.base),
        share(&summary.trial)
    );
    println!(
        "{tried} against recorded: cost {}, tokens {}, median latency {}",
        ratio(summary.cost_ratio),
        ratio(summary.tokens_ratio),
        ratio(summary.latency_ratio)
    );
    if let Some([better, same, worse, unclear]) = summary.verdicts {
        println!("judge: {better} better, {same} same, {worse} worse, {unclear} unclear");
    }
}
