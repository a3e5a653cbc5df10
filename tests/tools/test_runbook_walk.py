"""The runbook heading walk (``sre_diag.tools.runbooks.markdown_sections``) splits a page exactly
as LlamaIndex's ``MarkdownNodeParser`` does, and in linear time.

The parser links every section to its source document, and that link hashes the whole page:
once per section, so a runbook of many short sections (attacker data: anyone who can commit a
runbook) cost minutes of CPU at indexing and, in the Slack Evidence view, on the event loop.
The walk is ours now; this file pins it to the parser's split (a canary when LlamaIndex
changes its rules) and times it per section.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.node_parser import MarkdownNodeParser
from llama_index.core.schema import Document

from sre_diag.slack.links import page_anchors
from sre_diag.tools.runbooks import heading_chains, markdown_sections

SEPARATOR = "\x1f"
PARSER = MarkdownNodeParser(header_path_separator=SEPARATOR)

LINES = st.one_of(
    st.sampled_from(
        [
            "", " ", "# Title", "## Mitigation", "### Step", "#### Deep", "##", "## ", "#no-space",
            "##\tTab", "```", "  ```sql", "````", "SELECT 1;", "# in code?", "text", "\r",
            "## Windows\r", "#  two spaces", "## a\x1fb", "##  ", "- item", "## 连接池", "\u2028",
        ]
    ),
    st.text(alphabet=st.sampled_from("#` \tab\r\n连"), max_size=12),
)  # fmt: skip


def _theirs(text: str) -> list[tuple[str, str]]:
    nodes = PARSER.get_nodes_from_node(Document(text=text))
    out = []
    for node in nodes:
        path = node.metadata["header_path"]
        inner = "" if path == SEPARATOR else path[1:-1]
        out.append((inner, node.get_content()))
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(LINES, max_size=40))
def test_the_walk_splits_like_the_llamaindex_parser(lines: list[str]) -> None:
    text = "\n".join(lines)
    assert list(markdown_sections(text)) == _theirs(text)


def test_a_real_runbook_splits_like_the_parser() -> None:
    text = (
        "# payment-api runbook\n\nIntro.\n\n## db pool exhausted\n\nCheck `waiting`.\n\n"
        "```sql\n# not a heading\nSELECT 1;\n```\n\n### Mitigation\n\nRestart.\n\n"
        "## Mitigation\n\nAgain.\n\n# Appendix\n\n#### Deep\n\nx\n"
    )
    assert list(markdown_sections(text)) == _theirs(text)
    chains = [chain for chain, _, _ in heading_chains("pay.en.md", text)]
    assert chains[:3] == [
        "payment-api runbook",
        "db pool exhausted",
        "db pool exhausted > Mitigation",
    ]


def _short_sections(sections: int) -> str:
    return "".join(
        f"## Step {i}\n\nrestart pod-{i} and check ord_{i}.\n\n" for i in range(sections)
    )


def _under_a_long_heading(sections: int) -> str:
    # one long parent heading over many short children: each child's chain starts with it
    return "# " + "x" * (sections * 50) + "\n" + "## a\n" * sections


def _seconds(text: str) -> float:
    gc.collect()
    started = time.perf_counter()
    anchors = page_anchors("big.en.md", text)
    elapsed = time.perf_counter() - started
    assert anchors
    return elapsed


@pytest.mark.solo
@pytest.mark.parametrize("page", [_short_sections, _under_a_long_heading])
def test_the_walk_costs_the_same_per_section_on_a_long_page(page: Callable[[int], str]) -> None:
    """The parser's walk took 1.4 s for 6 000 short sections and 5.2 s for 12 000 (quadratic),
    and joining a long parent heading again for each child was quadratic too (2 MB: 58 s): a
    page 8 times longer must cost about 8 times as much, not 64."""
    small = min(_seconds(page(3_000)) for _ in range(3))
    large = min(_seconds(page(24_000)) for _ in range(2))
    assert large < max(small, 0.01) * 8 * 2.5, (small, large)
