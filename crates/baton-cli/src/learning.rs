//! The registry from the command line: `baton agents` (with `--why`),
//! `baton feedback` and `baton notebook`, as the client role.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{AgentName, Candidate, FeedbackRequest, LookupRequest, Subjects, now_ms};
use baton_worker::RegistryClient;

use crate::args::{AgentsArgs, FeedbackArgs, NatsArgs, NotebookArgs};

const START_ONE: &str = "start a registry with `baton registry` (or `baton dev --serve`)";

async fn registry(
    nats: &NatsArgs,
    subjects: &Subjects,
    timeout_ms: u64,
) -> anyhow::Result<RegistryClient> {
    let role = baton_ops::Role::of(baton_ops::RoleKind::Client);
    let client = crate::nats::connect(nats, None, &role).await?;
    Ok(RegistryClient::new(client.client().clone(), subjects)
        .with_budget(Duration::from_millis(timeout_ms)))
}

/// `baton agents`: the live agent types, or with `--why` a ranking explained.
pub async fn agents(
    nats: &NatsArgs,
    subjects: Subjects,
    args: AgentsArgs,
) -> anyhow::Result<ExitCode> {
    let registry = registry(nats, &subjects, args.timeout_ms).await?;
    let request = LookupRequest {
        requires: args.requires,
        domains: args.domains,
        query: args.query,
        prefer: args.prefer,
        ..LookupRequest::default()
    };
    let mut candidates = registry
        .lookup(&request)
        .await
        .context(START_ONE)?
        .candidates;
    if !args.why {
        candidates.sort_by(|a, b| a.agent.cmp(&b.agent));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&candidates)?);
        return Ok(ExitCode::SUCCESS);
    }
    if candidates.is_empty() {
        if args.why {
            println!(
                "no live agent type fits: check --requires and --domains against `baton agents`"
            );
        } else {
            println!("no live agents: start workers with `baton worker <type>`");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.why {
        print_why(&candidates);
        return Ok(ExitCode::SUCCESS);
    }
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    let rows = candidates.iter().map(|c| {
        vec![
            c.agent.clone(),
            c.instances.to_string(),
            c.tier.to_string(),
            c.capabilities.join(","),
            c.domains.join(","),
            or_dash(
                c.in_flight
                    .zip(c.capacity)
                    .map(|(i, cap)| format!("{i}/{cap}")),
            ),
            or_dash(c.backlog.map(|b| b.to_string())),
            or_dash(c.success_ratio.map(|r| format!("{:.0}%", r * 100.0))),
        ]
    });
    let header = [
        "AGENT",
        "INSTANCES",
        "TIER",
        "CAPABILITIES",
        "DOMAINS",
        "IN-FLIGHT",
        "BACKLOG",
        "SUCCESS",
    ];
    print_table(&header, rows);
    Ok(ExitCode::SUCCESS)
}

/// The ranking, best first, one line of factors per candidate, then what
/// was learned and the similar sessions.
fn print_why(candidates: &[Candidate]) {
    let rows = candidates.iter().enumerate().map(|(n, c)| {
        let why = c.why.clone().unwrap_or_default();
        let learned = why.learned.as_ref().map_or_else(
            || "off".to_owned(),
            |l| {
                format!(
                    "{:.2}±{:.2} (n={}, drew {:.2})",
                    l.mean, l.sd, l.observations, l.sample
                )
            },
        );
        vec![
            format!("{}", n + 1),
            c.agent.clone(),
            format!("{:.3}", c.score),
            format!("{:.2}", why.fit),
            format!("{:.2}", why.tier),
            format!("{:.2}", why.free),
            format!("{:.2}", why.success),
            format!("{:.3}", why.base),
            learned,
        ]
    });
    let header = [
        "#", "AGENT", "SCORE", "FIT", "TIER", "FREE", "SUCCESS", "BASE", "LEARNED",
    ];
    print_table(&header, rows);
    println!();
    println!("score = base × the draw from LEARNED (× the notebook's bonus with --prefer);");
    println!("base = 0.35·fit + 0.15·tier + 0.35·free + 0.15·success.");
    for c in candidates {
        let Some(why) = &c.why else { continue };
        if let Some(l) = &why.learned {
            if l.votes > 0.0 {
                println!(
                    "{}: similar past sessions added {:.1} session(s) of evidence:",
                    c.agent, l.votes
                );
            }
        }
        for similar in &why.similar {
            println!(
                "  {}  similarity {:.2}  reward {:.2}",
                similar.session, similar.similarity, similar.reward
            );
        }
        if let Some(known) = &why.notebook {
            println!(
                "{}: in the notebook, {} session(s) together, mean reward {:.2}",
                c.agent, known.sessions, known.reward
            );
        }
    }
}

/// `baton feedback SESSION --score X [--note TEXT]`.
pub async fn feedback(
    nats: &NatsArgs,
    subjects: Subjects,
    args: FeedbackArgs,
) -> anyhow::Result<ExitCode> {
    // Checked here too, so that a typo is refused before connecting.
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.score),
        "--score {} is out of range: give a number from 0 (not resolved) to 1 (fully resolved)",
        args.score
    );
    let session = uuid::Uuid::parse_str(args.session.trim()).with_context(|| {
        format!(
            "{:?} is not a session id (as `baton send` prints it)",
            args.session
        )
    })?;
    let registry = registry(nats, &subjects, args.timeout_ms).await?;
    let request = FeedbackRequest {
        session: session.to_string(),
        score: args.score,
        note: args.note,
        extra: baton_proto::Map::new(),
    };
    let reply = registry
        .feedback(&request)
        .await
        .context("no feedback was recorded")?;
    println!(
        "feedback {} recorded for session {session}, credited to {}",
        args.score,
        if reply.credited.is_empty() {
            "no agent".to_owned()
        } else {
            reply.credited.join(", ")
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// `baton notebook AGENT`.
pub async fn notebook(
    nats: &NatsArgs,
    subjects: Subjects,
    args: NotebookArgs,
) -> anyhow::Result<ExitCode> {
    let agent = AgentName::new(args.agent.as_str())
        .with_context(|| format!("{:?} is not an agent type name", args.agent))?;
    let registry = registry(nats, &subjects, args.timeout_ms).await?;
    let book = registry.notebook(agent.as_str()).await.context(START_ONE)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&book)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} session(s) with an outcome",
        book.agent, book.sessions
    );
    if book.collaborators.is_empty() {
        println!(
            "no collaborators yet: no finished session had {} and another agent on its path",
            book.agent
        );
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_ms();
    let rows = book.collaborators.iter().map(|c| {
        vec![
            c.agent.clone(),
            c.sessions.to_string(),
            c.resolved.to_string(),
            c.escalated.to_string(),
            c.failed.to_string(),
            c.reopened.to_string(),
            format!("{:.2}", c.reward),
            format!("{:.1}s", c.mean_duration_ms as f64 / 1000.0),
            baton_proto::amount(c.cost_micros),
            c.feedback_score
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.2} ({})", c.feedback)),
            format!("{}s ago", now.saturating_sub(c.last_at) / 1000),
        ]
    });
    let header = [
        "COLLABORATOR",
        "SESSIONS",
        "RESOLVED",
        "ESCALATED",
        "FAILED",
        "REOPENED",
        "REWARD",
        "MEAN TIME",
        "COST",
        "FEEDBACK",
        "LAST",
    ];
    print_table(&header, rows);
    Ok(ExitCode::SUCCESS)
}

/// Prints rows under a header, in columns as wide as their widest cell.
fn print_table(header: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let rows: Vec<Vec<String>> = std::iter::once(header).chain(rows).collect();
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
