//! `baton conversations show`'s text: the record, then each turn as it was
//! said: the user's message, the questions its agents asked the user with
//! the answers, and the answer with the agent (and version) that gave it,
//! read from the turns' sessions a few at a time.

use baton_client::Client;
use baton_gateway::turn::TurnRead;
use baton_proto::{Conversation, ConversationTurn};
use futures::StreamExt;
use uuid::Uuid;

use super::talk::holding;

/// How many sessions are read at once.
const READS: usize = 8;

/// What was said in each of `turns` and in the `running` turn, read from
/// their sessions; `None` for a session whose events are gone (expired
/// with the events stream) or could not be read.
pub async fn read(
    client: &Client,
    turns: &[ConversationTurn],
    running: Option<Uuid>,
) -> (Vec<Option<TurnRead>>, Option<TurnRead>) {
    let sessions: Vec<Uuid> = turns
        .iter()
        .map(|turn| turn.session)
        .chain(running)
        .collect();
    let mut said: Vec<Option<TurnRead>> = futures::stream::iter(sessions)
        .map(|session| async move {
            match client.history(session).await {
                Ok(events) if events.is_empty() => None,
                Ok(events) => Some(TurnRead::read(&events)),
                Err(err) => {
                    tracing::warn!(error = %err, %session, "a turn's session could not be read");
                    None
                }
            }
        })
        .buffered(READS)
        .collect()
        .await;
    let running = running.and_then(|_| said.pop()).flatten();
    (said, running)
}

/// The questions of a turn as JSON.
pub fn asked_json(said: &TurnRead) -> serde_json::Value {
    (said.asked.iter())
        .map(|asked| {
            serde_json::json!({
                "by": asked.by, "question": asked.question, "answer": asked.answer,
            })
        })
        .collect()
}

/// Prints the record, then its turns in order, each as it was said.
pub fn show(
    record: &Conversation,
    turns: &[ConversationTurn],
    said: &[Option<TurnRead>],
    running: Option<&TurnRead>,
) {
    println!("conversation {}", record.id);
    if let Some(owner) = &record.owner {
        println!("  owner:   {owner}");
    }
    println!("  {}", holding(record));
    println!("  turns:   {}", record.turns);
    if !record.versions.is_empty() {
        let pinned: Vec<String> = (record.versions.iter())
            .map(|(agent, version)| baton_gateway::turn::labelled(agent, Some(version)))
            .collect();
        println!("  pinned:  {}", pinned.join(", "));
    }
    if let Some(turn) = &record.running {
        println!(
            "  running: turn {} as session {}: {}",
            record.turns, turn.session, turn.text
        );
        let asking = running.and_then(|said| said.asked.last());
        if let Some(asked) = asking.filter(|asked| asked.answer.is_none()) {
            said_line(&format!("{} asks", asked.by), &asked.question);
        }
    }
    for (n, queued) in record.queue.iter().enumerate() {
        println!(
            "  queued {}: {} (session {})",
            n + 1,
            queued.text,
            queued.session
        );
    }
    for (turn, said) in turns.iter().zip(said) {
        let how = match &turn.reason {
            Some(reason) => format!("{} ({})", turn.ended.as_str(), reason.as_str()),
            None => turn.ended.as_str().to_owned(),
        };
        let path = match said {
            Some(said) if !said.path.is_empty() => said.path.join(" -> "),
            _ => turn.agents.join(" -> "),
        };
        println!(
            "  turn {}  session {}  {path}  {how}",
            turn.turn, turn.session
        );
        said_line("message", &turn.text);
        let Some(said) = said else {
            println!("    (its session's events are no longer kept: no answer to show)");
            continue;
        };
        for asked in &said.asked {
            said_line(&format!("{} asked", asked.by), &asked.question);
            said_line(
                "answered",
                asked.answer.as_deref().unwrap_or("(not answered)"),
            );
        }
        let by = said.by.as_deref().unwrap_or("-");
        if let Some(answer) = &said.answer {
            said_line(&format!("answer ({by})"), answer);
        } else if let Some(failed) = &said.failed {
            said_line(&format!("failed ({by})"), failed);
        }
    }
}

/// One thing said, as `    WHO: TEXT`, its further lines indented under it.
fn said_line(who: &str, text: &str) {
    println!("    {who}: {}", text.replace('\n', "\n      "));
}
