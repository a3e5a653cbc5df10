"""``lookup_knowledge``: BM25 search over a folder of Markdown runbooks, Chinese and English.

Why this shape:

* **Sections, not files.** Runbooks are long and the observation is small, so each document is
  split at its headings with LlamaIndex's ``MarkdownNodeParser``; one hit is one section with
  its title (first H1, else the file stem), heading path and path relative to the folder.
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
import json
import logging
import os
import re
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import jieba
from llama_index.core.node_parser import MarkdownNodeParser
from llama_index.core.schema import Document, NodeWithScore, QueryBundle, TextNode
from llama_index.retrievers.bm25 import BM25Retriever

from plugin.tools.base import AdapterCall, AdapterErrorCode, AdapterResult, Failed, Ready, ToolName
from plugin.tools.redact import HEADROOM, redact_prefix
from plugin.tools.schemas import KnowledgeInput, KnowledgeItem

logger = logging.getLogger(__name__)

INDEX_FORMAT = "knowledge-index-v1"
MAX_TOP_K = 5
SNIPPET_CHARS = 400
LABEL_CHARS = 200  # title and heading as shown
# Raw characters of a title or heading kept in the index: far more than is ever shown
# (LABEL_CHARS + HEADROOM), so this cut is never the one a secret could straddle visibly.
STORED_LABEL_CHARS = 4096
MAX_RUNBOOK_BYTES = 4 * 1024 * 1024  # a larger file is skipped (logged), not indexed
HEADING_SEPARATOR = " > "
_PATH_SEPARATOR = "\x1f"  # header path separator inside the parser; never in a heading
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
class Section:
    """One heading-delimited part of a runbook."""

    title: str
    heading: str
    path: str
    body: str


@dataclass(frozen=True, slots=True)
class _Source:
    rel: str
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved section and its BM25 score."""

    section: Section
    score: float


# Open flags of a runbook read: never follow a link, never wait for a FIFO's writer, never take
# a terminal (as the JSONL audit writer and the log folder reader open their files).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


def _runbook_files(root: Path) -> Iterator[Path]:
    """``*.md`` entries under ``root``, never entering a symlinked directory."""
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in filenames:
            if name.endswith(".md"):
                yield Path(directory, name)


def _served(root: Path, file: Path) -> os.stat_result | None:
    """The stat of ``file`` if it may be served: a regular file whose real path is inside the
    (real) runbook folder. A symlink leading outside, a dangling one, a FIFO or device is not."""
    try:
        real = file.resolve(strict=True)
        info = real.stat()
    except (OSError, RuntimeError):  # dangling, looping, vanished
        return None
    if not real.is_relative_to(root) or not stat.S_ISREG(info.st_mode):
        return None
    return info


def _scan(folder: Path) -> tuple[_Source, ...]:
    """List the runbooks (recursively ``*.md``) cheaply; raises ``OSError`` if unreadable.

    Only regular files inside the folder are listed: symlinks leading outside it are skipped,
    symlinked directories are not entered, and the folder itself may be a symlink.
    """
    if not folder.is_dir():
        raise FileNotFoundError(folder)
    root = folder.resolve(strict=True)
    found = []
    for file in _runbook_files(root):
        info = _served(root, file)
        if info is not None:
            rel = file.relative_to(root).as_posix()
            found.append(_Source(rel, info.st_size, info.st_mtime_ns))
    return tuple(sorted(found, key=lambda s: s.rel))


def _heading_text(line: str, level: int | None = None) -> str | None:
    """The text of an ATX heading line (``## Text ##``), ``None`` if it is not one; with
    ``level``, only headings of that level. Plain string work: no pattern can backtrack."""
    hashes = len(line) - len(line.lstrip("#"))
    if not 1 <= hashes <= 6 or (level is not None and hashes != level):
        return None
    rest = line[hashes:]
    if rest and not rest[0].isspace():
        return None
    text = rest.strip()
    closed = text.rstrip("#")
    if closed != text and (not closed or closed[-1].isspace()):
        text = closed.rstrip()
    return text or None


def _title_of(text: str, stem: str) -> str:
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and (title := _heading_text(line, level=1)):
            return title[:STORED_LABEL_CHARS]
    return stem


def heading_chains(rel: str, text: str) -> Iterator[tuple[str, str | None, str]]:
    """Each part of a runbook in page order: its stored heading chain, its own heading line's
    text (``None`` for text before the first heading) and its body."""
    title = _title_of(text, Path(rel).stem)
    parser = MarkdownNodeParser(header_path_separator=_PATH_SEPARATOR)
    for node in parser.get_nodes_from_documents([Document(text=text)]):
        content = node.get_content()
        first, _, rest = content.partition("\n")
        own: str | None = None
        if first.startswith("#") and first.lstrip("#")[:1].isspace():
            parents = [p for p in node.metadata["header_path"].split(_PATH_SEPARATOR) if p]
            own = first.lstrip("#").strip()
            path = [*parents, own]
            body = rest.strip()
        else:
            path, body = [], content.strip()
        if path and path[0] == title and len(path) > 1:
            path = path[1:]
        yield (HEADING_SEPARATOR.join(path) or title)[:STORED_LABEL_CHARS], own, body


def read_runbook(folder: Path, rel: str) -> str | None:
    """The text of one served runbook of ``folder`` (the same checks as indexing), or None."""
    try:
        raw = _read_served(folder.resolve(strict=True), rel)
    except (OSError, RuntimeError):
        return None
    return _text_of(raw) if raw is not None else None


def _split_sections(rel: str, text: str) -> list[Section]:
    title = _title_of(text, Path(rel).stem)
    return [
        Section(title=title, heading=heading, path=rel, body=body)
        for heading, _, body in heading_chains(rel, text)
        if body
    ]


def _read_served(root: Path, rel: str) -> bytes | None:
    """The bytes of a listed runbook, decided on the open descriptor (the file may have been
    swapped for a symlink, a FIFO or a device since the scan, or between any check and the
    open); ``None`` if it is no longer served or too large."""
    try:
        real = (root / rel).resolve(strict=True)
    except (OSError, RuntimeError):  # vanished, dangling, looping
        return None
    if real == root or not real.is_relative_to(root):
        return None
    fd = _open_inside(root, real.relative_to(root).parts)
    return _read_regular(fd) if fd is not None else None


def _open_inside(root: Path, parts: tuple[str, ...]) -> int | None:
    """A descriptor of ``root/parts`` reached without following any link: each directory opened
    with ``O_NOFOLLOW`` relative to the one before, the file with ``O_NOFOLLOW | O_NONBLOCK``
    (a FIFO never blocks the open, a terminal is never taken); ``None`` if anything refuses."""
    dirs: list[int] = []
    try:
        dirs.append(os.open(root, _DIR_FLAGS))
        for part in parts[:-1]:
            dirs.append(os.open(part, _DIR_FLAGS, dir_fd=dirs[-1]))
        return os.open(parts[-1], _FILE_FLAGS, dir_fd=dirs[-1])
    except OSError:  # a link (ELOOP/ENOTDIR), gone, a FIFO without writer (ENXIO), denied…
        return None
    finally:
        for opened in dirs:
            os.close(opened)


def _read_regular(fd: int) -> bytes | None:
    """The content behind ``fd`` if ``fstat`` says a regular file of at most
    ``MAX_RUNBOOK_BYTES``, read bounded (it may still grow); closes ``fd``."""
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RUNBOOK_BYTES:
            return None
        raw = handle.read(MAX_RUNBOOK_BYTES + 1)
    return raw if len(raw) <= MAX_RUNBOOK_BYTES else None


def _text_of(raw: bytes) -> str | None:
    """The runbook as text; ``None`` for a binary file (a NUL byte, or not valid UTF-8)."""
    if b"\x00" in raw:
        return None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def _read(folder: Path, sources: tuple[_Source, ...]) -> tuple[list[Section], str]:
    """Read and split every runbook; return the sections and a digest of paths, sizes, mtimes
    and contents. Binary, oversized or no longer served files are skipped (and logged)."""
    root = folder.resolve(strict=True)
    digest = hashlib.sha256()
    sections: list[Section] = []
    skipped = 0
    for source in sources:
        raw = _read_served(root, source.rel)
        text = _text_of(raw) if raw is not None else None
        content = hashlib.sha256(raw).hexdigest() if raw is not None else "skipped"
        record = [source.rel, source.size, source.mtime_ns, content]
        digest.update(json.dumps(record).encode() + b"\n")
        if text is None:
            skipped += 1
            continue
        sections.extend(_split_sections(source.rel, text))
    if skipped:
        logger.warning("skipped %d runbook files (binary, oversized or moved)", skipped)
    return sections, digest.hexdigest()


class _Index:
    """A built or loaded BM25 index over sections; safe to search from several threads."""

    def __init__(self, fingerprint: str, retriever: Any, segmenter: Segmenter) -> None:
        self.fingerprint = fingerprint
        self._retriever = retriever
        self._segmenter = segmenter
        self._lock = threading.Lock()

    @classmethod
    def build(cls, fingerprint: str, sections: list[Section], segmenter: Segmenter) -> _Index:
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
    (:func:`plugin.tools.redact.redact_prefix`).
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
        self._sources: tuple[_Source, ...] | None = None
        self._index: _Index | None = None
        self._empty = False

    @property
    def fingerprint(self) -> str | None:
        """The fingerprint of the index in use, ``None`` before the first call."""
        return self._index.fingerprint if self._index else None

    def refresh(self) -> _Index | None:
        """Return an index matching the folder now; ``None`` when there are no sections."""
        sources = _scan(self.folder)
        if sources == self._sources and (self._index is not None or self._empty):
            return self._index
        sections, content = _read(self.folder, sources)
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
            logger.warning("knowledge folder unavailable (%s)", type(exc).__name__)
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
            logger.warning("knowledge folder unavailable at startup (%s)", type(exc).__name__)

    async def catalogue(self, limit: int) -> list[str] | None:
        """Up to ``limit + 1`` runbook titles (first H1, else the file stem), in path order, for
        the tool description; ``None`` when no folder is configured. Raises ``OSError`` when the
        folder is unreadable. Read in a worker thread; nothing but titles leaves."""
        if self.store is None:
            return None
        return await asyncio.to_thread(runbook_titles, self.store.folder, limit + 1)

    async def aclose(self) -> None:
        """Nothing to release: the index is plain memory plus files."""


def iter_sections(folder: Path) -> Iterator[Section]:
    """Every section of every runbook in ``folder`` (for tooling and tests)."""
    sections, _ = _read(folder, _scan(folder))
    yield from sections


def runbook_titles(folder: Path, limit: int) -> list[str]:
    """The titles of the first ``limit`` served runbooks of ``folder`` (path order)."""
    sources = _scan(folder)
    root = folder.resolve(strict=True)
    titles: list[str] = []
    for source in sources:
        if len(titles) >= limit:
            break
        raw = _read_served(root, source.rel)
        text = _text_of(raw) if raw is not None else None
        if text is not None:
            titles.append(_title_of(text, Path(source.rel).stem))
    return titles
