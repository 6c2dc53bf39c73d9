//! The versions page: for each versioned agent type, where its new work
//! goes (current and ramping, with their weights), each version's state,
//! live workers and what is pinned to it, and the rollout's changes. It is
//! the reading of `baton versions`, from the same library code
//! (`baton_client::versions`), for every type at once.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use baton_client::versions::{Standing, Versions};
use baton_proto::AgentName;
use maud::{Markup, html};

use crate::app::{App, failure};

/// How long the page waits for the registry's count of live workers.
const REGISTRY_BUDGET: Duration = Duration::from_millis(1000);

/// How many of a rollout's latest changes the page lists.
const CHANGES_SHOWN: usize = 20;

/// `?fragment=1` asks for the versions alone, for the page's refresh.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Fragment {
    #[serde(default)]
    fragment: Option<u8>,
}

/// The versions, opened on first use; an error page that says what to do
/// when this console's NATS user may not read them.
async fn opened(app: &App) -> Result<&Versions, Response> {
    app.versions
        .get_or_try_init(|| {
            Versions::open(
                app.client.jetstream().clone(),
                app.subjects.clone(),
                app.replicas,
                REGISTRY_BUDGET,
            )
        })
        .await
        .map_err(|err| failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/"))
}

/// `/versions`: every versioned agent type's versions.
pub(crate) async fn page(State(app): State<App>, Query(fragment): Query<Fragment>) -> Response {
    let versions = match opened(&app).await {
        Ok(versions) => versions,
        Err(page) => return page,
    };
    let rollouts = match versions.rollouts().await {
        Ok(rollouts) => rollouts,
        Err(err) => return failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/"),
    };
    let mut standings = Vec::with_capacity(rollouts.len());
    for (agent, rollout) in &rollouts {
        let Ok(name) = AgentName::new(agent) else {
            tracing::warn!(%agent, "a rollout keyed by a name that is no agent type is left out");
            continue;
        };
        let gathered = match versions.gather(&name, rollout).await {
            Ok(gathered) => gathered,
            Err(err) => return failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/"),
        };
        let decisions = match versions.decisions(&name).await {
            Ok(decisions) => decisions,
            Err(err) => return failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/"),
        };
        let gated = crate::gated::shown(rollout, &decisions);
        standings.push((Standing::of(rollout, &gathered), gated));
    }
    let main = all(&standings);
    let markup = if fragment.fragment.is_some() {
        main
    } else {
        crate::view::page("Versions", "versions", main)
    };
    Html(markup.into_string()).into_response()
}

/// Every type's versions, in `#versions` (what the page's refresh swaps).
fn all(standings: &[(Standing, Markup)]) -> Markup {
    html! {
        div #versions {
            h1 { "Versions" }
            @if standings.is_empty() {
                p.count {
                    "No agent type is versioned: a worker started with a version (`version = \"...\"` \
                     in its spec, or `baton worker --version V`) makes its type versioned."
                }
            }
            @for (standing, gated) in standings { (one(standing, gated)) }
        }
    }
}

/// One agent type's versions, its gated rollout, and its rollout's changes.
fn one(standing: &Standing, gated: &Markup) -> Markup {
    let agent = &standing.agent;
    let shown = standing.history.len().saturating_sub(CHANGES_SHOWN);
    html! {
        section.agent-versions data-agent=(agent) {
            h2 { (agent) }
            p.rollout data-current=(standing.current)
                data-ramping=[standing.ramping().map(|row| row.version.as_str())] {
                "New sessions and conversations go to "
                b { (agent) "@" (standing.current) }
                @if let Some(ramp) = standing.ramping() {
                    " (" ((100 - u16::from(ramp.weight))) " %) and to "
                    b { (agent) "@" (ramp.version) } " (" (ramp.weight) " %, ramping)"
                }
                @if let Some(back) = back_to(standing) {
                    "; " code { "baton rollout " (agent) " --back" } " sends them all to "
                    b { (agent) "@" (back) }
                }
                ". Sessions and conversations pinned to a version finish on it."
            }
            table.versions {
                thead { tr {
                    th { "Version" }
                    th { "State" }
                    th title="percent of new sessions and conversations it takes" { "Share of new work" }
                    th title="live worker processes, by the registry's heartbeats" { "Live workers" }
                    th title="messages waiting on its consumer" { "Messages waiting" }
                    th title="messages its workers hold, not yet acknowledged" { "Messages in flight" }
                    th title="tasks pinned to it on the tasks stream, at any agent type" { "Tasks pinned" }
                    th title="tasks pinned to it that wait in the inbox" { "Inbox items pinned" }
                    th title="conversations pinned to it" { "Conversations pinned" }
                    th title="delegations pinned to it that wait for their children" { "Delegations pinned" }
                } }
                tbody { @for row in &standing.versions {
                    tr data-version=(row.version) data-state=(row.state) data-weight=(row.weight) {
                        td.agent { (agent) "@" (row.version) }
                        td { span class=(format!("state version-{}", row.state)) { (row.state) } }
                        td.num { (row.weight) " %" }
                        td.num { @match row.workers { Some(n) => (n), None => "?" } }
                        td.num { (row.pending) }
                        td.num { (row.unacked) }
                        td.num { (row.tasks) }
                        td.num { (row.inbox) }
                        td.num { (row.conversations) }
                        td.num { (row.delegations) }
                    }
                } }
            }
            @if !standing.registry {
                p.count { "Live workers: no registry answered; start one with " code { "baton registry" } "." }
            }
            @if standing.unversioned.pending + standing.unversioned.unacked > 0 {
                p.count {
                    (standing.unversioned.pending + standing.unversioned.unacked)
                    " messages wait on " (agent) "'s own subject (sent by a process that knows no \
                     versions): its versioned workers move them to their versions."
                }
            }
            (gated)
            @if let Some(changes) = standing.history.get(shown..).filter(|c| !c.is_empty()) {
                details.changes open {
                    summary { "Changes, latest last (" (changes.len()) ")" }
                    ol.changes { @for change in changes {
                        li data-what=(change.what) data-version=(change.version) {
                            (baton_gateway::text::rollout_change(change))
                        }
                    } }
                }
            }
        }
    }
}

/// Where `baton rollout --back` sends new work: all of it to the current
/// version while one ramps, else to the previous version, if any.
fn back_to(standing: &Standing) -> Option<&str> {
    match standing.ramping() {
        Some(_) => Some(&standing.current),
        None => standing.previous.as_deref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_label_from_the_store_is_escaped() {
        let standing = Standing {
            agent: "helper".to_owned(),
            current: "<script>1".to_owned(),
            previous: None,
            versions: Vec::new(),
            unversioned: baton_client::versions::Queue::default(),
            registry: true,
            history: Vec::new(),
        };
        let page = one(&standing, &html! {}).into_string();
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;1"), "{page}");
    }
}
