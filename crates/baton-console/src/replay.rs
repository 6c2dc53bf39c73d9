//! Replaying a finished session from its page: as a whole (every recorded
//! answer reused) or from one of its hops (the hops before it reuse their
//! answers; it and the later ones call the model again).

use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use baton_client::Client;
use baton_proto::{Event, EventType, Start};
use futures::StreamExt;
use maud::{Markup, html};
use uuid::Uuid;

use crate::app::{App, failure, forged};
use crate::index::Summary;

/// The page's replay section: shown for a finished session that can be
/// replayed (its task asked to be), with a button per hop.
pub(crate) fn section(summary: &Summary, events: &[Event], csrf: &str) -> Markup {
    let start = events.iter().find_map(Start::from_event);
    let what = match &start {
        Some(start) if start.eval => "An evaluation (baton eval) of ",
        _ => "A replay of ",
    };
    let of = html! {
        @if let Some(of) = start.and_then(|start| start.replay_of) {
            p #replay-of { (what) a href=(format!("/sessions/{of}")) { code { (of) } } "." }
        }
    };
    let replayable = events.iter().any(|event| event.kind == EventType::Started);
    let Some(end) = baton_client::ending(events).filter(|_| replayable) else {
        return of;
    };
    let action = format!("/sessions/{}/replay", summary.id);
    html! {
        (of)
        section #replay data-keep {
            h2 { "Replay" }
            p.muted { "A replay is a new session that starts with this one's task. Recorded model answers and tool results are reused: a replay of the whole session calls no model. From a hop, the hops before it reuse theirs, and it and the hops after it call the model again." }
            form method="post" action=(action) {
                (crate::view::csrf(csrf))
                button #replay-all type="submit" { "Replay this session" }
            }
            ol #replay-hops {
                @for (index, hop) in end.path.iter().enumerate() {
                    li {
                        form method="post" action=(action) {
                            (crate::view::csrf(csrf))
                            input type="hidden" name="from" value=(index + 1);
                            b { (hop.agent) } " "
                            button.replay-from type="submit" data-hop=(index + 1) { "Replay from here" }
                        }
                    }
                }
            }
        }
    }
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct ReplayForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    from: Option<usize>,
}

/// Replays a finished session (from a hop, if given), then shows the replay.
pub(crate) async fn replay(
    State(app): State<App>,
    Path(id): Path<Uuid>,
    Form(form): Form<ReplayForm>,
) -> Response {
    let page = format!("/sessions/{id}");
    if let Some(refused) = forged(&app, &form.csrf, &page) {
        return refused;
    }
    match start(&app.client, id, form.from).await {
        Ok(replay) => Redirect::to(&format!("/sessions/{replay}")).into_response(),
        Err((status, message)) => failure(status, &message, &page),
    }
}

/// Starts a replay of session `id` (from hop `from`, if given), and waits
/// a little for its first event, so that its page has something to show:
/// the replay's session id, or the status and message to answer with.
pub(crate) async fn start(
    client: &Client,
    id: Uuid,
    from: Option<usize>,
) -> Result<Uuid, (StatusCode, String)> {
    let options = baton_client::SessionReplay {
        from,
        ..baton_client::SessionReplay::default()
    };
    let gateway = |err: baton_nats::Error| (StatusCode::BAD_GATEWAY, err.to_string());
    let (task, agent) = client.replay_of(id, &options).await.map_err(|err| {
        // The session's own state refuses it; anything else is NATS.
        let status = if err.kind() == baton_nats::ErrorKind::Config {
            StatusCode::CONFLICT
        } else {
            StatusCode::BAD_GATEWAY
        };
        (status, err.to_string())
    })?;
    // Followed before it is sent, so that none of its events is missed.
    let mut events = client.events(task.session).await.map_err(gateway)?;
    client.submit_to(&agent, &task).await.map_err(gateway)?;
    let _ = tokio::time::timeout(FIRST_EVENT, events.next()).await;
    Ok(task.session)
}

/// How long a replay's first event is waited for before its page is shown.
const FIRST_EVENT: std::time::Duration = std::time::Duration::from_secs(10);
