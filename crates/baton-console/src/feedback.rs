//! Feedback on a session from its page: how well it went, 0 to 1, with a
//! note. The registry credits it to the session's agents and learns from it.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use baton_proto::{Event, EventType, FeedbackRequest};
use maud::{Markup, html};
use uuid::Uuid;

use crate::app::{App, failure, forged};

/// The page's feedback section: shown once the session has ended or waits
/// for a person.
pub(crate) fn section(id: Uuid, events: &[Event], csrf: &str) -> Markup {
    let ended = baton_client::ending(events).is_some()
        || events.last().is_some_and(|e| e.kind == EventType::Waiting);
    if !ended {
        return html! {};
    }
    html! {
        section #feedback data-keep {
            h2 { "Feedback" }
            p.muted { "How well did this session resolve the problem? The registry credits the agents on its path and learns which agents resolve which work." }
            form method="post" action=(format!("/sessions/{id}/feedback")) {
                (crate::view::csrf(csrf))
                label { "Score, 0 (not resolved) to 1 (fully resolved) "
                    input #feedback-score type="number" name="score" min="0" max="1" step="0.05" required;
                }
                " "
                label { "Note " input #feedback-note type="text" name="note" maxlength="2000"; }
                " "
                button #feedback-send type="submit" { "Send feedback" }
            }
        }
    }
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct FeedbackForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    score: String,
    #[serde(default)]
    note: String,
}

/// Gives the registry feedback on session `id`, and says what became of it.
pub(crate) async fn feedback(
    State(app): State<App>,
    Path(id): Path<Uuid>,
    Form(form): Form<FeedbackForm>,
) -> Response {
    let page = format!("/sessions/{id}");
    if let Some(refused) = forged(&app, &form.csrf, &page) {
        return refused;
    }
    let Ok(score) = form.score.trim().parse::<f64>() else {
        let why = format!(
            "the score {:?} is not a number: give one from 0 to 1",
            form.score
        );
        return failure(StatusCode::BAD_REQUEST, &why, &page);
    };
    let request = FeedbackRequest {
        session: id.to_string(),
        score,
        note: Some(form.note).filter(|note| !note.trim().is_empty()),
        extra: baton_proto::Map::new(),
    };
    match app.registry.feedback(&request).await {
        Ok(reply) => {
            let said = format!(
                "Feedback {score} recorded for session {id}, credited to {}.",
                reply.credited.join(", ")
            );
            let body = crate::view::notice("Feedback recorded", &said, &page);
            Html(crate::view::page("Feedback", "sessions", body).into_string()).into_response()
        }
        Err(err) => failure(StatusCode::BAD_REQUEST, &err.to_string(), &page),
    }
}
