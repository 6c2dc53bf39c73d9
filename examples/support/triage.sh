#!/bin/sh
# A Baton exec agent in plain shell. The envelope arrives as JSON on stdin; the
# reply goes to stdout (proto-schemas/schema/exec_reply.schema.json). Exit 75
# asks for a retry; any other non-zero exit fails the task for good.
input=$(cat)
question=$(printf '%s' "$input" | tr 'A-Z' 'a-z')
echo "triage: session $BATON_SESSION, attempt $BATON_ATTEMPT" >&2
case "$question" in
  *"money back"*|*refund*)
    printf '%s\n' '{"action": "handoff", "requires": ["refunds"], "reason": "knowledge_gap", "say": "Passing you to our refund team."}' ;;
  *"speak to a human"*|*"a person"*)
    printf '%s\n' '{"action": "escalate", "requires": ["human"], "reason": "user_escalation", "say": "Getting a colleague."}' ;;
  *)
    printf '%s\n' '{"output": "We are open 9-17 on weekdays.", "say": "We are open 9-17 on weekdays."}' ;;
esac
