"""The sample Slack event envelope (``app_mention.json``) that ``sre-diag replay`` replays.

Installed as the data package ``plugin.resources.slack`` (see pyproject):
``plugin.resources.sample_slack_event()``, ``python -m plugin.resources slack-event``.
"""
