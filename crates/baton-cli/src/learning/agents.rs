//! `baton agents`: the live agent types, or with `--why` a ranking explained.

use std::process::ExitCode;

use anyhow::Context as _;
use baton_proto::{Candidate, LookupRequest, Subjects};
use clap::Args;

use super::registry::{START_ONE, print_table, registry};
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct AgentsArgs {
    /// Print the registry's answer as JSON.
    #[arg(long)]
    pub json: bool,

    /// Rank the agent types that fit --requires (and --domains, --query, --prefer), best
    /// first, and explain each score.
    #[arg(long)]
    pub why: bool,

    /// With --why: the capabilities the work needs.
    #[arg(long, value_delimiter = ',', value_name = "CAP,...", requires = "why")]
    pub requires: Vec<String>,

    /// With --why: knowledge domains, of which an agent needs one.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "DOMAIN,...",
        requires = "why"
    )]
    pub domains: Vec<String>,

    /// With --why: the task's text, so that similar past sessions vote.
    #[arg(long, requires = "why")]
    pub query: Option<String>,

    /// With --why: an agent type whose notebook counts (its good collaborators rank higher).
    #[arg(long, requires = "why")]
    pub prefer: Option<String>,

    /// How long to keep asking when no registry answers, in ms.
    #[arg(long, default_value_t = 3000)]
    pub timeout_ms: u64,
}

/// `baton agents`: the live agent types, or with `--why` a ranking explained.
pub async fn run(
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
            c.agent.to_string(),
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
            or_dash(versions(c)),
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
        "VERSIONS",
    ];
    print_table(&header, rows);
    Ok(ExitCode::SUCCESS)
}

/// The versions `candidate`'s live instances run, each with how many run
/// it: `1 (2), 2 (1)`; `None` when none names one.
fn versions(candidate: &Candidate) -> Option<String> {
    let versions = &candidate.versions;
    (!versions.is_empty()).then(|| {
        let each = versions
            .iter()
            .map(|(version, n)| format!("{version} ({n})"));
        each.collect::<Vec<_>>().join(", ")
    })
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
            c.agent.to_string(),
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
