//! The sides of `baton bench`: the raw baselines and the Baton
//! configurations, each on streams of its own.

use std::time::Duration;

use baton_worker::{EventLevel, SettleMode};

use super::{BenchArgs, Figures, Mode, baton_chain, raw_relay};

/// One side of the bench: a baseline or a Baton configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Raw,
    SameWrites,
    ThreeWrites,
    Full,
    Unfolded,
    Confirmed,
    Lean,
    /// Baton full, every stage a named version (pinned sessions).
    Versioned,
}

impl Side {
    pub(super) const ALL: [Side; 8] = [
        Side::Raw,
        Side::SameWrites,
        Side::ThreeWrites,
        Side::Full,
        Side::Unfolded,
        Side::Confirmed,
        Side::Lean,
        Side::Versioned,
    ];

    /// Its name for `--only`.
    pub(super) fn flag(self) -> &'static str {
        match self {
            Side::Raw => "raw",
            Side::SameWrites => "same-writes",
            Side::ThreeWrites => "three-writes",
            Side::Full => "baton",
            Side::Unfolded => "baton-unfolded",
            Side::Confirmed => "baton-confirmed",
            Side::Lean => "baton-lean",
            Side::Versioned => "baton-versioned",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Side::Raw => "raw JetStream",
            Side::SameWrites => "raw, same writes",
            Side::ThreeWrites => "raw, 3 writes",
            Side::Full => "baton full",
            Side::Unfolded => "baton full, unfolded",
            Side::Confirmed => "baton full, confirmed ack",
            Side::Lean => "baton lean",
            Side::Versioned => "baton full, versioned",
        }
    }

    /// Runs this side's `round` on streams of its own. Baton runs with its
    /// defaults (`full` events, quick hops folded, plain acks) but for the
    /// one setting the side changes.
    pub(super) async fn run(
        self,
        client: &async_nats::Client,
        args: &BenchArgs,
        payload_len: usize,
        round: usize,
    ) -> anyhow::Result<Figures> {
        let fold = Duration::from_millis(100);
        let (settle, events, after) = match self {
            Side::Raw => return raw_relay(client, args, payload_len, 0, round).await,
            Side::SameWrites => return raw_relay(client, args, payload_len, 1, round).await,
            Side::ThreeWrites => return raw_relay(client, args, payload_len, 2, round).await,
            Side::Full => (SettleMode::Plain, EventLevel::Full, fold),
            Side::Unfolded => (SettleMode::Plain, EventLevel::Full, Duration::ZERO),
            Side::Confirmed => (SettleMode::Confirmed, EventLevel::Full, fold),
            Side::Lean | Side::Versioned => (SettleMode::Plain, EventLevel::Lean, fold),
        };
        let events = if self == Side::Versioned {
            EventLevel::Full
        } else {
            events
        };
        let prefix = format!("bench{}r{round}", self.flag().replace('-', ""));
        let mode = Mode {
            prefix,
            settle,
            events,
            accepted_after: after,
            version: (self == Side::Versioned).then_some("1"),
        };
        baton_chain(client, args, &mode).await
    }
}

/// Messages stored in stream `name` now.
pub(super) async fn stored(js: &async_nats::jetstream::Context, name: &str) -> anyhow::Result<u64> {
    Ok(js.get_stream(name).await?.info().await?.state.messages)
}

/// Messages stored in stream `name` once no more arrive for 200 ms: a Baton
/// stage reports a task done from inside its agent, before the worker has
/// written that hop's outputs, and the side's workers are not waited for.
/// A stream still growing after 30 s is an error, not a count.
pub(super) async fn stored_when_quiet(
    js: &async_nats::jetstream::Context,
    name: &str,
) -> anyhow::Result<u64> {
    let started = std::time::Instant::now();
    let mut last = stored(js, name).await?;
    loop {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "stream {name} was still growing 30 s after the side's last task ({last} messages)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = stored(js, name).await?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
}

/// Durable writes per hop: the `events` stored, plus one envelope per hop,
/// over the hops of every task run (warm-up included).
pub(super) fn writes_per_hop(args: &BenchArgs, events: u64) -> f64 {
    let hops = (args.tasks + args.warmup) as f64 * args.hops as f64;
    (hops + events as f64) / hops
}
