"""The harness: one diagnosis run, and nothing about Slack, the command line or the audit sink.

Budgets, run state, step hooks, the Tool interceptor, the ledger (ToolBoundary), the tool
catalogues, the one FunctionAgent, the gated model, and ``run`` (``Harness.diagnose``).
"""
