//! A scripted OpenAI-compatible chat-completions server for tests. It
//! streams an answer (server-sent events of `chat.completion.chunk`s, the
//! usage last when asked for, then `[DONE]`) when the request asks for
//! `stream: true`, unless the answer is scripted as plain or cut short.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

/// One scripted HTTP answer.
#[derive(Debug, Clone)]
pub struct Scripted {
    /// HTTP status code.
    pub status: u16,
    /// Extra response headers.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: serde_json::Value,
    /// How long to wait before answering.
    pub delay: std::time::Duration,
    /// How it answers a request for a stream.
    pub streaming: Streaming,
    /// How long to wait between two chunks of a stream.
    pub chunk_delay: std::time::Duration,
}

/// How a scripted answer answers a request for a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Streaming {
    /// Streams it, in pieces of a word.
    #[default]
    Streamed,
    /// Answers with plain JSON anyway, as an endpoint that cannot stream.
    Plain,
    /// Streams this many pieces of text, then closes the connection.
    CutAfter(usize),
}

impl Scripted {
    /// A 200 answer whose message says `text`.
    #[must_use]
    pub fn text(text: &str) -> Self {
        Self::message(serde_json::json!({"role": "assistant", "content": text}))
    }

    /// A 200 answer whose message calls `tools` (name, JSON arguments) at once.
    #[must_use]
    pub fn tool_calls(calls: &[(&str, &str)]) -> Self {
        let calls: Vec<serde_json::Value> = calls
            .iter()
            .enumerate()
            .map(|(n, (name, arguments))| {
                serde_json::json!({
                    "id": format!("call_{n}"),
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                })
            })
            .collect();
        Self::message(
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": calls}),
        )
    }

    /// A 200 answer with `message` as the first choice.
    #[must_use]
    pub fn message(message: serde_json::Value) -> Self {
        Self {
            status: 200,
            headers: Vec::new(),
            delay: std::time::Duration::ZERO,
            streaming: Streaming::default(),
            chunk_delay: std::time::Duration::ZERO,
            body: serde_json::json!({
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }),
        }
    }

    /// The same answer, given after `delay`.
    #[must_use]
    pub fn after(mut self, delay: std::time::Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The same answer, from `model`, with a usage report of `input` and
    /// `output` tokens.
    #[must_use]
    pub fn with_usage(mut self, model: &str, input: u64, output: u64) -> Self {
        self.body["model"] = serde_json::json!(model);
        self.body["usage"] = serde_json::json!({
            "prompt_tokens": input,
            "completion_tokens": output,
            "total_tokens": input + output,
        });
        self
    }

    /// An error answer.
    #[must_use]
    pub fn error(status: u16, headers: &[(&str, &str)]) -> Self {
        Self {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            body: serde_json::json!({"error": {"message": "scripted error"}}),
            delay: std::time::Duration::ZERO,
            streaming: Streaming::default(),
            chunk_delay: std::time::Duration::ZERO,
        }
    }

    /// The same answer, as plain JSON even when a stream is asked for.
    #[must_use]
    pub fn plain(mut self) -> Self {
        self.streaming = Streaming::Plain;
        self
    }

    /// The same answer, its stream cut after `pieces` pieces of text.
    #[must_use]
    pub fn cut_after(mut self, pieces: usize) -> Self {
        self.streaming = Streaming::CutAfter(pieces);
        self
    }

    /// The same answer, streamed with `delay` between its chunks.
    #[must_use]
    pub fn chunks_every(mut self, delay: std::time::Duration) -> Self {
        self.chunk_delay = delay;
        self
    }
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body.
    pub body: serde_json::Value,
}

/// Computes an answer from a request's JSON body.
type Responder = Box<dyn Fn(&serde_json::Value) -> Scripted + Send>;

#[derive(Default)]
struct State {
    script: VecDeque<Scripted>,
    requests: Vec<Recorded>,
    /// Answers from the request instead of the script, when set.
    responder: Option<Responder>,
}

/// A chat-completions server on a random loopback port that answers from a
/// script, in order, and records every request. It stops when dropped.
pub struct FakeLlm {
    url: String,
    state: Arc<Mutex<State>>,
    listener: Option<TcpListener>,
}

impl FakeLlm {
    /// Starts the server with `script`; answers past its end are 500s.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    pub fn start(script: Vec<Scripted>) -> std::io::Result<Self> {
        Self::serving(State {
            script: script.into(),
            ..State::default()
        })
    }

    /// Starts the server answering each request with what `respond` makes
    /// of its body (for many sessions at once, whose order is not known).
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    pub fn responding(
        respond: impl Fn(&serde_json::Value) -> Scripted + Send + 'static,
    ) -> std::io::Result<Self> {
        Self::serving(State {
            responder: Some(Box::new(respond)),
            ..State::default()
        })
    }

    fn serving(state: State) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}/v1", listener.local_addr()?);
        let state = Arc::new(Mutex::new(state));
        let accept = listener.try_clone()?;
        let shared = state.clone();
        thread::spawn(move || {
            for stream in accept.incoming() {
                let Ok(stream) = stream else { break };
                let shared = shared.clone();
                thread::spawn(move || {
                    let _ = serve(stream, &shared);
                });
            }
        });
        Ok(Self {
            url,
            state,
            listener: Some(listener),
        })
    }

    /// The base URL, ending in `/v1`.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request so far, in order.
    #[must_use]
    pub fn requests(&self) -> Vec<Recorded> {
        self.state
            .lock()
            .map(|state| state.requests.clone())
            .unwrap_or_default()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        // Unblock the accept loop: it ends at the next connection error.
        if let Some(listener) = self.listener.take() {
            let _ = listener.set_nonblocking(true);
            let _ = TcpStream::connect(listener.local_addr().expect("bound"));
        }
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_owned();
    let mut length = 0usize;
    let mut authorization = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim().to_owned();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.parse().unwrap_or(0),
                "authorization" => authorization = Some(value),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let asks_stream = body["stream"] == serde_json::json!(true);
    let with_usage = body["stream_options"]["include_usage"] == serde_json::json!(true);
    let answer = {
        let mut state = state
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?;
        let answer = state.responder.as_ref().map(|respond| respond(&body));
        state.requests.push(Recorded {
            path,
            authorization,
            body,
        });
        answer.or_else(|| state.script.pop_front())
    }
    .unwrap_or_else(|| Scripted::error(500, &[]));
    std::thread::sleep(answer.delay);
    if asks_stream && answer.status == 200 && answer.streaming != Streaming::Plain {
        return send_stream(stream, &answer, with_usage);
    }
    let payload = answer.body.to_string();
    let mut response = format!(
        "HTTP/1.1 {} Scripted\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        answer.status,
        payload.len()
    );
    for (name, value) in &answer.headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(&payload);
    let mut stream = stream;
    stream.write_all(response.as_bytes())?;
    stream.flush()
}

/// Writes `answer` as a stream of chunks: the role, the text a word at a
/// time, each tool call (its name, then its arguments in two halves), the
/// finish reason, the usage (`with_usage`), then `[DONE]`. A cut answer
/// stops after its pieces of text, closing the connection.
fn send_stream(mut stream: TcpStream, answer: &Scripted, with_usage: bool) -> std::io::Result<()> {
    stream.write_all(
        b"HTTP/1.1 200 Scripted\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
    )?;
    let model = answer.body["model"].clone();
    let mut send = |delta: serde_json::Value, finish: serde_json::Value| -> std::io::Result<()> {
        let chunk = serde_json::json!({
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        stream.write_all(format!("data: {chunk}\n\n").as_bytes())?;
        stream.flush()?;
        std::thread::sleep(answer.chunk_delay);
        Ok(())
    };
    let message = &answer.body["choices"][0]["message"];
    let null = serde_json::Value::Null;
    send(
        serde_json::json!({"role": "assistant", "content": ""}),
        null.clone(),
    )?;
    let text = message["content"].as_str().unwrap_or_default();
    for (n, piece) in text.split_inclusive(' ').enumerate() {
        if answer.streaming == Streaming::CutAfter(n) {
            return Ok(());
        }
        send(serde_json::json!({"content": piece}), null.clone())?;
    }
    if let Streaming::CutAfter(_) = answer.streaming {
        return Ok(()); // Cut after the last piece, before the end.
    }
    for (index, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let function = &call["function"];
        let arguments = function["arguments"].as_str().unwrap_or_default();
        let half = arguments.len() / 2;
        let half = (half..=arguments.len())
            .find(|at| arguments.is_char_boundary(*at))
            .unwrap_or(0);
        send(
            serde_json::json!({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                "function": {"name": function["name"], "arguments": arguments[..half]}}]}),
            null.clone(),
        )?;
        send(
            serde_json::json!({"tool_calls": [{"index": index, "function": {"arguments": arguments[half..]}}]}),
            null.clone(),
        )?;
    }
    let finish = answer.body["choices"][0]["finish_reason"].clone();
    send(serde_json::json!({}), finish)?;
    if with_usage && answer.body["usage"].is_object() {
        let chunk = serde_json::json!({"id": "chatcmpl-test", "object": "chat.completion.chunk",
            "model": model, "choices": [], "usage": answer.body["usage"]});
        stream.write_all(format!("data: {chunk}\n\n").as_bytes())?;
    }
    stream.write_all(b"data: [DONE]\n\n")?;
    stream.flush()
}
