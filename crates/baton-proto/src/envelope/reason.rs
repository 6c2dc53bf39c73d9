//! Reason codes: why control moved, or why a session failed.

wire_enum! {
    /// Why control moved, or why a session failed. Free text is kept as `Other`.
    pub enum Reason {
        /// The agent lacks the knowledge the task needs.
        KnowledgeGap = "knowledge_gap",
        /// The task is outside the agent's scope.
        OutOfScope = "out_of_scope",
        /// A tool the agent depends on failed.
        ToolFailure = "tool_failure",
        /// The user asked for someone else.
        UserEscalation = "user_escalation",
        /// The task is harder than the agent's tier handles.
        ComplexityExceeded = "complexity_exceeded",
        /// No agent matches what the task requires.
        NoMatch = "no_match",
        /// The loop guard refused a route.
        LoopDetected = "loop_detected",
        /// The previous agent declined the task.
        Rejected = "rejected",
        /// Retries were exhausted.
        MaxAttempts = "max_attempts",
        /// The session's deadline passed.
        DeadlineExceeded = "deadline_exceeded",
        /// The task can never succeed (the agent said so).
        Fatal = "fatal",
        /// No agent could take the task, and no fallback either.
        NoRoute = "no_route",
        /// A child task of a delegation.
        Delegated = "delegated",
        /// A delegated child's branch ended and reports to its parent.
        Result = "result",
        /// A context condition of the routing rules moved control.
        ContextCondition = "context_condition",
        /// An LLM condition of the routing rules moved control.
        LlmCondition = "llm_condition",
        /// The after-work route moved control.
        AfterWork = "after_work",
        /// An LLM called a handoff tool without giving a reason.
        LlmHandoff = "llm_handoff",
        /// A person handed the task on from the inbox.
        HumanHandoff = "human_handoff",
        /// The session was cancelled (`baton cancel`, A2A `CancelTask`).
        Cancelled = "cancelled",
        /// An LLM agent's hop used up its model and tool calls (`max_steps`).
        MaxSteps = "max_steps",
        /// A tool call that must not be repeated may or may not have run.
        ToolOutcomeUnknown = "tool_outcome_unknown",
        /// The agent asked the user (or an A2A remote asked for input) and
        /// waits for the answer.
        InputRequired = "input_required",
        /// A tool call waits for a person's approval before it is made.
        ApprovalRequired = "approval_required",
        /// A tool call waits for a person to sign in to its MCP server
        /// again: the server asked for more scopes, or refused to refresh.
        AuthorizationRequired = "authorization_required",
        /// A root task arrived for a session that has ended already.
        SessionEnded = "session_ended",
        /// A model call would have passed the session's budget.
        BudgetExceeded = "budget_exceeded",
        /// The model provider kept refusing calls (429) until the session's
        /// deadline.
        RateLimited = "rate_limited",
        /// An evaluation (`baton eval`) stopped before a tool call that may
        /// write and whose result was not recorded: it was not made.
        WouldWrite = "would_write",
    }
}
