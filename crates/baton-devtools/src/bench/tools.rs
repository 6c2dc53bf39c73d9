//! `baton bench --tools`: what one MCP tool call costs through an LLM agent,
//! against calling the same MCP server directly, and what the hop journal
//! costs per step, in the same run.
//!
//! An in-process model stand-in (OpenAI-compatible, answering at once) and
//! an in-process MCP server with one `echo` tool serve both sides. Baton's
//! side runs real `baton worker --spec` processes: one spec whose model
//! answers at once (`none`), one whose model calls `echo` once first
//! (`one_tool`). Their difference per task is the tool call's cost in
//! Baton: the call, its journal entries, its event and the model's second
//! turn. The baseline calls `echo` directly with rmcp's client, as many at
//! once as the workers run tasks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServiceExt};
use serde_json::{Value, json};

use super::scale::{ScaleOut, round};

/// The MCP server: one tool, `echo`, that returns its `text`.
#[derive(Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
        let schema = schema.as_object().cloned().unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo",
            "Returns its text.",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        let text = request
            .arguments
            .and_then(|args| args.get("text").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// The model: `tool` calls `echo` until a tool result is in the
/// conversation, then answers; any other model answers at once.
async fn model(Json(body): Json<Value>) -> Json<Value> {
    let answered = body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let message = if body["model"] == "tool" && !answered {
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_0", "type": "function",
            "function": {"name": "echo", "arguments": "{\"text\": \"hello\"}"},
        }]})
    } else {
        json!({"role": "assistant", "content": "done"})
    };
    Json(json!({"id": "bench", "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}))
}

/// Serves `app` on a loopback port; its address.
async fn serve(app: axum::Router) -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(address)
}

/// Runs the tool bench: `tasks` tasks per Baton side, as many direct calls.
pub(super) async fn run(bench: &ScaleOut<'_>, tasks: u64) -> anyhow::Result<()> {
    let model =
        serve(axum::Router::new().route("/v1/chat/completions", axum::routing::post(model)))
            .await?;
    let mcp = rmcp::transport::streamable_http_server::StreamableHttpService::new(
        || Ok(Echo),
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default()
            .into(),
        rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default(),
    );
    let mcp = serve(axum::Router::new().nest_service("/mcp", mcp)).await?;
    let mcp_url = format!("http://{mcp}/mcp");
    println!(
        "tools bench: {tasks} tasks per side through one LLM worker (a stand-in model that answers at once), \
         concurrency {}; an MCP server with one echo tool",
        bench.concurrency
    );
    println!();
    println!("{:<34} {:>10} {:>12}", "", "per s", "ms each");
    let dir = tempfile::tempdir()?;
    let mut per_task = Vec::new();
    for (side, model_name) in [("none", "direct"), ("one_tool", "tool")] {
        let spec = dir.path().join(format!("{side}.toml"));
        std::fs::write(
            &spec,
            format!(
                "name = \"assistant\"\nkind = \"llm\"\nconcurrency = {}\ntimeout_ms = 60000\n\n[llm]\nbase_url = \"http://{model}/v1\"\nmodel = \"{model_name}\"\n\n[[mcp]]\nurl = \"{mcp_url}\"\n",
                bench.concurrency
            ),
        )?;
        let rate = round(
            bench,
            &spec,
            "assistant",
            &format!("bench_tools_{side}"),
            1,
            tasks,
        )
        .await?;
        let label = format!("Baton, task with {side}");
        println!("{label:<34} {rate:>10.1} {:>12.3}", 1000.0 / rate);
        per_task.push(1000.0 / rate);
    }
    let direct = direct_calls(&mcp_url, tasks, bench.concurrency).await?;
    println!(
        "{:<34} {direct:>10.1} {:>12.3}",
        "echo called directly (rmcp)",
        1000.0 / direct
    );
    let journal = journal_puts(bench.client, tasks, bench.concurrency).await?;
    println!(
        "{:<34} {journal:>10.1} {:>12.3}",
        "journal entry (KV put)",
        1000.0 / journal
    );
    let tool_in_baton = per_task[1] - per_task[0];
    println!();
    println!(
        "one tool call in Baton: {tool_in_baton:.3} ms of worker time per task (the call, 3 journal entries, \
         a tool_called event, the model's second turn); called directly: {:.3} ms; ratio {:.2}",
        1000.0 / direct,
        tool_in_baton / (1000.0 / direct)
    );
    Ok(())
}

/// Calls `echo` `calls` times, `concurrency` at once; calls per second.
async fn direct_calls(url: &str, calls: u64, concurrency: usize) -> anyhow::Result<f64> {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url);
    let client = Arc::new(().serve(transport).await?);
    let started = Instant::now();
    let mut running = futures::stream::iter(0..calls)
        .map(|_| {
            let client = client.clone();
            async move {
                let mut params = CallToolRequestParams::new("echo");
                params.arguments = json!({"text": "hello"}).as_object().cloned();
                client.call_tool(params).await
            }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(result) = futures::StreamExt::next(&mut running).await {
        result?;
    }
    Ok(rate(calls, started.elapsed()))
}

/// Puts `puts` entries into a scratch key-value bucket, `concurrency` at
/// once, as the journal does; puts per second.
async fn journal_puts(
    client: &async_nats::Client,
    puts: u64,
    concurrency: usize,
) -> anyhow::Result<f64> {
    let jetstream = async_nats::jetstream::new(client.clone());
    let name = "BENCH_JOURNAL";
    let _ = jetstream.delete_key_value(name).await;
    let bucket = jetstream
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: name.to_owned(),
            history: 1,
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await?;
    let answer = bytes::Bytes::from(vec![b'x'; 400]);
    let started = Instant::now();
    let mut running = futures::stream::iter(0..puts)
        .map(|n| {
            let (bucket, answer) = (bucket.clone(), answer.clone());
            async move { bucket.put(format!("bench.{n}.model"), answer).await }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(result) = futures::StreamExt::next(&mut running).await {
        result?;
    }
    let elapsed = started.elapsed();
    let _ = jetstream.delete_key_value(name).await;
    Ok(rate(puts, elapsed))
}

fn rate(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}

use futures::StreamExt as _;
