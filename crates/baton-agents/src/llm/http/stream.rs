//! A streamed chat completion (`stream: true`): its server-sent events read
//! as they come, each piece of text sent on as a `delta`, and the pieces
//! put back together into the answer a plain call would have returned.

use baton_worker::Progress;
use serde::Deserialize as _;
use serde_json::{Map, Value as Json};

use crate::llm::types::response::{Chunk, Whole, WholeCall};

/// Where a streamed answer's pieces go: the hop's progress, for model call
/// `step`.
#[derive(Clone, Copy)]
pub(crate) struct Live<'a> {
    pub(crate) progress: &'a Progress,
    pub(crate) step: u32,
}

/// Why a stream did not give a whole answer.
#[derive(Debug)]
pub(crate) enum Broken {
    /// It ended (or failed) before the answer did: the call may be made again.
    Cut(String),
    /// The endpoint sent an error, or something that is not a stream of
    /// chat-completion chunks.
    Bad(String),
}

/// The answer being put together.
#[derive(Default)]
struct Answer {
    model: Option<String>,
    content: String,
    /// By index: id, name, arguments.
    calls: Vec<(String, String, String)>,
    finish: Option<String>,
    usage: Option<Map<String, Json>>,
    done: bool,
}

/// Reads the stream of `response`, sending each piece of text to `live`;
/// the whole answer, shaped as a plain (unstreamed) one.
pub(crate) async fn read(mut response: reqwest::Response, live: Live<'_>) -> Result<Json, Broken> {
    let mut answer = Answer::default();
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(err) => return Err(Broken::Cut(format!("the answer's stream broke: {err}"))),
        };
        // Lines may end in CRLF; no JSON chunk holds a bare CR.
        buffer.extend(chunk.iter().filter(|byte| **byte != b'\r'));
        while let Some((block, rest)) = next_block(&buffer) {
            let block = String::from_utf8_lossy(block).into_owned();
            buffer = rest.to_vec();
            answer.take_block(&block, live).await?;
        }
    }
    // A last event the server did not end with a blank line.
    answer
        .take_block(&String::from_utf8_lossy(&buffer), live)
        .await?;
    if !answer.done && answer.finish.is_none() {
        return Err(Broken::Cut(
            "the answer's stream ended before the answer did".to_owned(),
        ));
    }
    Ok(answer.whole())
}

/// The first event block of `buffer` (up to a blank line) and what follows.
fn next_block(buffer: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = buffer.windows(2).position(|w| w == b"\n\n")?;
    Some((&buffer[..at], &buffer[at + 2..]))
}

impl Answer {
    /// Takes the `data` lines of one event `block`.
    async fn take_block(&mut self, block: &str, live: Live<'_>) -> Result<(), Broken> {
        for data in block.lines().filter_map(|line| line.strip_prefix("data:")) {
            self.take(data.trim(), live).await?;
        }
        Ok(())
    }

    /// Takes one event's `data`.
    async fn take(&mut self, data: &str, live: Live<'_>) -> Result<(), Broken> {
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Json = serde_json::from_str(data)
            .map_err(|err| Broken::Bad(format!("a stream chunk is not JSON: {err}")))?;
        // Read by field, as an object (never as a list of its fields).
        let chunk = match chunk.is_object() {
            true => Chunk::deserialize(&chunk).unwrap_or_default(),
            false => Chunk::default(),
        };
        if let Some(error) = chunk.error {
            return Err(Broken::Bad(format!("the model's stream says: {error}")));
        }
        if let Some(model) = chunk.model {
            self.model = Some(model);
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        let Some(choice) = chunk.choices.into_iter().next() else {
            return Ok(());
        };
        if let Some(reason) = choice.finish_reason {
            self.finish = Some(reason);
        }
        let delta = choice.delta;
        if let Some(text) = delta.content.as_deref().filter(|t| !t.is_empty()) {
            let offset = self.content.len() as u64;
            self.content.push_str(text);
            live.progress.delta(live.step, offset, text).await;
        }
        for call in delta.tool_calls {
            let index = usize::try_from(call.index.unwrap_or(0)).unwrap_or(0);
            if self.calls.len() <= index {
                self.calls.resize(index + 1, Default::default());
            }
            let (id, name, arguments) = &mut self.calls[index];
            if let Some(given) = call.id {
                *id = given;
            }
            name.push_str(call.function.name.as_deref().unwrap_or_default());
            arguments.push_str(call.function.arguments.as_deref().unwrap_or_default());
        }
        Ok(())
    }

    fn whole(self) -> Json {
        let calls = self
            .calls
            .into_iter()
            .map(|(id, name, arguments)| WholeCall::new(id, name, arguments))
            .collect();
        Whole::new(self.content, calls, self.finish)
            .with(self.model, self.usage)
            .json()
    }
}
