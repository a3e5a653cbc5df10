"""The settings of CONTRACTS §10 (read by the one pydantic-settings reader): their forms, and an
invalid value named with what it must be, never echoed when it may carry a credential."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sre_diag.settings import Settings, describe_invalid_settings
from sre_diag.slack.links import LinkMaker


def _settings(**env: str) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[call-arg]


def test_the_forms_that_are_accepted() -> None:
    settings = _settings(
        DIAG_ALERT_SOURCES=" B0ALERTS01, A0GRAFANA1 ,",
        DIAG_ALERT_COOLDOWN_SECONDS="0",
        DIAG_GRAFANA_URL="https://grafana.example.com/sub/path",
        DIAG_GRAFANA_LOKI_UID="P8E80F9AEF21F6940",
        DIAG_RUNBOOK_URL="https://wiki.example.com/runbooks/{path}#{anchor}",
    )
    assert settings.alert_sources == ("B0ALERTS01", "A0GRAFANA1")
    assert settings.alert_cooldown_seconds == 0
    assert _settings(DIAG_RUNBOOK_URL="https://git.example.com/{path}").runbook_url
    unset = _settings(DIAG_GRAFANA_URL="", DIAG_RUNBOOK_URL="", DIAG_ALERT_SOURCES="")
    assert unset.grafana_url is None and unset.runbook_url is None and unset.alert_sources == ()


@pytest.mark.parametrize(
    ("env", "name", "says"),
    [
        ({"DIAG_ALERT_SOURCES": "U0ALICE99"}, "DIAG_ALERT_SOURCES", "bot IDs (B…) or app IDs"),
        ({"DIAG_ALERT_SOURCES": "alertmanager"}, "DIAG_ALERT_SOURCES", "not user IDs or names"),
        ({"DIAG_ALERT_COOLDOWN_SECONDS": "-1"}, "DIAG_ALERT_COOLDOWN_SECONDS", "at least 0"),
        ({"DIAG_GRAFANA_URL": "grafana.local"}, "DIAG_GRAFANA_URL", "http(s)://"),
        ({"DIAG_GRAFANA_LOKI_UID": "a b"}, "DIAG_GRAFANA_LOKI_UID", "text matching"),
        ({"DIAG_RUNBOOK_URL": "https://wiki/{anchor}"}, "DIAG_RUNBOOK_URL", "{path}"),
        ({"DIAG_RUNBOOK_URL": "https://wiki/{path}{user}"}, "DIAG_RUNBOOK_URL", "{path}"),
        ({"DIAG_RUNBOOK_URL": "file:///{path}"}, "DIAG_RUNBOOK_URL", "scheme must be http"),
    ],
)
def test_an_invalid_value_is_named_with_what_it_must_be(
    env: dict[str, str], name: str, says: str
) -> None:
    with pytest.raises(ValidationError) as invalid:
        _settings(**env)
    message = describe_invalid_settings(invalid.value)
    assert f"{name} must be" in message and says in message


def test_a_runbook_url_with_a_credential_is_never_echoed() -> None:
    with pytest.raises(ValidationError) as invalid:
        _settings(DIAG_RUNBOOK_URL="ftp://user:s3cret-CANARY@wiki/{path}")
    assert "s3cret-CANARY" not in describe_invalid_settings(invalid.value)


def test_alert_run_cap_and_grafana_org_defaults_and_forms() -> None:
    defaults = _settings()
    assert defaults.alert_max_runs_per_hour == 20
    assert defaults.grafana_org_id == 1
    set_ = _settings(DIAG_ALERT_MAX_RUNS_PER_HOUR="5", DIAG_GRAFANA_ORG_ID="7")
    assert (set_.alert_max_runs_per_hour, set_.grafana_org_id) == (5, 7)
    for env, name in (
        ({"DIAG_ALERT_MAX_RUNS_PER_HOUR": "0"}, "DIAG_ALERT_MAX_RUNS_PER_HOUR"),
        ({"DIAG_GRAFANA_ORG_ID": "0"}, "DIAG_GRAFANA_ORG_ID"),
        ({"DIAG_GRAFANA_ORG_ID": "1&orgId=2"}, "DIAG_GRAFANA_ORG_ID"),
    ):
        with pytest.raises(ValidationError) as invalid:
            _settings(**env)
        assert f"{name} must be" in describe_invalid_settings(invalid.value)


def test_the_grafana_link_opens_the_configured_organisation() -> None:
    env = {
        "DIAG_LOGS_SOURCE": "http://loki.internal:3100",
        "DIAG_GRAFANA_URL": "https://grafana.example.com/",
        "DIAG_GRAFANA_LOKI_UID": "loki-prod",
    }
    logs_input = {
        "service": "payment-api",
        "start": "2026-11-28T10:00:00Z",
        "end": "2026-11-28T10:30:00Z",
    }
    for org, expected in ((None, "orgId=1&"), ("42", "orgId=42&")):
        extra = {"DIAG_GRAFANA_ORG_ID": org} if org else {}
        [link] = LinkMaker(_settings(**env, **extra)).of("query_logs", logs_input, {"items": []})
        assert expected in link.url
        assert link.url.count("orgId=") == 1
