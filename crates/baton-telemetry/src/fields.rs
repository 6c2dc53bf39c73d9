//! The fields of log lines.
//!
//! A span's fields are formatted into text when it is created and each time
//! one is recorded, whether or not a line is ever logged inside it. A hop's
//! span carries a dozen OpenTelemetry attributes (`otel.name`,
//! `gen_ai.conversation.id`, `baton.hop`, …) for the trace exporter. Log lines
//! leave out every field whose name has a dot, which is how OpenTelemetry
//! attributes are named, and keep the plain ones (`agent`, `session`,
//! `envelope`, `attempt`, …): the same context, formatted once, not twice.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::FormattedFields;
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};

/// Formats fields as `name=value` pairs, leaving out dotted names.
#[derive(Debug, Default)]
pub(crate) struct LogFields;

impl<'writer> FormatFields<'writer> for LogFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Plain(DefaultVisitor::new(writer, true));
        fields.record(&mut visitor);
        visitor.0.finish()
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        // A separator only before a field that is written: recording a left-out
        // field adds nothing, not a space.
        let empty = current.fields.is_empty();
        let mut visitor = Plain(DefaultVisitor::new(current.as_writer(), empty));
        fields.record(&mut visitor);
        visitor.0.finish()
    }
}

/// Passes plain fields to the default visitor.
struct Plain<'a>(DefaultVisitor<'a>);

fn plain(field: &Field) -> bool {
    !field.name().contains('.')
}

impl Visit for Plain<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if plain(field) {
            self.0.record_str(field, value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if plain(field) {
            self.0.record_error(field, value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if plain(field) {
            self.0.record_debug(field, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::LogFields;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_lines_keep_plain_fields_and_leave_out_dotted_ones() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(LogFields)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let empty = tracing::field::Empty;
            let span = tracing::info_span!(
                "hop",
                otel.name = "invoke_agent refund",
                agent = "refund",
                gen_ai.conversation.id = empty,
                session = empty,
                baton.hop = empty,
            );
            span.record("baton.hop", 2);
            span.record("gen_ai.conversation.id", "s-1");
            span.record("session", "s-1");
            let _entered = span.enter();
            tracing::info!(error.type = "fatal", reason = "no route", "handing off");
        });
        let line = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            line.trim(),
            r#"INFO hop{agent="refund" session="s-1"}: handing off reason="no route""#
        );
    }
}
