"""Evidence-bound incident diagnosis: harness, CLI and Slack Bolt plugin."""
