"""The sample Slack event envelope (``app_mention.json``) that ``sre-diag replay`` replays.

Installed as the data package ``sre_diag.resources.slack`` (see pyproject):
``sre_diag.resources.sample_slack_event()``, ``python -m sre_diag.resources slack-event``.
"""
