"""The scripted model double fails a run that disagrees with its script, with a typed error
(STYLE 5): an extra request is ``UnexpectedModelCall``, an unused step ``UnconsumedModelSteps``;
both are ``AssertionError``s under the product's one root, so a test fails on them as before."""

from __future__ import annotations

import httpx
import pytest

from sre_diag.doubles.errors import ModelScriptError, UnconsumedModelSteps, UnexpectedModelCall
from sre_diag.doubles.scripted_model import ModelStep, ScriptedModelServer
from sre_diag.errors import DiagError

_BODY = {"model": "scripted-model", "messages": [{"role": "user", "content": "ping"}]}


async def _ask(server: ScriptedModelServer, times: int) -> list[int]:
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        return [
            (await client.post("/chat/completions", json=_BODY)).status_code for _ in range(times)
        ]


async def test_a_script_used_exactly_is_complete() -> None:
    async with ScriptedModelServer([ModelStep(content="one"), ModelStep(content="two")]) as server:
        assert await _ask(server, 2) == [200, 200]
    server.assert_complete()


async def test_an_extra_request_is_an_unexpected_model_call() -> None:
    async with ScriptedModelServer([ModelStep(content="only")]) as server:
        assert await _ask(server, 3) == [200, 500, 500]
    with pytest.raises(UnexpectedModelCall) as raised:
        server.assert_complete()
    assert raised.value.extra == 2
    assert str(raised.value) == "model server got 2 unexpected extra request(s)"


async def test_an_unused_step_is_unconsumed() -> None:
    steps = [ModelStep(content="one"), ModelStep(content="two"), ModelStep(content="three")]
    async with ScriptedModelServer(steps) as server:
        assert await _ask(server, 1) == [200]
    with pytest.raises(UnconsumedModelSteps) as raised:
        server.assert_complete()
    assert (raised.value.steps, raised.value.requested) == (3, 1)
    assert str(raised.value) == "model server script has 3 steps, but 1 were requested"


@pytest.mark.parametrize("cls", [UnexpectedModelCall, UnconsumedModelSteps])
def test_script_errors_fail_a_test_and_sit_under_the_root(cls: type[ModelScriptError]) -> None:
    assert issubclass(cls, AssertionError)
    assert issubclass(cls, ModelScriptError)
    assert issubclass(cls, DiagError)
