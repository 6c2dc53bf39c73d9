//! Answers as they are written: `baton send --wait` and `baton watch` print
//! each `delta` of a session as it comes, the rest of its events as lines,
//! and a handoff between two streamed answers on a line of its own.

use std::io::Write as _;

use baton_proto::{Delta, Event, Shown};

/// What a terminal has shown of a session's streamed answers.
#[derive(Debug, Default)]
pub struct Printer {
    shown: Shown,
    /// A streamed answer was printed and its line is not ended yet.
    open: bool,
    /// Some of an answer was printed.
    streamed: bool,
    /// The text printed on the open line.
    line: String,
}

impl Printer {
    /// Prints `event` if it is a `delta`: the part of its text not printed
    /// before (a call made again after its stream was cut sends its text
    /// from the start again). `false` for any other event, which the
    /// caller shows with [`Printer::line`].
    pub fn delta(&mut self, event: &Event) -> bool {
        let Some(delta) = Delta::of(event) else {
            return false;
        };
        let fresh = self.shown.fresh(&delta);
        if !fresh.is_empty() {
            let mut out = std::io::stdout().lock();
            if !self.open {
                let agent = event.agent.as_deref().unwrap_or("?");
                let _ = write!(out, "{agent}: ");
            }
            let _ = write!(out, "{fresh}");
            let _ = out.flush();
            if !self.open {
                self.line.clear();
            }
            self.line.push_str(fresh);
            self.open = true;
            self.streamed = true;
        }
        true
    }

    /// Whether some of an answer was printed.
    pub fn streamed(&self) -> bool {
        self.streamed
    }

    /// Prints `line` on a line of its own, ending a streamed answer first.
    pub fn line(&mut self, line: &str) {
        self.end();
        println!("{line}");
    }

    /// Completes the open line with the rest of `end`'s answer, when the
    /// session completed with an answer that goes on from what the line
    /// shows: the last pieces of a stream may come after the event that
    /// ends the session (they are not stored, and travel apart from it).
    pub fn complete(&mut self, end: &Event) {
        if !self.open || end.kind != baton_proto::EventType::Completed {
            return;
        }
        let Some(baton_proto::Value::String(answer)) = &end.output else {
            return;
        };
        let answer = answer.as_str().unwrap_or_default();
        if let Some(rest) = answer.strip_prefix(self.line.as_str()) {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{rest}");
            let _ = out.flush();
            self.line.push_str(rest);
        }
    }

    /// Ends a streamed answer's line, if one is open.
    pub fn end(&mut self) {
        if std::mem::take(&mut self.open) {
            println!();
        }
    }
}
