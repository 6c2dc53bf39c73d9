//! Tool calls waiting in the inbox, decided from the page as `baton inbox`
//! decides them: a call whose outcome is unknown happened (with its
//! result), did not happen, or fails the session; a call waiting for
//! approval is approved or denied (with a note for the model). The page
//! that shows them is `ops::inbox`.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use baton_client::Decision;

use crate::app::{App, failure, forged};

#[derive(Debug, serde::Deserialize)]
pub(crate) struct DecideForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    decision: String,
    #[serde(default)]
    result: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    answer: String,
    #[serde(default)]
    person: String,
}

/// Decides waiting tool call `id`, and says what happens next.
pub(crate) async fn decide(
    State(app): State<App>,
    Path(id): Path<String>,
    Form(form): Form<DecideForm>,
) -> Response {
    if let Some(refused) = forged(&app, &form.csrf, "/inbox") {
        return refused;
    }
    let text = |text: String| Some(text).filter(|text| !text.trim().is_empty());
    let decision = match form.decision.as_str() {
        "happened" => Decision::Happened(text(form.result)),
        "not_happened" => Decision::NotHappened,
        "fail" => Decision::Fail(text(form.note)),
        "approved" => Decision::Approve,
        "denied" => Decision::Deny(text(form.note)),
        "answered" => Decision::Answer(form.answer),
        other => {
            let why = format!(
                "unknown decision {other:?}: happened, not_happened, fail, approved, denied or answered"
            );
            return failure(StatusCode::BAD_REQUEST, &why, "/inbox");
        }
    };
    let person = baton_proto::token_safe(match form.person.trim() {
        "" => "console",
        person => person,
    });
    match app.inbox.resolve(&id, decision, &person).await {
        Ok(next) => {
            let said = format!("{id} decided: {next}.");
            let body = crate::view::notice("Decided", &said, "/inbox");
            Html(crate::view::page("Inbox", "inbox", body).into_string()).into_response()
        }
        Err(err) => failure(StatusCode::CONFLICT, &err.to_string(), "/inbox"),
    }
}
