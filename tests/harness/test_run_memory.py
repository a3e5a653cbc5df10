"""The run's memory returns what the FunctionAgent's default memory returns, and loads the
tokenizer only for a history whose bytes do not already fit its limit (issue 23, cold start)."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms import MockLLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.utils import get_tokenizer

from sre_diag.harness.memory import RunMemory, counted_bytes, run_memory

TEXTS = [
    "",
    "payment-api 5xx since 10:05",
    "连接池耗尽 db pool exhausted",
    "emoji 😀 and a flag 🇩🇪",
    "<|endoftext|><|fim_prefix|> special tokens",
    "lone surrogate \ud800 here",
    "pair \ud83d\ude00 of surrogates",
    "x" * 5000,
    " ".join(str(n) for n in range(2000)),
]


def _history(size: int) -> list[ChatMessage]:
    """A user turn, then tool rounds (assistant + tool), then an answer: ``size`` chars each."""
    history = [ChatMessage(role=MessageRole.USER, content="q " * size)]
    for n in range(3):
        history.append(ChatMessage(role=MessageRole.ASSISTANT, content=f"call {n} " * size))
        history.append(ChatMessage(role=MessageRole.TOOL, content=f"obs {n} 数据 " * size))
    history.append(ChatMessage(role=MessageRole.ASSISTANT, content="answer " * size))
    return history


def _pair(limit: int, history: list[ChatMessage]) -> tuple[ChatMemoryBuffer, RunMemory]:
    default = ChatMemoryBuffer.from_defaults(token_limit=limit, chat_history=history)
    ours = RunMemory.from_defaults(token_limit=limit, chat_history=history)
    return default, ours


@pytest.mark.parametrize("text", TEXTS)
def test_the_bytes_counted_are_never_fewer_than_the_tokens(text: str) -> None:
    message = ChatMessage(role=MessageRole.USER, content=text)
    assert counted_bytes([message]) >= len(get_tokenizer()(str(message.content)))


@pytest.mark.parametrize("limit", [1, 10, 50, 200, 1000, 5000, 100000])
@pytest.mark.parametrize("size", [0, 1, 20, 300])
@pytest.mark.parametrize("initial", [0, 7])
def test_the_history_is_the_default_memory_s(limit: int, size: int, initial: int) -> None:
    default, ours = _pair(limit, _history(size))
    expected: Any
    try:
        expected = default.get(initial_token_count=initial)
    except ValueError as exc:
        with pytest.raises(ValueError, match=str(exc)):
            ours.get(initial_token_count=initial)
        return
    assert ours.get(initial_token_count=initial) == expected


def test_an_empty_history_is_empty() -> None:
    default, ours = _pair(10, [])
    assert ours.get() == default.get() == []


def test_a_history_that_fits_in_bytes_is_not_counted() -> None:
    def refuse(text: str) -> list[int]:
        raise AssertionError("counted")

    history = _history(20)
    memory = RunMemory.from_defaults(token_limit=100000, chat_history=history, tokenizer_fn=refuse)
    assert memory.get() == history
    memory.token_limit = counted_bytes(history) - 1  # one byte short: counted, then refused
    with pytest.raises(AssertionError, match="counted"):
        memory.get()


async def test_the_run_memory_is_limited_as_the_agent_s_default() -> None:
    llm = MockLLM()
    ours = run_memory(llm)
    default = ChatMemoryBuffer.from_defaults(llm=llm)
    assert isinstance(ours, RunMemory)
    assert ours.token_limit == default.token_limit
    history = _history(50)
    await ours.aput_messages(history)
    assert await ours.aget() == history
