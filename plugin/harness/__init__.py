"""The harness: one diagnosis run, and nothing about Slack, the command line or the audit sink.

Budgets, run state (``state``: what a run did) apart from its dependencies (``context``: budgets,
hooks, clock, cancellation), step hooks, the Tool interceptor, the ledger (ToolBoundary), the
tool catalogues, the one FunctionAgent, the gated model, ``audit_port`` (what the harness hands
a finished run to), ``_compat`` (every private LlamaIndex touch) and ``run``
(``Harness.diagnose``).
"""
