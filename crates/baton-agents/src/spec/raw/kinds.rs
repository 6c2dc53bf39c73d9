//! The `[exec]` and `[llm]` tables of a spec, checked; an exec spec's
//! `[llm]` is its program's model (`ctx.model`).

use std::ops::Range;

use toml::Spanned;

use super::{ExecMode, ExecSpec, HistorySpec, Kind, LlmSpec, RawSpec, Report};

impl Report<'_> {
    /// An exec spec: its `[exec]` table, with the `[llm]` table its
    /// program's calls use, which (as `[[mcp]]`) needs a persistent program.
    pub(super) fn exec_kind(&mut self, raw: &RawSpec, kind_span: &Range<usize>) -> Option<Kind> {
        let model = match raw.llm.as_ref() {
            Some(llm) => match self.llm(Some(llm), kind_span) {
                Some(Kind::Llm(llm)) => Some(llm),
                _ => None,
            },
            None => None,
        };
        let exec = self.exec(raw.exec.as_ref(), kind_span);
        let uses_worker = model.is_some() || !raw.mcp.is_empty();
        match exec {
            Some(Kind::Exec(mut exec)) => {
                if uses_worker && exec.mode != ExecMode::Persistent {
                    let span = raw.exec.as_ref().map_or(kind_span.clone(), Spanned::span);
                    self.error(
                        &span,
                        "[llm] and [[mcp]] in an exec spec serve a persistent program's calls (ctx.model, ctx.tool): set mode = \"persistent\" under [exec]",
                    );
                }
                exec.llm = model;
                Some(Kind::Exec(exec))
            }
            other => other,
        }
    }

    pub(super) fn exec(
        &mut self,
        exec: Option<&Spanned<ExecSpec>>,
        kind_span: &Range<usize>,
    ) -> Option<Kind> {
        let Some(exec) = exec else {
            self.error(
                kind_span,
                "kind = \"exec\" needs an [exec] table with command = [\"program\", \"arg\", ...]",
            );
            return None;
        };
        if exec.get_ref().command.is_empty() {
            self.error(
                &exec.span(),
                "[exec] command is empty: name the program, e.g. command = [\"python3\", \"agent.py\"]",
            );
            return None;
        }
        Some(Kind::Exec(exec.get_ref().clone()))
    }

    pub(super) fn llm(
        &mut self,
        llm: Option<&Spanned<LlmSpec>>,
        kind_span: &Range<usize>,
    ) -> Option<Kind> {
        let Some(llm) = llm else {
            self.error(
                kind_span,
                "kind = \"llm\" needs an [llm] table with at least model = \"...\"",
            );
            return None;
        };
        let settings = llm.get_ref();
        if !(settings.base_url.starts_with("http://") || settings.base_url.starts_with("https://"))
        {
            self.error(
                &llm.span(),
                format!(
                    "[llm] base_url {:?} is not an http(s) URL: use e.g. \"http://127.0.0.1:8080/v1\"",
                    settings.base_url
                ),
            );
        }
        if let Some(limits) = &settings.limits {
            let (requests, tokens) = (limits.requests_per_minute, limits.tokens_per_minute);
            if requests.is_none() && tokens.is_none() {
                self.error(
                    &llm.span(),
                    "[llm.limits] sets no limit: give requests_per_minute = N, tokens_per_minute = N, or both",
                );
            }
            if requests == Some(0) || tokens == Some(0) {
                self.error(
                    &llm.span(),
                    "[llm.limits] a limit of 0 lets no call through: give at least 1, or leave the limit out",
                );
            }
        }
        if let Some(problem) = settings.history.as_ref().and_then(HistorySpec::problem) {
            self.error(&llm.span(), problem);
        }
        if settings.hop_budget_tokens == Some(0) {
            self.error(
                &llm.span(),
                "[llm] hop_budget_tokens = 0 lets no call through: give at least 1, or leave it out",
            );
        }
        if let Some(price) = &settings.price {
            let fine = |p: f64| p.is_finite() && p >= 0.0;
            if !fine(price.input_per_million) || !fine(price.output_per_million) {
                self.error(
                    &llm.span(),
                    "[llm.price] prices are per million tokens and cannot be negative: e.g. input_per_million = 2.5, output_per_million = 10.0",
                );
            }
        }
        Some(Kind::Llm(settings.clone()))
    }
}
