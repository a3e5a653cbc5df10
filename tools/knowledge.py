"""``lookup_knowledge``: BM25 search over a folder of Markdown runbooks, Chinese and English.

Why this shape:

* **Sections, not files.** Runbooks are long and the observation is small, so each document is
  split at its headings as LlamaIndex's ``MarkdownNodeParser`` splits (by our linear walk,
  ``runbooks.markdown_sections``; the parser's is quadratic); one hit is one section with
  its title (first H1, else the file stem), heading path and path relative to the folder.
  Reading the folder safely and the heading walk are ``sre_diag.tools.runbooks``.
* **BM25, no embeddings.** Runbook questions are keyword-heavy (service names, error strings,
  config keys), the product must not send text to any network, and BM25 needs no model.
  Retrieval uses ``llama_index.retrievers.bm25.BM25Retriever`` (bm25s underneath).
* **CJK segmentation.** bm25s splits on a regex and would treat a whole Chinese sentence as one
  token. The retriever has no tokenizer hook, so text is pre-segmented here (indexed text and
  query alike) into space-separated tokens and the retriever splits on whitespace. ASCII runs
  become lower-cased alphanumeric words (English stemming and stop words stay with bm25s); CJK
  runs are segmented by ``jieba`` in search mode (``cut_for_search``: words plus their dictionary
  sub-words, HMM off so segmentation depends only on the bundled dictionary — deterministic).
  Measured on the 18 Chinese, English and mixed questions of ``tests/tools/test_knowledge.py``
  over the bundled runbooks (hit@1 and MRR@5 of the expected section):

  ===========================  =======  =====
  CJK segmentation             hit@1    MRR
  ===========================  =======  =====
  jieba ``cut_for_search``     18/18    1.000
  jieba ``lcut``               17/18    0.972
  character bigrams            16/18    0.944
  ===========================  =======  =====

  Bigrams lose where a longer phrase shares characters with a heading (“回滚之后怎么验证”
  ranks the section “回滚之后” above “回滚后验证”); plain ``lcut`` misses one mixed question
  that search mode, with its extra sub-words, gets right.
  Bigrams stay available (``segmenter=bigram_tokens``) and the test suite re-checks that the
  default does at least as well on those questions.
* **Persisted, rebuilt only on change.** The index lives in ``cache_dir/knowledge/<fingerprint>``
  where the fingerprint covers every file's relative path, size, mtime and content hash plus the
  segmenter and index format; an unchanged folder is loaded, never rebuilt. Each call re-stats
  the folder (cheap) so edits are picked up without a restart.
* **Never on the event loop.** Scanning, building, loading and retrieval run in
  ``asyncio.to_thread``; an ``asyncio.Lock`` makes concurrent first calls build only once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from sre_diag.log import log_failure
from sre_diag.tools.base import (
    AdapterCall,
    AdapterErrorCode,
    AdapterResult,
    Failed,
    Ready,
    ToolName,
)
from sre_diag.tools.redact import HEADROOM, redact_prefix
from sre_diag.tools.runbooks import Section, Source, read_sections, runbook_titles, scan
from sre_diag.tools.schemas import KnowledgeInput, KnowledgeItem

__all__ = [
    "INDEX_FORMAT",
    "LABEL_CHARS",
    "MAX_TOP_K",
    "SNIPPET_CHARS",
    "Hit",
    "KnowledgeAdapter",
    "KnowledgeStore",
    "Segmenter",
    "bigram_tokens",
    "jieba_tokens",
    "snippet",
]

logger = logging.getLogger(__name__)

INDEX_FORMAT = "knowledge-index-v1"
MAX_TOP_K = 5
SNIPPET_CHARS = 400
LABEL_CHARS = 200  # title and heading as shown
_TOKEN_PATTERN = r"\S+"  # the retriever only splits what we already segmented
_META_KEYS = ("title", "heading", "path", "body")

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RUNS = re.compile(rf"[{_CJK}]+|[A-Za-z0-9]+")
_IS_CJK = re.compile(rf"[{_CJK}]")
_WS = re.compile(r"\s+")
# Function words that carry no retrieval signal; English ones are removed by bm25s.
_ZH_STOPWORDS = frozenset(
    "的 了 是 在 和 与 及 或 就 都 而 也 要 会 能 把 被 对 从 到 时 吗 呢 啊 吧"
    " 我 我们 你 他 它 这 那 这个 那个 一个 怎么 怎么办 如何"
    " 什么 为什么 哪些 哪个 应该 需要 可以 请 该".split()
)

Segmenter = Callable[[str], list[str]]


class _Jieba:
    """One private, lazily initialised jieba tokenizer.

    A private ``jieba.Tokenizer`` keeps the process-wide default (and any user dictionary someone
    else loads into it) out of our index, and its cache file goes to our cache dir rather than
    the shared temp dir, from which jieba would otherwise ``marshal.load`` a file anyone can
    write.
    """

    def __init__(self) -> None:
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        self.cache_dir: Path | None = None

    def cut(self, text: str) -> list[str]:
        tokenizer = self._tokenizer or self._initialise()
        return list(tokenizer.cut_for_search(text, HMM=False))

    def _initialise(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                import jieba  # with its dictionary: only once there is a runbook to segment

                jieba.setLogLevel(logging.WARNING)
                tokenizer = jieba.Tokenizer()
                if self.cache_dir is not None:
                    self.cache_dir.mkdir(parents=True, exist_ok=True)
                    tokenizer.tmp_dir = str(self.cache_dir)
                tokenizer.initialize()
                self._tokenizer = tokenizer
            return self._tokenizer


_JIEBA = _Jieba()


def _segment(text: str, cjk: Callable[[str], list[str]]) -> list[str]:
    tokens: list[str] = []
    for run in _RUNS.findall(text):
        if _IS_CJK.match(run):
            tokens.extend(t for t in cjk(run) if t.strip() and t not in _ZH_STOPWORDS)
        else:
            tokens.append(run.lower())
    return tokens


def jieba_tokens(text: str) -> list[str]:
    """Segment CJK runs with jieba search mode; ASCII runs become lower-cased words."""
    return _segment(text, _JIEBA.cut)


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def bigram_tokens(text: str) -> list[str]:
    """Segment CJK runs into overlapping character bigrams (dictionary-free alternative)."""
    return _segment(text, _bigrams)


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved section and its BM25 score."""

    section: Section
    score: float


class _Index:
    """A built or loaded BM25 index over sections; safe to search from several threads."""

    def __init__(self, fingerprint: str, retriever: Any, segmenter: Segmenter) -> None:
        self.fingerprint = fingerprint
        self._retriever = retriever
        self._segmenter = segmenter
        self._lock = threading.Lock()

    @classmethod
    def build(cls, fingerprint: str, sections: list[Section], segmenter: Segmenter) -> _Index:
        from llama_index.retrievers.bm25 import BM25Retriever  # bm25s: only with runbooks

        nodes = [_to_node(section, segmenter) for section in sections]
        retriever = BM25Retriever(
            nodes=nodes,
            similarity_top_k=min(MAX_TOP_K, len(nodes)),
            token_pattern=_TOKEN_PATTERN,
            language="en",
        )
        return cls(fingerprint, retriever, segmenter)

    @classmethod
    def load(cls, fingerprint: str, directory: Path, segmenter: Segmenter) -> _Index:
        import bm25s
        from llama_index.retrievers.bm25 import BM25Retriever

        bm25 = bm25s.BM25.load(str(directory), load_corpus=True, show_progress=False)
        retriever = BM25Retriever(
            existing_bm25=bm25,
            similarity_top_k=min(MAX_TOP_K, int(bm25.scores["num_docs"])),
            token_pattern=_TOKEN_PATTERN,
        )
        return cls(fingerprint, retriever, segmenter)

    def persist(self, directory: Path) -> None:
        self._retriever.persist(str(directory), show_progress=False)

    def search(self, query: str, top_k: int) -> list[Hit]:
        tokens = self._segmenter(query)
        if not tokens:
            return []
        with self._lock:
            found: list[NodeWithScore] = self._retriever.retrieve(QueryBundle(" ".join(tokens)))
        hits = [Hit(_from_node(hit.node), float(hit.score or 0.0)) for hit in found]
        return [hit for hit in hits if hit.score > 0][:top_k]


def _to_node(section: Section, segmenter: Segmenter) -> TextNode:
    text = " ".join(segmenter(f"{section.title}\n{section.heading}\n{section.body}"))
    return TextNode(
        text=text,
        metadata={key: getattr(section, key) for key in _META_KEYS},
        excluded_embed_metadata_keys=list(_META_KEYS),
        excluded_llm_metadata_keys=list(_META_KEYS),
    )


def _from_node(node: Any) -> Section:
    meta = node.metadata
    return Section(**{key: str(meta[key]) for key in _META_KEYS})


def snippet(body: str, limit: int = SNIPPET_CHARS) -> str:
    """Bound, redact, collapse whitespace, then cut to ``limit`` with an ellipsis.

    Only a bounded prefix is redacted (runs of whitespace collapse, hence the extra room) and
    the final cut falls on redacted text, so no secret is cut in half and leaks a prefix
    (:func:`sre_diag.tools.redact.redact_prefix`).
    """
    redacted, cut = redact_prefix(body, 4 * limit + HEADROOM)
    text = _WS.sub(" ", redacted).strip()
    return text if len(text) <= limit and not cut else text[: limit - 1].rstrip() + "…"


def _project(hit: Hit) -> KnowledgeItem:
    return KnowledgeItem(
        title=snippet(hit.section.title, LABEL_CHARS),
        heading=snippet(hit.section.heading, LABEL_CHARS),
        path=hit.section.path,
        score=round(hit.score, 3),
        snippet=snippet(hit.section.body),
    )


def _answer(index: _Index, query: str, top_k: int) -> list[KnowledgeItem]:
    return [_project(hit) for hit in index.search(query, top_k)]


class KnowledgeStore:
    """Owns the on-disk cache and the current index; all methods are blocking (run in threads)."""

    def __init__(self, folder: Path, cache_dir: Path, segmenter: Segmenter) -> None:
        self.folder = folder
        self.cache_root = cache_dir / "knowledge"
        self.segmenter = segmenter
        self.builds = 0
        self.loads = 0
        self._sources: tuple[Source, ...] | None = None
        self._index: _Index | None = None
        self._empty = False

    @property
    def fingerprint(self) -> str | None:
        """The fingerprint of the index in use, ``None`` before the first call."""
        return self._index.fingerprint if self._index else None

    def refresh(self) -> _Index | None:
        """Return an index matching the folder now; ``None`` when there are no sections."""
        sources = scan(self.folder)
        if sources == self._sources and (self._index is not None or self._empty):
            return self._index
        sections, content = read_sections(self.folder, sources)
        key = hashlib.sha256(
            f"{INDEX_FORMAT}\n{self.segmenter.__name__}\n{content}".encode()
        ).hexdigest()[:32]
        self._index = self._load_or_build(key, sections) if sections else None
        self._empty = not sections
        self._sources = sources
        return self._index

    def _load_or_build(self, key: str, sections: list[Section]) -> _Index:
        directory = self.cache_root / key
        if directory.is_dir():
            try:
                index = _Index.load(key, directory, self.segmenter)
            except (OSError, ValueError, KeyError) as exc:
                logger.warning("knowledge cache %s unreadable (%s); rebuilding", key, type(exc))
            else:
                self.loads += 1
                return index
        index = _Index.build(key, sections, self.segmenter)
        self.builds += 1
        self._persist(index, directory)
        return index

    def _persist(self, index: _Index, directory: Path) -> None:
        """Write to a temporary sibling and rename, so readers never see a partial index."""
        staging = directory.with_name(f".{directory.name}.{uuid.uuid4().hex}.tmp")
        try:
            staging.mkdir(parents=True)
            index.persist(staging)
            if directory.exists():
                shutil.rmtree(directory)
            staging.rename(directory)
        except OSError as exc:
            logger.warning("knowledge index not persisted (%s); using it in memory", type(exc))
            shutil.rmtree(staging, ignore_errors=True)


class KnowledgeAdapter:
    """The ``lookup_knowledge`` adapter over a runbook folder."""

    def __init__(
        self,
        knowledge_dir: Path | None,
        cache_dir: Path,
        *,
        segmenter: Segmenter = jieba_tokens,
        rescan_interval_seconds: float = 5.0,
    ) -> None:
        # No folder (DIAG_KNOWLEDGE_DIR unset): every lookup answers NOT_CONFIGURED.
        self.store = (
            KnowledgeStore(knowledge_dir, cache_dir, segmenter)
            if knowledge_dir is not None
            else None
        )
        _JIEBA.cache_dir = _JIEBA.cache_dir or cache_dir / "jieba"
        self._lock = asyncio.Lock()
        # Re-scanning a large folder costs ~20 ms (bench); within this interval the last
        # checked index is used as is, and a changed file is picked up on the next check.
        self._rescan_interval = rescan_interval_seconds
        self._checked_at: float | None = None
        self._current: _Index | None = None

    @property
    def tool(self) -> ToolName:
        return ToolName.LOOKUP_KNOWLEDGE

    async def invoke(self, call: AdapterCall[KnowledgeInput]) -> AdapterResult:
        """Find the ``top_k`` best sections; an unreadable folder is ``UNAVAILABLE``; no folder
        configured is ``NOT_CONFIGURED``."""
        if self.store is None:
            return Failed(AdapterErrorCode.NOT_CONFIGURED)
        try:
            index = await self._index()
        except OSError as exc:
            log_failure(logger, logging.WARNING, "knowledge folder unavailable (%s)", exc=exc)
            return Failed(AdapterErrorCode.UNAVAILABLE)
        if index is None:
            return Ready(items=[])
        # Retrieval and projection (redaction is CPU work) in a worker thread: the loop only
        # ever waits for one short, linear regex call on bounded text.
        items = await asyncio.to_thread(_answer, index, call.input.query, call.input.top_k)
        return Ready(items=items)

    def _fresh(self) -> bool:
        checked = self._checked_at
        return checked is not None and time.monotonic() - checked < self._rescan_interval

    async def _index(self) -> _Index | None:
        if self._fresh():
            return self._current
        async with self._lock:
            if not self._fresh() and self.store is not None:
                self._current = await asyncio.to_thread(self.store.refresh)
                self._checked_at = time.monotonic()
            return self._current

    async def warm(self) -> None:
        """Build or load the index now (at startup) instead of on the first question."""
        try:
            await self._index()
        except OSError as exc:
            log_failure(
                logger, logging.WARNING, "knowledge folder unavailable at startup (%s)", exc=exc
            )

    async def catalogue(self, limit: int) -> list[str] | None:
        """Up to ``limit + 1`` runbook titles (first H1, else the file stem), in path order, for
        the tool description; ``None`` when no folder is configured. Raises ``OSError`` when the
        folder is unreadable. Read in a worker thread; nothing but titles leaves."""
        if self.store is None:
            return None
        return await asyncio.to_thread(runbook_titles, self.store.folder, limit + 1)

    async def aclose(self) -> None:
        """Nothing to release: the index is plain memory plus files."""
