"""Alert storms never cost the answer or become run storms (CONTRACTS §10), against a Slack
double that rate-limits like Slack (``chat.postMessage`` ~1/s per channel with a short burst).

- 200 alerts of one pattern in ~10 s: one run, whose answer lands, and ONE pointer message,
  edited in place with the count (not one post per alert);
- 60 crash-loop alerts of the pods of one Deployment: one run (Kubernetes name suffixes masked);
- ``DIAG_ALERT_MAX_RUNS_PER_HOUR`` caps automatic runs per channel; past it, one pointer per
  pattern;
- a resolved notification starts nothing, and is counted on its pattern's pointer;
- Slack's retry of an alert never delivered before runs once; a replayed shortcut runs once.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from sre_diag.doubles.recording_slack import SLACK_LIMITS
from sre_diag.doubles.scripted_model import ModelStep
from sre_diag.slack.alerts import alert_pattern, is_resolved
from tests.conftest import StartServer
from tests.harness.support import draft_json, final_step
from tests.slack.alert_support import ALERT_BOT, alert_event, diagnose, new_ts
from tests.slack.support import ADMIN, SlackRig, slack_rig

SOURCES = {"DIAG_ALERT_SOURCES": ALERT_BOT}
_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def _suffix(n: int, rng: random.Random) -> str:
    return "".join(rng.choice(_SAFE) for _ in range(n))


def _grafana(host: str, value: int) -> list[dict[str, Any]]:
    return [
        {
            "title": f"[FIRING:1] HighErrorRate {host} (payments critical)",
            "text": f"error rate {value}% on {host}.prod.internal since 10:05",
            "fields": [{"title": "instance", "value": f"{host}:8080"}],
        }
    ]


def _pointer_posts(rig: SlackRig) -> list[dict[str, Any]]:
    return [
        c.params
        for c in rig.slack.calls_of("chat.postMessage")
        if "more alerts" in str(c.params.get("text")) or "An alert like this" in str(
            c.params.get("text")) or "Not diagnosed automatically" in str(c.params.get("text"))
    ]  # fmt: skip


def _stored_pointers(rig: SlackRig) -> list[dict[str, Any]]:
    return [
        m
        for m in rig.slack.messages
        if "An alert like this" in str(m.get("text"))
        or "Not diagnosed automatically" in str(m.get("text"))
    ]


async def test_200_alerts_of_one_pattern_give_one_run_whose_answer_lands(
    model_server: StartServer, tmp_path: Path
) -> None:
    # The model answers after 3 s: the answer is posted in the middle of the storm.
    model = await model_server([ModelStep(content=draft_json(conclusion=False), delay_seconds=3.0)])
    rng = random.Random(7)
    first = new_ts()
    async with slack_rig(model, tmp_path, limits=SLACK_LIMITS, **SOURCES) as rig:
        await alert_event(rig, attachments=_grafana("web-17", 12), ts=first)
        for batch in range(10):  # 199 more in ~10 s, 20 at once every half second
            size = 19 if batch == 9 else 20
            hosts = [f"web-{rng.randint(1, 99)}" for _ in range(size)]
            await asyncio.gather(
                *(alert_event(rig, attachments=_grafana(h, rng.randint(5, 99))) for h in hosts)
            )
            await asyncio.sleep(0.5)
        await rig.handle.manager.wait_idle()
        for _ in range(200):  # the pointer's last edit comes within its interval (5 s)
            if any("+198 more" in str(m.get("text")) for m in _stored_pointers(rig)):
                break
            await asyncio.sleep(0.1)
        answers = rig.answers()
        pointer_posts = _pointer_posts(rig)
        stored = _stored_pointers(rig)
    assert model.request_count == 1
    assert [a["thread_ts"] for a in answers] == [first]
    assert len(pointer_posts) <= 3, len(pointer_posts)  # a handful, not one per alert
    assert len(stored) == 1
    assert "+198 more alerts of this pattern since" in stored[0]["text"]
    assert first in stored[0]["text"]


async def test_60_crash_loop_alerts_of_one_deployment_give_one_run(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    rng = random.Random(11)
    rs = _suffix(10, rng)
    texts = [
        f"KubePodCrashLooping: pod payments/api-{rs}-{_suffix(5, rng)} (container api) is "
        f"restarting {rng.randint(2, 40)} times / 10 minutes on node "
        f"ip-10-0-{rng.randint(0, 9)}-{rng.randint(1, 250)}.ec2.internal"
        for _ in range(60)
    ]
    assert len({alert_pattern(t) for t in texts}) == 1
    async with slack_rig(model, tmp_path, limits=SLACK_LIMITS, **SOURCES) as rig:
        for chunk in range(0, 60, 10):
            await asyncio.gather(*(alert_event(rig, text=t) for t in texts[chunk : chunk + 10]))
        await rig.handle.manager.wait_idle()
        answers = rig.answers()
        stored = _stored_pointers(rig)
    assert model.request_count == 1
    assert len(answers) == 1
    assert len(stored) == 1


def test_kubernetes_suffixes_of_every_workload_kind_are_masked() -> None:
    rng = random.Random(3)
    kinds = {
        "deployment pod": lambda: f"pod shop/cart-{_suffix(9, rng)}-{_suffix(5, rng)} OOMKilled",
        "replicaset": lambda: f"replicaset shop/cart-{_suffix(9, rng)} unavailable",
        "daemonset pod": lambda: f"pod kube-system/node-exporter-{_suffix(5, rng)} down",
        "statefulset pod": lambda: f"pod db/postgres-{rng.randint(0, 30)} lagging",
        "cronjob job": lambda: f"job ops/backup-{rng.randint(28_000_000, 29_000_000)} failed",
        "cronjob pod": lambda: (
            f"pod ops/backup-{rng.randint(28_000_000, 29_000_000)}-{_suffix(5, rng)} failed"
        ),
    }
    for kind, make in kinds.items():
        patterns = {alert_pattern(make()) for _ in range(30)}
        assert len(patterns) == 1, (kind, patterns)
    # Different workloads stay apart; words with vowels are never taken for a suffix.
    assert alert_pattern("pod shop/cart-7d9f8b6c5d-xk2lp down") != alert_pattern(
        "pod shop/checkout-7d9f8b6c5d-xk2lp down"
    )
    assert alert_pattern("service payments-gateway down") != alert_pattern(
        "service payments-ledger down"
    )


def test_resolved_and_ok_notifications_are_told_apart() -> None:
    assert is_resolved("[RESOLVED] HighErrorRate web-17 (payments)")
    assert is_resolved("[OK] HighErrorRate web-17")
    assert not is_resolved("[FIRING:2] HighErrorRate web-17 (payments)")
    assert not is_resolved("HighErrorRate RESOLVED soon?")
    firing = alert_pattern("[FIRING:2] HighErrorRate web-17 (payments critical)\nbody 1")
    assert firing == alert_pattern("[RESOLVED] HighErrorRate web-03 (payments)\nother body")


async def test_resolved_starts_nothing_and_counts_on_the_pointer(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    async with slack_rig(model, tmp_path, **SOURCES) as rig:
        lone = "[RESOLVED] DiskFull node-3 (ops)"
        await alert_event(rig, attachments=[{"title": lone, "text": "ok"}])
        assert rig.slack.calls_of("chat.postMessage") == []  # nothing to count it on
        rig.handle.messages.pointers._every = 0.2
        first = new_ts()
        await alert_event(rig, attachments=_grafana("web-17", 12), ts=first)
        await rig.handle.manager.wait_idle()
        await alert_event(rig, attachments=_grafana("web-03", 40))
        resolved = [{"title": "[RESOLVED] HighErrorRate web-17 (payments)", "text": "ok"}]
        await alert_event(rig, attachments=resolved)
        await asyncio.sleep(0.6)
        stored = _stored_pointers(rig)
        metrics = rig.handle.metrics.render().decode()
    assert model.request_count == 1
    assert len(stored) == 1 and "+1 more alerts of this pattern" in stored[0]["text"]
    assert 'reason="ALERT_RESOLVED",result="ignored"} 2.0' in metrics


async def test_the_hourly_cap_points_instead_of_running(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False)) for _ in range(2)])
    env = {**SOURCES, "DIAG_ALERT_MAX_RUNS_PER_HOUR": "2"}
    async with slack_rig(model, tmp_path, **env) as rig:
        for name in ("DiskFull", "HighLatency"):
            await alert_event(rig, text=f"{name} on node-3")
        await rig.handle.manager.wait_idle()
        capped = [new_ts(), new_ts(), new_ts()]
        await alert_event(rig, text="CertExpiry for api.example.com", ts=capped[0])
        await alert_event(rig, text="CertExpiry for api.example.com", ts=capped[1])
        await alert_event(rig, text="QueueBacklog orders", ts=capped[2])
        await rig.handle.manager.wait_idle()
        stored = _stored_pointers(rig)
    assert model.request_count == 2
    assert sorted(m["thread_ts"] for m in stored) == sorted([capped[0], capped[2]])
    assert all("DIAG_ALERT_MAX_RUNS_PER_HOUR" in m["text"] for m in stored)


async def test_a_first_seen_retried_alert_runs_once(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    async with slack_rig(model, tmp_path, **SOURCES) as rig:
        ts = new_ts()
        # Its first delivery never reached a front (a restart): Slack's retry is all we get.
        await alert_event(rig, text="DiskFull on node-3", ts=ts, event_id="EvRETRY01",
                          retry_num="1")  # fmt: skip
        await alert_event(rig, text="DiskFull on node-3", ts=ts, event_id="EvRETRY01",
                          retry_num="2")  # fmt: skip
        await rig.handle.manager.wait_idle()
        answers = rig.answers()
    assert model.request_count == 1
    assert [a["thread_ts"] for a in answers] == [ts]


async def test_a_replayed_shortcut_request_runs_once(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False)) for _ in range(2)])
    message = {"type": "message", "ts": new_ts(), "text": "payment-api 5xx", "user": "UX1"}
    async with slack_rig(model, tmp_path) as rig:
        await diagnose(rig, message, trigger_id="111.222.abc")
        await diagnose(rig, message, trigger_id="111.222.abc")  # the same request, replayed
        await rig.handle.manager.wait_idle()
        once = len(rig.answers())
        await diagnose(rig, message, trigger_id="111.333.def")  # a second click runs
        await rig.handle.manager.wait_idle()
        twice = len(rig.answers())
    assert (once, twice) == (1, 2)
    assert ADMIN
