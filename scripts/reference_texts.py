"""What each code a user can see means, and what to do about it: the hand-written half of the
codes reference (docs/reference/codes.md). scripts/gen_reference.py pairs these texts with the
enums of the code; a member without a text here stops the generator, so a new code cannot ship
undocumented. Each entry is (meaning, what to do).
"""

from __future__ import annotations

Texts = dict[str, tuple[str, str]]

OUTCOMES: Texts = {
    "DRAFT": (
        "The model answered with a valid Draft; every cited check is a READY check of this run.",
        "Read the conclusion (or the honest *no confirmed conclusion*) and its evidence.",
    ),
    "STOPPED": (
        "The run ended under control without a Draft; `stop_reason` says why and "
        "`progress.checks` lists what was checked.",
        "See the stop reason below.",
    ),
    "FAILED": (
        "The run failed closed: nothing was concluded; `failure` names a stable code and detail.",
        "See the failure code and detail below.",
    ),
}

STOP_REASONS: Texts = {
    "INFORMATION_SATURATED": (
        "The last `DIAG_NO_GAIN_STREAK` results added nothing new, and the model asked for "
        "more anyway.",
        "Ask a narrower question (service, time window, symptom), or add the evidence source "
        "that would answer it.",
    ),
    "MODEL_CALL_BUDGET_EXHAUSTED": (
        "The run used its `DIAG_MAX_MODEL_CALLS` model rounds.",
        "Usually a question too broad for one run; narrow it. Raise the budget only if "
        "`eval` shows your model needs more rounds.",
    ),
    "TOOL_CALL_BUDGET_EXHAUSTED": (
        "The run executed its `DIAG_MAX_TOOL_CALLS` evidence checks.",
        "Narrow the question, or raise `DIAG_MAX_TOOL_CALLS`.",
    ),
    "TOKEN_BUDGET_EXHAUSTED": (
        "The tokens left (`DIAG_MAX_TOTAL_TOKENS`), or the run's byte capacity "
        "(`DIAG_RUN_CAPACITY_BYTES`), do not cover one more round like the last one.",
        "Narrow the question; raise the token budget if your model is verbose.",
    ),
    "DEADLINE_EXCEEDED": (
        "The run reached `DIAG_DEADLINE_SECONDS` of wall clock; a call in flight was aborted.",
        "Check the model endpoint's latency (`check --model`) and slow evidence backends.",
    ),
    "CANCELLED": (
        "Someone pressed Cancel (or the process was draining past the deadline).",
        "Nothing to fix; ask again if needed.",
    ),
}

FAILURE_CODES: Texts = {
    "INVALID_DRAFT": (
        "The model's final text is not exactly one valid Draft; it was not repaired or retried.",
        "See the detail; a model that does this often needs `DIAG_STRUCTURED_OUTPUT=json_schema` "
        "(if `check --model` recommends it) or another model.",
    ),
    "AGENT_ERROR": (
        "The run could not complete for a reason outside the model's answer.",
        "See the detail; `UNCLASSIFIED` is logged with its run id.",
    ),
    "MODEL_ERROR": (
        "The model endpoint failed: an HTTP error, a timeout, an unusable answer.",
        "See the detail; run `sre-diag check --model`.",
    ),
}

DRAFT_DEFECTS: Texts = {
    "EMPTY": ("The final text was empty.", "Try another model, or `json_schema` output."),
    "OVERSIZED": (
        "The final text is larger than `DIAG_MAX_DRAFT_BYTES`.",
        "Usually a model that rambles; try `DIAG_STRUCTURED_OUTPUT=json_schema`.",
    ),
    "FENCED": (
        "The Draft was wrapped in a Markdown code fence.",
        "Use `DIAG_STRUCTURED_OUTPUT=json_schema` when the endpoint supports it.",
    ),
    "PREFIXED": ("Text came before the JSON object.", "As for `FENCED`."),
    "SUFFIXED": ("Text (or a second object) came after the JSON object.", "As for `FENCED`."),
    "MALFORMED": ("The text is not valid JSON.", "As for `FENCED`."),
    "TOO_DEEP": (
        "Arrays or objects nested deeper than any Draft can be.",
        "As for `FENCED`.",
    ),
    "DUPLICATE_KEY": ("An object names one key twice.", "As for `FENCED`."),
    "SCHEMA": (
        "Valid JSON that is not a Draft: a missing or extra key, a wrong type, a bound "
        "exceeded, a FINDING without a citation.",
        "As for `FENCED`; check the prompt language (`DIAG_PROMPT`) suits the model.",
    ),
    "UNKNOWN_CITATION": (
        "A cited id is not a READY check of this run (invented, rejected, failed, or from "
        "another run).",
        "Nothing to fix in the settings: the answer was refused because it cited evidence "
        "that does not exist. A model that does this often is not fit for the job (`eval`).",
    ),
}

MODEL_ERROR_DETAILS: Texts = {
    "HTTP_<status>": (
        "The endpoint answered with that HTTP status (e.g. `HTTP_401`, `HTTP_429`, "
        "`HTTP_500`); there is no retry.",
        "401/403: the key; 404: `OPENAI_BASE_URL` or `DIAG_MODEL`; 429: the endpoint's rate "
        "limit; 5xx: the endpoint.",
    ),
    "TIMEOUT": (
        "No complete answer within `DIAG_MODEL_TIMEOUT_SECONDS`.",
        "A slow local model may need a larger timeout.",
    ),
    "CONNECTION": (
        "The endpoint could not be reached, or the connection broke.",
        "Check `OPENAI_BASE_URL`, DNS, TLS and proxies; the log names the host.",
    ),
    "BAD_RESPONSE": (
        "The answer could not be used (not an OpenAI-compatible response, corrupt body).",
        "Check the endpoint really is OpenAI-compatible (`check --model`).",
    ),
    "OVERSIZED_RESPONSE": (
        "The answer's body is larger than the client accepts.",
        "Check the endpoint; lower `DIAG_MAX_DRAFT_BYTES` does not help here.",
    ),
}

AGENT_ERROR_DETAILS: Texts = {
    "UNCLASSIFIED": (
        "An unexpected failure; the run failed closed.",
        "Look up the run id in the process log and report it (see the project's SECURITY.md "
        "if it looks like a security problem).",
    ),
    "WORKER_LOST": (
        "The worker running this diagnosis vanished or stalled past `DIAG_JOB_CLAIM_SECONDS`; "
        "another worker answered for it. The run is never run twice.",
        "Use the *Replay diagnosis* shortcut, and find out why the worker died (OOM, node loss).",
    ),
    "QUEUE_LOST": (
        "The run queue lost this request (Redis restarted without persistence, the stream "
        "deleted).",
        "Ask again; run Redis with AOF (see Scaling with Redis workers).",
    ),
}

INPUT_REJECTIONS: Texts = {
    "BLANK_QUERY": ("The question is empty or only spaces.", "Ask a question."),
    "QUERY_TOO_LARGE": (
        "The question is over `DIAG_MAX_QUERY_BYTES` UTF-8 bytes; it is never cut.",
        "Shorten it.",
    ),
    "PREVIOUS_TURN_TOO_LARGE": (
        "The previous turn is over `DIAG_MAX_PREVIOUS_TURN_BYTES`.",
        "Start a new thread.",
    ),
    "INPUT_TOO_LARGE": (
        "Question plus previous turn are over `DIAG_MAX_INPUT_BYTES` (for `patterns`: the "
        "input is over 16 MiB or 100,000 lines).",
        "Shorten the question or start a new thread (`patterns`: give a smaller window).",
    ),
    "INVALID_PREVIOUS_TURN": (
        "The `--previous-turn` file cannot be read or is not exactly "
        '`{"query", "conclusion", "missing_info"}`.',
        "Fix the file.",
    ),
    "INVALID_SETTINGS": (
        "A setting is invalid; the message names each bad setting and what it must be (never "
        "its value when it may hold a secret).",
        "Fix the named settings; `sre-diag check` shows the same message.",
    ),
    "INVALID_ARGUMENTS": (
        "The command line is wrong (unknown command or option, missing argument, a refused "
        "file for `patterns`).",
        "See `sre-diag <command> --help`.",
    ),
    "MODEL_NOT_CONFIGURED": (
        "Neither `OPENAI_BASE_URL` nor `OPENAI_API_KEY` is set, so a command that would call "
        "the model refuses before any request.",
        "Set them (see Configuration), or run `sre-diag demo` to see it work without a model.",
    ),
}

EVIDENCE_STATUSES: Texts = {
    "READY": ("The adapter ran; the observation carries bounded, whitelisted items.", "-"),
    "ERROR": ("The adapter failed; the observation carries an `error_code`.", "See below."),
    "REJECTED": (
        "The harness did not run the adapter (bad envelope, duplicate, …).",
        "Nothing, unless it is frequent: then the model struggles with the tool protocol.",
    ),
    "STOP_REQUIRED": (
        "The harness requires the final Draft now (saturation or a budget).",
        "Nothing: the model must answer with what it has.",
    ),
}

ADAPTER_ERRORS: Texts = {
    "TIMEOUT": (
        "The backend did not answer in time (or the run's deadline cut the call off).",
        "Check the backend's latency; for MySQL, `DIAG_MYSQL_STATEMENT_TIMEOUT_SECONDS`.",
    ),
    "UNAVAILABLE": (
        "The backend could not be reached or answered something unusable.",
        "Run `sre-diag check`.",
    ),
    "INVALID_INPUT": (
        "The model's input is outside the tool's schema (a window over 24 h, an unknown "
        "service, …).",
        "Nothing: the model is told and may try again.",
    ),
    "FORBIDDEN_QUERY": (
        "`query_mysql` refused the statement (see the SQL refusal classes); it never reached "
        "the server.",
        "Nothing, unless a benign query you need is refused: rewrite it as suggested below.",
    ),
    "NOT_CONFIGURED": (
        "The tool's source is not set, or `query_mysql` refuses an account that is not "
        "read-only or can read secret columns.",
        "Set the source; run `sre-diag check`, which says why and prints the fix.",
    ),
    "INTERNAL": (
        "The adapter crashed; the run goes on without that evidence.",
        "Look up the run id in the log and report it.",
    ),
}

HARNESS_CODES: Texts = {
    "STOP_REQUIRED": ("The request was answered `STOP_REQUIRED`.", "-"),
    "CANCELLED": (
        "A Cancel or a stop cut the call off mid-call (audit and `progress.checks` only: the "
        "model never sees it). A call the deadline cut off is `TIMEOUT`.",
        "-",
    ),
}

REJECT_CODES: Texts = {
    "INVALID_ENVELOPE": (
        "The tool arguments are not a valid envelope (unknown field, bad JSON, reused tool "
        "call id).",
        "Nothing; frequent ones mean the model handles tool calling poorly (`check --model`).",
    ),
    "PREVIOUS_OBSERVATION_REQUIRED": (
        "The model did not say whether the previous non-empty result GAINED anything.",
        "Nothing; the model is told which id to evaluate.",
    ),
    "PREVIOUS_OBSERVATION_MISMATCH": (
        "The model evaluated the wrong earlier call.",
        "Nothing; the model is told the expected id.",
    ),
    "DUPLICATE_CALL": (
        "The same check (same tool, equivalent input) was already made in this run.",
        "Nothing; the model is told to use the earlier result.",
    ),
    "ONE_TOOL_PER_ROUND": (
        "The model asked for several tools in one round; only the first ran.",
        "Nothing.",
    ),
    "UNKNOWN_TOOL": (
        "The model asked for a tool that does not exist; no check is recorded.",
        "Nothing; frequent ones mean the model is not fit for the job.",
    ),
}

REFUSALS: Texts = {
    "PARSE_ERROR": ("The statement could not be parsed as MySQL.", "Write plain MySQL."),
    "EMPTY": ("No statement.", "-"),
    "MULTIPLE_STATEMENTS": ("More than one statement.", "One SELECT per call."),
    "NOT_SELECT": ("Anything but SELECT (CTEs, unions, joins, subqueries are fine).", "-"),
    "COMMENT_HINT": (
        "A comment or optimizer hint of any form (`--`, `#`, `/* */`, `/*! */`).",
        "Write the query without comments.",
    ),
    "INTO_CLAUSE": ("`INTO OUTFILE`, `INTO DUMPFILE`, `INTO @var`.", "-"),
    "LOCKING_READ": ("`FOR UPDATE`, `LOCK IN SHARE MODE`.", "-"),
    "VARIABLE": ("A user or system variable.", "Use literals."),
    "FORBIDDEN_FUNCTION": (
        "A function outside the allowlist of pure computations (`SLEEP`, `LOAD_FILE`, "
        "`USER()`, …), or a built-in name written back-quoted.",
        "Use allowed functions; `MIN`/`MAX` instead of `ANY_VALUE`.",
    ),
    "SYSTEM_SCHEMA": (
        "`mysql`, `performance_schema`, `sys` or `information_schema`.",
        "The tool description already lists the tables and columns.",
    ),
    "OTHER_DATABASE": ("A table of another database.", "-"),
    "TABLE_NOT_ALLOWED": (
        "A table outside `DIAG_MYSQL_ALLOWED_TABLES`.",
        "Add it to the allowlist if the bot should read it.",
    ),
    "SECRET_COLUMN": (
        "A secret column used anywhere but projected bare by the outermost SELECT (a "
        "predicate, a join, a function, ORDER BY, DISTINCT over it, …).",
        "Do not filter or join on secrets.",
    ),
    "UNSUPPORTED_SYNTAX": (
        "Syntax the guard does not allow (`REPLACE`, `COLLATE`, `WITH RECURSIVE`, "
        "`NATURAL JOIN`, hex or national literals, …).",
        "Write the `ON` of a join; use plain literals.",
    ),
    "LEXICAL": (
        "Characters or tokens the conservative lexer cannot classify (non-ASCII outside "
        "string literals, a number glued to a word, `;`).",
        "-",
    ),
    "TOO_COMPLEX": (
        "Nesting deeper than 32 parentheses or 48 tree levels, over 1,500 nodes or 4,000 "
        "characters.",
        "Simplify.",
    ),
    "STAR_NOT_TOP_LEVEL": (
        "`*` other than in the outermost SELECT, or one the guard cannot expand.",
        "Name the columns.",
    ),
    "EXPENSIVE_PATTERN": (
        "Work the time cap cannot interrupt: `REGEXP`, a computed `LIKE` pattern or more than "
        "four `%`, nested string builders, `REPEAT`/`LPAD`/….",
        "Use `=`, `IN`, or `LIKE 'prefix%'`.",
    ),
    "RENDER_MISMATCH": (
        "The guard's own rendering of the checked statement did not verify (defence in depth).",
        "Report it with the run id.",
    ),
    "TEXT_EXTRACTION": (
        "A text value cut, searched, re-cased or decoded (`SUBSTRING`, `LOWER`, "
        "`JSON_EXTRACT`, …): redaction needs the whole value.",
        "Select the column whole; filter with `=`, `IN` or `LIKE 'prefix%'`.",
    ),
    "EXPRESSION_TOO_LARGE": (
        "An output row, key or string match could exceed fixed size bounds computed from the "
        "schema.",
        "Name fewer or narrower columns.",
    ),
}

INVOCATION_STATUSES: Texts = {
    "READY": ("The check ran and returned evidence (possibly zero items).", "-"),
    "ERROR": ("The check failed; `error_code` says how. It can never be cited.", "-"),
    "REJECTED": ("The check was refused by the harness; never cited.", "-"),
}

CHECK_STATUSES: Texts = {
    "OK": ("The part is configured and works.", "-"),
    "FAILED": (
        "The part is configured and does not work; the line says why (exit 1).",
        "Follow the reason on the line.",
    ),
    "NOT_CONFIGURED": (
        "The part is not set; its tool answers `NOT_CONFIGURED` (for the model: the commands "
        "that would call it refuse with `MODEL_NOT_CONFIGURED`).",
        "-",
    ),
    "NOT_PROBED": (
        "Configured but not contacted: the model endpoint without `--model`.",
        "Run `sre-diag check --model` to probe it.",
    ),
}

EVALUATIONS: Texts = {
    "GAINED": ("The previous non-empty result advanced the diagnosis.", "-"),
    "NO_GAIN": (
        "It did not; `DIAG_NO_GAIN_STREAK` of these in a row require a stop.",
        "-",
    ),
}

CONFIDENCES: Texts = {
    "HIGH": ("The cited evidence shows the cause directly.", "-"),
    "MEDIUM": ("The evidence supports the cause, with gaps named in the limitations.", "-"),
    "LOW": ("A lead worth checking, weakly supported.", "Verify before acting."),
}

TRIGGERS: Texts = {
    "mention": ("A mention of the bot (a question or a follow-up in a thread).", "-"),
    "shortcut": ("The *Diagnose this* message shortcut.", "-"),
    "alert": ("A new top-level message of a `DIAG_ALERT_SOURCES` bot or app.", "-"),
    "replay": ("The *Replay diagnosis* shortcut, or `sre-diag replay`.", "-"),
}

EVENT_RESULTS: Texts = {
    "accepted": (
        "A run was started or a button served (reason: `MENTION`, `SHORTCUT`, `ALERT`, "
        "`CANCEL`, `REPLAY`, `EVIDENCE`, `FEEDBACK`, `FEEDBACK_REASON`).",
        "-",
    ),
    "ignored": (
        "Acknowledged and dropped on purpose (reason: see the two tables below, or "
        "`EVIDENCE_EXPIRED`, `ALERT_COOLDOWN`, `NO_LIVE_RUN`).",
        "A rising `NOT_ADMIN_CHANNEL` count: check `DIAG_ADMIN_CHANNELS`.",
    ),
    "declined": (
        "Meant for the bot but not started (reason: `NOT_STARTED` for a busy thread or a "
        "draining process, `STATE_UNAVAILABLE`, `QUERY_TOO_LARGE`, `NO_TEXT`).",
        "`STATE_UNAVAILABLE`: check Redis.",
    ),
}

IGNORE_REASONS: Texts = {
    "NOT_ADMIN_CHANNEL": (
        "The event came from a channel not in `DIAG_ADMIN_CHANNELS`.",
        "Add the channel's ID if the bot should act there.",
    ),
    "DIRECT_MESSAGE": ("A direct message; the bot acts only in admin channels.", "-"),
    "FROM_BOT": ("Posted by a bot (mentions by other bots are never answered).", "-"),
    "EDITED": ("An edit of a message (Slack re-sends the mention).", "-"),
    "SLACK_RETRY": ("A retried delivery of an event already received.", "-"),
    "DUPLICATE_EVENT": ("An event id already processed (possibly by another replica).", "-"),
    "MALFORMED": ("An event without the fields a mention needs.", "-"),
}

ALERT_IGNORES: Texts = {
    "NO_ALERT_SOURCES": ("`DIAG_ALERT_SOURCES` is empty: no automatic runs.", "-"),
    "NOT_AN_ALERT_SOURCE": (
        "The message's sender is not in `DIAG_ALERT_SOURCES`.",
        "Add its bot ID (`B…`) if it should start runs.",
    ),
    "EDITED": ("An edit of a message.", "-"),
    "DELETED": ("A deletion.", "-"),
    "THREAD_REPLY": ("A reply inside a thread (only top-level messages are alerts).", "-"),
    "OTHER_SUBTYPE": ("A message subtype that is not a post (a join, a topic change, …).", "-"),
    "OWN_MESSAGE": ("One of the bot's own messages.", "-"),
    "NOT_ADMIN_CHANNEL": ("The channel is not in `DIAG_ADMIN_CHANNELS`.", "-"),
    "MALFORMED": ("A message event without the fields needed.", "-"),
}

SLACK_NOTES: Texts = {
    "BUSY": ("A run is already going in this thread.", "Wait for its answer."),
    "UNAVAILABLE": (
        "The shared run state (Redis) is unreachable.",
        "Check Redis (`sre-diag check`).",
    ),
    "RESTARTING": ("The process is draining for a restart.", "Ask again in a minute."),
    "LOST_NOTE": ("See `WORKER_LOST`.", "Use *Replay diagnosis*."),
    "QUEUE_LOST_NOTE": ("See `QUEUE_LOST`.", "Ask again."),
    "POISON": (
        "A queued job could not be read by the worker (malformed, or written by a newer "
        "version); it was dead-lettered.",
        "Upgrade workers before fronts; ask again.",
    ),
    "POISON_NOTE": ("The status line of the same case.", "-"),
    "FENCED_NOTE": ("Another worker took over this run and answers it.", "-"),
    "NOT_QUEUED": ("The run queue is unreachable.", "Check Redis."),
    "FAILED_CLOSED": ("The run failed closed (the plain fallback of a failure).", "Ask again."),
    "BLANK_QUERY": ("Input hint: the mention carried no question.", "Ask a question."),
    "QUERY_TOO_LARGE": ("Input hint: the question is too long.", "Shorten it."),
    "PREVIOUS_TURN_TOO_LARGE": ("Input hint.", "Start a new thread."),
    "INPUT_TOO_LARGE": ("Input hint.", "Shorten the question or start a new thread."),
}


# Meanings of the settings whose field in sre_diag.settings has no docstring, by environment name
# (a docstring in the code wins; the tests refuse a name documented in both places).
SETTINGS: dict[str, str] = {
    "OPENAI_BASE_URL": (
        "Base URL of any OpenAI-compatible chat endpoint (OpenAI, a gateway, vLLM, DashScope "
        "compatible mode, a local server); unset: the OpenAI SDK's default."
    ),
    "OPENAI_API_KEY": "The endpoint's API key, sent only in the `Authorization` header.",
    "DIAG_MODEL": (
        "Model name sent to the endpoint; unknown names work (give `DIAG_MODEL_CONTEXT_WINDOW`)."
    ),
    "DIAG_MODEL_CONTEXT_WINDOW": (
        "Context window of the model, in tokens, for names the SDK does not know."
    ),
    "DIAG_MODEL_TIMEOUT_SECONDS": (
        "One model request, from its start to the last byte of its answer; no retry."
    ),
    "DIAG_MAX_MODEL_CALLS": "Model rounds per run.",
    "DIAG_MAX_TOTAL_TOKENS": (
        "Prompt plus completion tokens per run (estimated from text size when the endpoint "
        "reports no usage)."
    ),
    "DIAG_DEADLINE_SECONDS": (
        "Wall clock per run; a request or tool call in flight is aborted at the deadline."
    ),
    "DIAG_MAX_TOOL_CALLS": "Executed evidence tool calls per run.",
    "DIAG_NO_GAIN_STREAK": (
        "Consecutive `NO_GAIN` evaluations after which the harness requires the final answer."
    ),
    "DIAG_MAX_QUERY_BYTES": "UTF-8 bytes of the question; a longer one is refused, never cut.",
    "DIAG_MAX_PREVIOUS_TURN_BYTES": "UTF-8 bytes of the serialized previous turn of a thread.",
    "DIAG_MAX_INPUT_BYTES": "Question plus previous turn, as sent to the model.",
    "DIAG_MAX_OBSERVATION_BYTES": (
        "One tool observation as sent to the model (items are cut to fit; a log summary never is)."
    ),
    "DIAG_MAX_DRAFT_BYTES": "The model's final text.",
    "DIAG_RUN_CAPACITY_BYTES": "Input, all observations and output of one run together.",
    "DIAG_MYSQL_DSN": (
        "`mysql://user:password@host:port/database` of a READ-ONLY account; unset: "
        "`query_mysql` answers `NOT_CONFIGURED`."
    ),
    "DIAG_MYSQL_ALLOWED_TABLES": (
        "Comma-separated tables `query_mysql` may read; empty: every table of the DSN's "
        "database the account can see."
    ),
    "DIAG_MYSQL_REQUIRE_READ_ONLY": (
        "Refuse to run any statement unless the account's effective privileges (every level, "
        "roles, `PUBLIC`) are only `SELECT`/`SHOW VIEW`; `false` is an opt-out for guard tests."
    ),
    "DIAG_MYSQL_STATEMENT_TIMEOUT_SECONDS": (
        "Server-side time cap of one statement; the adapter kills a statement still running "
        "shortly after it."
    ),
    "DIAG_MYSQL_MAX_ROWS": "Rows of one result returned to the model.",
    "DIAG_KNOWLEDGE_RESCAN_SECONDS": "How often the runbook folder is checked for changes.",
    "SLACK_BOT_TOKEN": "The bot token (`xoxb-…`).",
    "SLACK_APP_TOKEN": (
        "The app-level token (`xapp-…`, scope `connections:write`); set: `serve` uses Socket "
        "Mode unless `--http`."
    ),
    "SLACK_SIGNING_SECRET": "Verifies that HTTP requests come from Slack.",
    "DIAG_SLACK_API_URL": (
        "Slack Web API base URL (GovSlack, a proxy, tests); unset: Slack's default."
    ),
    "DIAG_ADMIN_CHANNELS": (
        "Comma-separated channel IDs (`C…`/`G…`) where the bot acts; empty: it acts nowhere."
    ),
    "DIAG_MAX_CONCURRENT_RUNS": (
        "Diagnoses in flight per process (per worker with `--workers`); more wait in a queue."
    ),
    "DIAG_REDIS_URL": (
        "Redis shared by every replica: event dedupe, thread locks, Cancel, evidence, votes, "
        "the job queue; unset: in-process state."
    ),
    "DIAG_GRAFANA_URL": (
        "Grafana base URL; with `DIAG_GRAFANA_LOKI_UID`, Loki log checks link to Explore."
    ),
    "DIAG_LOG_LEVEL": "Process log level (`WARN` is read as `WARNING`).",
}
