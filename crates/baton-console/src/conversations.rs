//! Conversations' pages: the list, and one conversation read as it was
//! said: each turn's message, the questions its agents asked the user with
//! the answers, and the answer with the agent (and version) that gave it;
//! what runs and what waits; the versions it is pinned to; each turn
//! linked to its session. A page only reads: a running turn whose session
//! has ended is shown as ended, and the router's keeper (or the
//! conversation's next message) closes it in the record.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use baton_client::ErrorKind;
use baton_client::conversation::Conversations;
use baton_gateway::turn::TurnRead;
use baton_proto::{Conversation, ConversationTurn, now_ms};
use maud::{Markup, html};

use crate::app::{App, failure};
use crate::view::{conversation_href as href, short, span};

mod talk;

/// The conversations, opened on first use; an error that says what to do
/// when this console's NATS user may not read them.
async fn opened(app: &App) -> Result<&Conversations, Response> {
    app.conversations
        .get_or_try_init(|| Conversations::open(app.client.clone(), app.replicas))
        .await
        .map_err(|err| {
            let message = format!(
                "cannot read the conversations ({err}); the console's NATS user needs the operator role's rights (`baton permissions operator`)"
            );
            failure(StatusCode::BAD_GATEWAY, &message, "/")
        })
}

/// `/conversations`: every conversation, most recently active first.
pub(crate) async fn list(State(app): State<App>) -> Response {
    let conversations = match opened(&app).await {
        Ok(conversations) => conversations,
        Err(page) => return page,
    };
    let records = match conversations.list().await {
        Ok(records) => records,
        Err(err) => return failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/"),
    };
    let now = now_ms();
    let main = html! {
        h1 { "Conversations" }
        p.count { (records.len()) " conversations, most recently active first." }
        table #conversations {
            thead { tr {
                th { "Conversation" } th { "Turns" } th { "Held by" } th { "Running" }
                th { "Waiting" } th { "Last active" }
            } }
            tbody { @for record in &records {
                tr {
                    td.id { a href=(href(&record.id)) { (record.id) } }
                    td.num { (record.turns) }
                    td.agent { (record.holder.as_deref().unwrap_or("")) }
                    td { @if let Some(running) = &record.running {
                        a href=(format!("/sessions/{}", running.session)) { "turn " (record.turns) }
                    } }
                    td.num { (record.queue.len()) }
                    td.num { (span(now.saturating_sub(record.updated_at))) " ago" }
                }
            } }
        }
    };
    Html(crate::view::page("Conversations", "conversations", main).into_string()).into_response()
}

/// `/conversations/{id}`: one conversation.
pub(crate) async fn page(State(app): State<App>, Path(id): Path<String>) -> Response {
    let conversations = match opened(&app).await {
        Ok(conversations) => conversations,
        Err(page) => return page,
    };
    let record = match conversations.get(&id).await {
        Ok(Some((record, _))) => record,
        Ok(None) => {
            let message = format!("no conversation {id}: check the id");
            return failure(StatusCode::NOT_FOUND, &message, "/conversations");
        }
        Err(err) if err.kind() == ErrorKind::Deleted => {
            return failure(StatusCode::GONE, &err.to_string(), "/conversations");
        }
        Err(err) => return failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/conversations"),
    };
    let turns = match conversations.turns(&record).await {
        Ok(turns) => turns,
        Err(err) => return failure(StatusCode::BAD_GATEWAY, &err.to_string(), "/conversations"),
    };
    let running = record.running.as_ref().map(|running| running.session);
    let (said, running) = talk::read(&app.client, &turns, running).await;
    let title = format!("Conversation {id}");
    let main = conversation(&record, &turns, &said, running.as_ref());
    let html = crate::view::page(&title, "conversations", main);
    Html(html.into_string()).into_response()
}

/// A conversation's `main`: what was said, turn by turn (`said`, read
/// from each turn's session, beside `turns`; `running`, the running
/// turn's), then the turns' sessions as a table.
fn conversation(
    record: &Conversation,
    turns: &[ConversationTurn],
    said: &[talk::Read],
    running: Option<&TurnRead>,
) -> Markup {
    html! {
        div #conversation data-id=(record.id) {
            h1 { "Conversation " code { (record.id) } }
            p.status {
                (record.turns) " turns · held by "
                b #holder { (record.holder.as_deref().unwrap_or("nobody (the next turn starts at the entry)")) }
                @if let Some(owner) = &record.owner { " · started by " (owner) }
            }
            (talk::pins(record))
            h2 { "Turns" }
            (talk::turns(turns, said))
            @if let Some(turn) = &record.running {
                @let ended = running.and_then(talk::ended);
                p #running {
                    "Turn " (record.turns) @if ended.is_some() { " ended: " } @else { " runs: " }
                    a href=(format!("/sessions/{}", turn.session)) { (short(turn.session)) }
                    " · " q { (turn.text) }
                }
                @if let Some(ended) = ended {
                    div.said #ended { (ended) }
                    p.muted { "The conversation's record takes it in within moments." }
                } @else if let Some(running) = running {
                    (talk::asking(running))
                }
            }
            @if !record.queue.is_empty() {
                h2 { "Waiting" }
                ol #queued { @for queued in &record.queue { li { q { (queued.text) } } } }
            }
            h2 { "Sessions" }
            table #turns {
                thead { tr {
                    th { "Turn" } th { "Message" } th { "Agents" } th { "Held by after" }
                    th { "Ended" } th { "Session" }
                } }
                tbody { @for turn in turns {
                    tr.turn data-turn=(turn.turn) {
                        td.num { (turn.turn) }
                        td.text { (turn.text) }
                        td.path { (turn.agents.join(" → ")) }
                        td.agent { (turn.holder.as_deref().unwrap_or("")) }
                        td.ended { (turn.ended.as_str()) }
                        td.id { a href=(format!("/sessions/{}", turn.session)) { (short(turn.session)) } }
                    }
                } }
            }
        }
    }
}
