"""The run's chat memory: the FunctionAgent's default, without a tokenizer it does not need.

Without a memory of its own, a FunctionAgent run builds ``ChatMemoryBuffer.from_defaults(llm=…)``:
a token limit of 0.75 × the model's context window, counted with LlamaIndex's global tiktoken
tokenizer, which ``from_defaults`` loads at once. Loading it (the cl100k ranks, then the
encoder) took ~0.13-0.18 s of CPU at the first run of a process, on the path to the first
model request (issue 23, py-spy). The buffer counts tokens for one decision only: whether the
history must be cut to fit the limit. A tiktoken token always stands for at least one UTF-8 byte
of the text (special tokens for more), so a history whose counted text, in UTF-8 bytes, already
fits the limit is never cut: :class:`RunMemory` returns it whole without counting. Any other
history is counted and cut exactly as the default does, with the same tokenizer, loaded then.
With the default settings (a run carries at most ``DIAG_RUN_CAPACITY_BYTES``, 64 KB, and the
limit is 96,000 tokens) no run loads the tokenizer.
"""

from __future__ import annotations

from typing import Any, cast

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms import LLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.utils import get_tokenizer

__all__ = ["RunMemory", "counted_bytes", "run_memory"]


def _tokens(text: str) -> list[Any]:
    """LlamaIndex's global tokenizer (what the default memory counts with), loaded on first use."""
    return get_tokenizer()(text)


def counted_bytes(messages: list[ChatMessage]) -> int:
    """UTF-8 bytes of the text the buffer counts for ``messages`` (never fewer than its tokens).

    A lone surrogate counts 3 bytes here, as the replacement character tiktoken encodes instead.
    """
    text = " ".join(str(m.content) for m in messages)
    return len(text.encode("utf-8", "surrogatepass"))


class RunMemory(ChatMemoryBuffer):
    """``ChatMemoryBuffer`` that skips counting a history whose bytes already fit the limit."""

    def get(
        self, input: str | None = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """The history as ``ChatMemoryBuffer.get`` returns it (the whole of it when it fits)."""
        history = self.get_all()
        if counted_bytes(history) + initial_token_count <= self.token_limit:
            return list(history)
        return super().get(input, initial_token_count=initial_token_count, **kwargs)


def run_memory(llm: LLM) -> RunMemory:
    """A new memory for one run, limited as the agent's default memory for ``llm``."""
    # from_defaults builds ``cls``: a RunMemory (its annotation says ChatMemoryBuffer)
    return cast(RunMemory, RunMemory.from_defaults(llm=llm, tokenizer_fn=_tokens))
