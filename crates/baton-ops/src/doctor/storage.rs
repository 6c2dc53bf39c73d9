//! Whether the streams that hold text are compressed: read from their
//! configuration, and checked.

use async_nats::jetstream;
use async_nats::jetstream::stream::Compression;
use baton_proto::Subjects;

use super::facts::Facts;
use super::finding::{Finding, Level};

/// Each text-holding stream of the deployment that exists
/// ([`baton_nats::state::buckets::text_streams`]), and whether it is
/// compressed (S2). A stream that does not exist, or cannot be read, is
/// left out: the replicas check reports the streams it cannot read.
pub async fn compression(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
) -> Vec<(String, bool)> {
    let mut found = Vec::new();
    for name in baton_nats::state::buckets::text_streams(subjects) {
        let Ok(stream) = jetstream.get_stream(&name).await else {
            continue;
        };
        let compressed = matches!(
            stream.cached_info().config.compression,
            Some(Compression::S2)
        );
        found.push((name, compressed));
    }
    found
}

/// One finding per text-holding stream that is not compressed (`info`: it
/// works, it only takes more disk), or one `ok` when every one is.
pub(super) fn check(facts: &Facts) -> Vec<Finding> {
    let plain: Vec<&String> = (facts.compression.iter())
        .filter(|(_, compressed)| !compressed)
        .map(|(name, _)| name)
        .collect();
    if facts.compression.is_empty() {
        return Vec::new();
    }
    if plain.is_empty() {
        return vec![Finding::new(
            "storage",
            Level::Ok,
            "",
            format!(
                "{} stream(s) holding text are compressed (s2)",
                facts.compression.len()
            ),
        )];
    }
    plain
        .into_iter()
        .map(|name| {
            Finding::new(
                "storage",
                Level::Info,
                name,
                format!(
                    "{name} holds text and is not compressed: its full blocks take their whole size on disk"
                ),
            )
            .fix(format!(
                "`nats stream edit {name} --compression s2` (nats-server 2.10 or later), then restart the servers \
                 one at a time: a stream's store applies a new setting from its next start, and to new blocks only"
            ))
        })
        .collect()
}
