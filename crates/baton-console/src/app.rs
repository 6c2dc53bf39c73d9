//! What every handler shares, and the answers every page may give.

use std::sync::{Arc, RwLock};

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use baton_client::{Client, Inbox, RegistryClient};
use baton_proto::Subjects;
use tokio::sync::broadcast;

use crate::auth::Access;
use crate::index::Index;
use crate::ops::Heartbeats;
use crate::view;

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct App {
    pub(crate) client: Client,
    pub(crate) subjects: Subjects,
    pub(crate) index: Index,
    pub(crate) access: Access,
    pub(crate) inbox: Inbox,
    pub(crate) registry: RegistryClient,
    pub(crate) trace_url: Option<String>,
    pub(crate) heartbeats: Arc<RwLock<Heartbeats>>,
    pub(crate) agents_changed: broadcast::Sender<()>,
    pub(crate) shown: usize,
    /// The conversations, opened on first use.
    pub(crate) conversations: Arc<tokio::sync::OnceCell<baton_client::conversation::Conversations>>,
    /// The versions of agent types, opened on first use.
    pub(crate) versions: Arc<tokio::sync::OnceCell<baton_client::versions::Versions>>,
    /// Replicas of the buckets it opens.
    pub(crate) replicas: usize,
}

/// A page that says what did not work, with a link `back`.
pub(crate) fn failure(status: StatusCode, message: &str, back: &str) -> Response {
    let page = view::page(
        "Error",
        "",
        view::notice("That did not work", message, back),
    );
    (status, Html(page.into_string())).into_response()
}

/// The answer to a form whose CSRF token is not the console's, if it is not.
pub(crate) fn forged(app: &App, csrf: &str, back: &str) -> Option<Response> {
    (!app.access.csrf_ok(csrf)).then(|| {
        failure(
            StatusCode::FORBIDDEN,
            "the form is stale or not the console's: reload the page and try again",
            back,
        )
    })
}
