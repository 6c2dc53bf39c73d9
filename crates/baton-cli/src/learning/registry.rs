//! What the learning commands share: the registry client, and tables.

use std::time::Duration;

use baton_client::RegistryClient;
use baton_proto::Subjects;

use crate::nats::NatsArgs;

pub const START_ONE: &str = "start a registry with `baton registry` (or `baton dev --serve`)";

pub async fn registry(
    nats: &NatsArgs,
    subjects: &Subjects,
    timeout_ms: u64,
) -> anyhow::Result<RegistryClient> {
    let role = baton_ops::Role::of(baton_ops::RoleKind::Client);
    let client = crate::nats::connect(nats, None, &role).await?;
    Ok(RegistryClient::new(client.client().clone(), subjects)
        .with_budget(Duration::from_millis(timeout_ms)))
}

/// Prints rows under a header, in columns as wide as their widest cell.
pub fn print_table(header: &[&str], rows: impl Iterator<Item = Vec<String>>) {
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let rows: Vec<Vec<String>> = std::iter::once(header).chain(rows).collect();
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
