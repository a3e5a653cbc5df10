"""In Slack the Query is the message text with ONLY the bot's own mention removed (CONTRACTS §1).

Other people's mentions, channel and special mentions, links, spaces and line breaks reach the
model exactly as posted — "why did <@U0ALICE99> deploy" must not become "why did   deploy".
Checked on the pure function (examples and a property) and end to end through signed events:
a mention, a mention whose authorization names no bot user (the event's ``authorizations``
does), and the replay shortcut on a person's mention.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slack_bolt.authorization import AuthorizeResult

from sre_diag.doubles.recording_slack import BOT_USER_ID
from sre_diag.slack.gate import own_mention_removed
from tests.conftest import StartServer
from tests.harness.support import draft_json, final_step
from tests.slack.support import ADMIN, APP_ID, TEAM_ID, SlackRig, slack_rig

BOT = BOT_USER_ID  # UDIAG0001
OTHERS = "why did <@U0ALICE99> deploy <https://ci.example/run/42|run 42> at 10:05? cc <@W0BOB>"


@pytest.mark.parametrize(
    ("text", "query"),
    [
        (f"<@{BOT}> {OTHERS}", OTHERS),
        (f"<@{BOT}>\n{OTHERS}", OTHERS),
        (f"<@{BOT}|diag>  {OTHERS}", OTHERS),
        (f"{OTHERS} <@{BOT}>", OTHERS),
        (f"{OTHERS}\n<@{BOT}>", OTHERS),
        ("ask <@U0ALICE99>, then <@UDIAG0001> look at ord_10290",
         "ask <@U0ALICE99>, then look at ord_10290"),
        (f"payment-api <@{BOT}>, since 10:05", "payment-api, since 10:05"),
        (f"<@{BOT}> <@{BOT}> twice", "twice"),
        (f"<@{BOT}>x", "x"),
        # Line breaks are the poster's: only the separator of the mention goes.
        (f"hello <@{BOT}>\n\nworld", "hello\n\nworld"),
        (f"line1\n<@{BOT}> line2", "line1\nline2"),
        (f"x\n<@{BOT}>\n<@{BOT}> y", "x\ny"),
        (f"<@{BOT}>\n\nwhy <@U0ALICE99>?\n\n<@{BOT}>  ", "why <@U0ALICE99>?"),
        (f"a,<@{BOT}> b", "a, b"),
        (f"(<@{BOT}>)", "()"),
        (f"x\n\n  <@{BOT}> y", "x\n\n y"),
        # Another user whose id starts with the bot's is someone else.
        (f"<@{BOT}> ask <@{BOT}1> and <@{BOT}2|ann>", f"ask <@{BOT}1> and <@{BOT}2|ann>"),
        # Spacing, special and channel mentions, markup and look-alikes stay as posted.
        (f"<@{BOT}> a  b\t<#C0OPS|ops> <!here> <!subteam^S01|@sre> *x* `y` ＠ ord\u200b_1",
         "a  b\t<#C0OPS|ops> <!here> <!subteam^S01|@sre> *x* `y` ＠ ord\u200b_1"),
        (f"<@{BOT}> 订单 ord_10290 失败了吗？🙂", "订单 ord_10290 失败了吗？🙂"),
        ("no mention of the bot at all <@U0ALICE99>", "no mention of the bot at all <@U0ALICE99>"),
        (f"<@{BOT}>   ", ""),
        (f"<@{BOT.lower()}> lowercase: not the bot", f"<@{BOT.lower()}> lowercase: not the bot"),
    ],
)  # fmt: skip
def test_only_the_bots_own_mention_is_removed(text: str, query: str) -> None:
    assert own_mention_removed(text, BOT) == query


@pytest.mark.parametrize("bot", [None, "", "U.*", "UDIAG0001>|<@U"])
def test_without_a_usable_bot_id_nothing_is_removed(bot: str | None) -> None:
    text = f"<@{BOT}> ask <@U0ALICE99> about <@U.*>"
    assert own_mention_removed(text, bot) == text


_PIECE = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FFF), max_size=30)


@given(parts=st.lists(_PIECE, min_size=1, max_size=5))
def test_every_character_but_the_mentions_and_their_separators_is_kept(parts: list[str]) -> None:
    # ``parts`` joined by the bot's mention: what is left is the parts in order, each kept
    # whole except whitespace at the edges next to a removed mention.
    parts = [p.replace(f"<@{BOT}", "<@X") for p in parts]
    text = f"<@{BOT}>".join(parts)
    query = own_mention_removed(text, BOT)
    assert "".join(query.split()) == "".join("".join(parts).split())
    for part in parts:
        assert part.strip() in query


# -- end to end ------------------------------------------------------------------------------


def _queries(model: Any) -> list[str]:
    return [
        json.loads(next(m for m in r["messages"] if m["role"] == "user")["content"])["query"]
        for r in model.requests
    ]


def _turn_query(rig: SlackRig) -> str:
    metadata = rig.answers()[-1]["metadata"]
    metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    return str(metadata["event_payload"]["turn"]["query"])


async def test_a_mention_reaches_the_model_as_posted(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    posted = f"<@{BOT}> {OTHERS}\n  <#C0OPS|ops> <!here> ord_10290"
    async with slack_rig(model, tmp_path) as rig:
        assert (await rig.mention(posted)).status == 200
        await rig.handle.manager.wait_idle()
        turn = _turn_query(rig)
    expected = f"{OTHERS}\n  <#C0OPS|ops> <!here> ord_10290"
    assert _queries(model) == [expected]
    assert turn == expected  # the frozen turn of a follow-up, too


async def test_the_bot_user_is_taken_from_the_events_authorizations(
    model_server: StartServer, tmp_path: Path
) -> None:
    async def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
        return AuthorizeResult(
            enterprise_id=enterprise_id, team_id=team_id, bot_token="xoxb-test", bot_id="B0DIAG01"
        )

    model = await model_server([final_step(draft_json(conclusion=False))])
    async with slack_rig(model, tmp_path, authorize=authorize) as rig:
        ts = "1764300000.000900"
        envelope = {
            "token": "legacy",
            "team_id": TEAM_ID,
            "api_app_id": APP_ID,
            "event": {"type": "app_mention", "user": "UHUMAN01", "text": f"<@{BOT}> {OTHERS}",
                      "ts": ts, "channel": ADMIN, "event_ts": ts},
            "type": "event_callback",
            "event_id": "EvAUTHORIZ01",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM_ID, "user_id": BOT, "is_bot": True}],
        }  # fmt: skip
        assert (await rig.dispatch(json.dumps(envelope), "application/json")).status == 200
        await rig.handle.manager.wait_idle()
    assert _queries(model) == [OTHERS]


async def test_replaying_a_persons_mention_keeps_the_other_mentions(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([final_step(draft_json(conclusion=False))])
    async with slack_rig(model, tmp_path) as rig:
        message = rig.slack.seed_message(
            ADMIN, ts="1764400000.700001", user="UHUMAN01", text=f"{OTHERS} <@{BOT}>"
        )
        assert (await rig.replay_shortcut(message)).status == 200
        await rig.handle.manager.wait_idle()
    assert _queries(model) == [OTHERS]
