//! The console's routes: pages, actions and the live feed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use baton_client::ReplayOptions;
use baton_client::Reply;
use baton_proto::{AgentName, EventType, LookupRequest, Subjects, Wire, now_ms};
use futures::{Stream, StreamExt};
use maud::Markup;
use tokio::sync::broadcast;
use tower_http::compression::CompressionLayer;
use uuid::Uuid;

use crate::app::{App, failure, forged};
use crate::index::{Summary, trace_of};
use crate::ops::{self, Heartbeats};
use crate::view::{self, Detail, Filter};

const CSS: &str = include_str!("../static/console.css");
const JS: &str = include_str!("../static/console.js");

/// The console's routes, behind the access guard.
pub(crate) fn router(app: App) -> Router {
    let access = app.access.clone();
    Router::new()
        .route("/", get(sessions))
        .route("/sessions/{id}", get(session))
        .route("/sessions/{id}/cancel", axum::routing::post(cancel))
        .route(
            "/sessions/{id}/replay",
            axum::routing::post(crate::replay::replay),
        )
        .route(
            "/sessions/{id}/feedback",
            axum::routing::post(crate::feedback::feedback),
        )
        .route("/agents", get(agents))
        .route("/versions", get(crate::versions::page))
        .route("/dlq", get(dead_letters))
        .route("/dlq/{seq}/replay", get(confirm_replay).post(replay))
        .route("/inbox", get(inbox))
        .route("/inbox/{id}", axum::routing::post(answer))
        .route(
            "/inbox/{id}/decide",
            axum::routing::post(crate::decide::decide),
        )
        .route("/conversations", get(crate::conversations::list))
        .route("/conversations/{id}", get(crate::conversations::page))
        .route("/live", get(live))
        .route(
            "/static/console.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS) }),
        )
        .route(
            "/static/console.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    JS,
                )
            }),
        )
        .with_state(app)
        // Pages of many sessions shrink about tenfold (the live feed, as
        // server-sent events, stays uncompressed: the default predicate).
        .layer(CompressionLayer::new())
        .layer(axum::middleware::from_fn_with_state(
            access,
            crate::auth::guard,
        ))
}

/// `?fragment=1` asks for `main` alone, for live updates.
#[derive(Debug, Default, serde::Deserialize)]
struct Fragment {
    #[serde(default)]
    fragment: Option<u8>,
}

fn respond(title: &str, current: &str, main: Markup, fragment: &Fragment) -> Response {
    let markup = if fragment.fragment.is_some() {
        main
    } else {
        view::page(title, current, main)
    };
    Html(markup.into_string()).into_response()
}

async fn sessions(
    State(app): State<App>,
    Query(filter): Query<Filter>,
    Query(fragment): Query<Fragment>,
) -> Response {
    if let Ok(id) = filter.q.trim().parse::<Uuid>() {
        return Redirect::to(&format!("/sessions/{id}")).into_response();
    }
    let all = app.index.latest();
    let total = all.len();
    let rows: Vec<Summary> = all
        .into_iter()
        .filter(|s| filter.admits(s))
        .take(app.shown)
        .collect();
    let main = view::sessions(&rows, &filter, total, now_ms());
    respond("Sessions", "sessions", main, &fragment)
}

async fn session(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(fragment): Query<Fragment>,
) -> Response {
    let Ok(id) = id.parse::<Uuid>() else {
        return failure(StatusCode::BAD_REQUEST, "a session id is a UUID", "/");
    };
    let events = match app.client.history(id).await {
        Ok(events) => events,
        Err(err) => return failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/"),
    };
    if events.is_empty() {
        let message = format!(
            "no events of session {id} are stored: check the id (events are kept for the events stream's max age)"
        );
        return failure(StatusCode::NOT_FOUND, &message, "/");
    }
    let mut summary = Summary::of(id, &events, app.index.versioned());
    // What only the live feed brings: the answer being written.
    let indexed = app.index.get(id);
    summary.writing = indexed.as_ref().and_then(|s| s.writing.clone());
    summary.trace_id = match indexed.and_then(|s| s.trace_id) {
        Some(trace) => Some(trace),
        None => last_trace(&app, id).await,
    };
    // Only a session with a `dead_lettered` event has dead letters, and only
    // a waiting one an inbox entry: a page refreshes on every event, so
    // the stream and the bucket are read for those alone.
    let dead = dead_letters_of(&app, id, &events).await;
    let waiting = if summary.state == crate::index::State::Waiting {
        match app.inbox.list().await {
            Ok(entries) => entries.into_iter().find(|e| e.envelope.session == id),
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the inbox");
                None
            }
        }
    } else {
        None
    };
    let ended = events
        .iter()
        .rev()
        .find_map(|e| e.context.as_deref().filter(|_| e.kind.is_terminal()));
    let dead_envelope = dead.last().and_then(|d| {
        <baton_proto::Envelope as baton_proto::Wire>::from_msgpack_limited(&d.payload, usize::MAX)
            .ok()
    });
    let context = match (&waiting, ended, &dead_envelope) {
        (Some(entry), _, _) => Some(("waiting for a person", &entry.envelope.context)),
        (None, Some(context), _) => Some(("as the session ended", context)),
        (None, None, Some(envelope)) => Some(("from its dead letter", &envelope.context)),
        _ => None,
    };
    let trace_link = app
        .trace_url
        .as_ref()
        .zip(summary.trace_id.as_ref())
        .map(|(url, trace)| url.replace("{trace_id}", trace));
    let detail = Detail {
        summary: &summary,
        events: &events,
        context,
        dead_letters: dead.iter().map(|d| d.seq).collect(),
        trace_link,
        csrf: app.access.csrf(),
        actions: maud::html! {
            (crate::replay::section(&summary, &events, app.access.csrf()))
            (crate::feedback::section(id, &events, app.access.csrf()))
        },
    };
    respond("Session", "sessions", view::session(&detail), &fragment)
}

/// The dead letters of `session`, whose stored events are `events`: only
/// a session with a `dead_lettered` event has any, so only then is the
/// stream read.
async fn dead_letters_of(
    app: &App,
    id: Uuid,
    events: &[baton_proto::Event],
) -> Vec<baton_client::DeadLetterEntry> {
    if events.iter().any(|e| e.kind == EventType::DeadLettered) {
        match app.client.dead_letters().await {
            Ok(all) => all.into_iter().filter(|d| d.session == Some(id)).collect(),
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the dead letters");
                Vec::new()
            }
        }
    } else {
        Vec::new()
    }
}

/// The trace id on the latest stored event of `session`.
async fn last_trace(app: &App, session: Uuid) -> Option<String> {
    let stream = app
        .client
        .jetstream()
        .get_stream(app.subjects.events_stream())
        .await
        .ok()?;
    let message = stream
        .get_last_raw_message_by_subject(&app.subjects.events(session))
        .await
        .ok()?;
    trace_of(Some(&message.headers))
}

async fn agents(State(app): State<App>, Query(fragment): Query<Fragment>) -> Response {
    let mut candidates = match app.registry.lookup(&LookupRequest::default()).await {
        Ok(answer) => answer.candidates,
        Err(err) => {
            let message = format!("{err}: start a registry with `baton registry`");
            return failure(StatusCode::BAD_GATEWAY, &message, "/agents");
        }
    };
    candidates.sort_by(|a, b| a.agent.cmp(&b.agent));
    let beats = app.heartbeats.read().map(|b| b.clone()).unwrap_or_default();
    let now = now_ms();
    let versioned = app.index.versioned();
    let main = if fragment.fragment.is_some() {
        ops::agents_table(&candidates, &beats, versioned, now)
    } else {
        ops::agents(&candidates, &beats, versioned, now)
    };
    respond("Agents", "agents", main, &fragment)
}

async fn dead_letters(State(app): State<App>) -> Response {
    match app.client.dead_letters().await {
        Ok(entries) => respond(
            "Dead letters",
            "dlq",
            ops::dead_letters(&entries),
            &Fragment::default(),
        ),
        Err(err) => failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/dlq"),
    }
}

async fn confirm_replay(State(app): State<App>, Path(seq): Path<u64>) -> Response {
    match app.client.dead_letter(seq).await {
        Ok(Some(entry)) => respond(
            "Replay",
            "dlq",
            ops::confirm_replay(&entry, app.access.csrf()),
            &Fragment::default(),
        ),
        Ok(None) => failure(
            StatusCode::NOT_FOUND,
            &format!("no dead letter #{seq} (already replayed?)"),
            "/dlq",
        ),
        Err(err) => failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/dlq"),
    }
}

#[derive(Debug, serde::Deserialize)]
struct CancelForm {
    #[serde(default)]
    csrf: String,
}

/// Cancels a session, then shows it.
async fn cancel(
    State(app): State<App>,
    Path(id): Path<Uuid>,
    Form(form): Form<CancelForm>,
) -> Response {
    let page = format!("/sessions/{id}");
    if let Some(refused) = forged(&app, &form.csrf, &page) {
        return refused;
    }
    match app.client.cancel(id, "cancelled from the console").await {
        Ok(_) => Redirect::to(&page).into_response(),
        Err(err) => failure(StatusCode::BAD_GATEWAY, &err.to_string(), &page),
    }
}

#[derive(Debug, serde::Deserialize)]
struct ReplayForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    extend_deadline_s: Option<u64>,
}

async fn replay(
    State(app): State<App>,
    Path(seq): Path<u64>,
    Form(form): Form<ReplayForm>,
) -> Response {
    if let Some(refused) = forged(&app, &form.csrf, "/dlq") {
        return refused;
    }
    let options =
        ReplayOptions::default().extend_deadline(form.extend_deadline_s.map(Duration::from_secs));
    let session = match app.client.dead_letter(seq).await {
        Ok(entry) => entry.and_then(|e| e.session),
        Err(err) => return failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/dlq"),
    };
    match (app.client.replay(seq, options).await, session) {
        (Ok(_), Some(session)) => Redirect::to(&format!("/sessions/{session}")).into_response(),
        (Ok(id), None) => {
            let message = format!("dead letter #{seq} went back to its subject as message {id}");
            respond(
                "Replayed",
                "dlq",
                view::notice("Replayed", &message, "/dlq"),
                &Fragment::default(),
            )
        }
        (Err(err), _) => failure(StatusCode::CONFLICT, &err.to_string(), "/dlq"),
    }
}

async fn inbox(State(app): State<App>) -> Response {
    match app.inbox.list().await {
        Ok(entries) => respond(
            "Inbox",
            "inbox",
            ops::inbox(&entries, app.access.csrf(), now_ms()),
            &Fragment::default(),
        ),
        Err(err) => failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/inbox"),
    }
}

#[derive(Debug, serde::Deserialize)]
struct AnswerForm {
    #[serde(default)]
    csrf: String,
    text: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    person: String,
}

async fn answer(
    State(app): State<App>,
    Path(id): Path<String>,
    Form(form): Form<AnswerForm>,
) -> Response {
    if let Some(refused) = forged(&app, &form.csrf, "/inbox") {
        return refused;
    }
    let reply = match form.action.as_str() {
        "" | "complete" => Reply::Complete,
        "handoff" => match AgentName::new(form.to.trim()) {
            Ok(to) => Reply::Handoff(to),
            Err(err) => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    &format!("to hand the task on, name an agent type: {err}"),
                    "/inbox",
                );
            }
        },
        other => {
            return failure(
                StatusCode::BAD_REQUEST,
                &format!("unknown action {other:?}: complete or handoff"),
                "/inbox",
            );
        }
    };
    let person = if form.person.trim().is_empty() {
        "console"
    } else {
        form.person.trim()
    };
    match app.inbox.reply(&id, &form.text, reply, person).await {
        Ok(event) => Redirect::to(&format!("/sessions/{}", event.session)).into_response(),
        Err(err) => failure(StatusCode::CONFLICT, &err.to_string(), "/inbox"),
    }
}

/// The live feed: one `session` event (its new table row) per change, and
/// an `agents` event when heartbeats arrive (with some data: a browser
/// drops an event that has none). Fed by the console's own
/// subscriptions; a browser adds a receiver, not a poller.
async fn live(State(app): State<App>) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let sessions = tokio_stream_of(app.index.subscribe()).filter_map(move |id| {
        let summary = app.index.get(id);
        async move {
            let summary = summary?;
            let row = view::row(&summary, now_ms()).into_string();
            Some(Ok(SseEvent::default().event("session").data(row)))
        }
    });
    let agents = tokio_stream_of(app.agents_changed.subscribe())
        .map(|()| Ok(SseEvent::default().event("agents").data("changed")));
    Sse::new(futures::stream::select(sessions.boxed(), agents.boxed()))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// A broadcast receiver as a stream; a receiver that fell behind skips
/// what it missed (the next change of a session brings it up to date).
fn tokio_stream_of<T: Clone + Send + 'static>(
    receiver: broadcast::Receiver<T>,
) -> impl Stream<Item = T> + Send {
    futures::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(item) => return Some((item, receiver)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// Keeps `beats` up to date from the heartbeat subject, and says (at most
/// once a second) that the agents changed.
pub(crate) async fn follow_heartbeats(
    nats: async_nats::Client,
    subjects: Subjects,
    beats: Arc<RwLock<Heartbeats>>,
    changed: broadcast::Sender<()>,
) -> Result<(), crate::Error> {
    let mut subscription = nats
        .subscribe(subjects.all_heartbeats())
        .await
        .map_err(|err| crate::Error::store(format!("cannot follow the heartbeats: {err}")))?;
    let prefix = format!("{}.registry.heartbeat.", subjects.prefix());
    let mut last = 0u64;
    while let Some(message) = subscription.next().await {
        let Some((agent, instance)) = message
            .subject
            .as_str()
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('.'))
        else {
            continue;
        };
        let now = now_ms();
        // An unreadable heartbeat still says the instance lives.
        let version = baton_proto::Heartbeat::from_msgpack(&message.payload)
            .ok()
            .and_then(|beat| beat.version);
        if let Ok(mut beats) = beats.write() {
            beats
                .entry(agent.to_owned())
                .or_insert_with(HashMap::new)
                .insert(
                    instance.to_owned(),
                    ops::Beat {
                        at: now,
                        version: version.map(String::from),
                    },
                );
            // Instances silent for a minute are gone.
            for instances in beats.values_mut() {
                instances.retain(|_, beat| now.saturating_sub(beat.at) < 60_000);
            }
        }
        if now.saturating_sub(last) >= 1000 {
            last = now;
            let _ = changed.send(());
        }
    }
    Ok(())
}
