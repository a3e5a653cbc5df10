"""Reading a runbook folder: which Markdown files may be served, read without following a link
or blocking on a FIFO, and each runbook walked heading by heading into sections.

* **Only what is inside.** Only regular ``*.md`` files whose real path is inside the folder are
  listed (:func:`scan`): symlinks leading outside are skipped, symlinked directories are not
  entered, the folder itself may be a symlink. Each read decides again on the open descriptor
  (the file may have been swapped since the scan): every directory opened ``O_NOFOLLOW``
  relative to the one before, the file ``O_NOFOLLOW | O_NONBLOCK``, ``fstat`` says a regular
  file of at most ``MAX_RUNBOOK_BYTES``; binary files (a NUL byte, not UTF-8) are skipped.
* **Sections.** Each document is split at its headings with LlamaIndex's
  ``MarkdownNodeParser`` (:func:`heading_chains`); a section carries its title (first H1, else
  the file stem), heading path (``HEADING_SEPARATOR``-joined) and path relative to the folder.

The index over the sections (BM25, segmentation, the cache) is ``sre_diag.tools.knowledge``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sre_diag.tools.pseudo_fs import pseudo_filesystem

__all__ = [
    "HEADING_SEPARATOR",
    "MAX_RUNBOOK_BYTES",
    "STORED_LABEL_CHARS",
    "Section",
    "Source",
    "heading_chains",
    "iter_sections",
    "markdown_sections",
    "read_runbook",
    "read_sections",
    "runbook_titles",
    "scan",
]

logger = logging.getLogger(__name__)

# Raw characters of a title or heading kept in the index: far more than is ever shown
# (LABEL_CHARS + HEADROOM), so this cut is never the one a secret could straddle visibly.
STORED_LABEL_CHARS = 4096
MAX_RUNBOOK_BYTES = 4 * 1024 * 1024  # a larger file is skipped (logged), not indexed
HEADING_SEPARATOR = " > "
_PATH_SEPARATOR = "\x1f"  # header path separator of the walk (as in LlamaIndex's parser)


@dataclass(frozen=True, slots=True)
class Section:
    """One heading-delimited part of a runbook."""

    title: str
    heading: str
    path: str
    body: str


@dataclass(frozen=True, slots=True)
class Source:
    """A listed runbook: its path relative to the folder, its size and mtime at the scan."""

    rel: str
    size: int
    mtime_ns: int


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


def scan(folder: Path) -> tuple[Source, ...]:
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
            found.append(Source(rel, info.st_size, info.st_mtime_ns))
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


def title_of(text: str, stem: str) -> str:
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and (title := _heading_text(line, level=1)):
            return title[:STORED_LABEL_CHARS]
    return stem


_HEADER = re.compile(r"^(#+)\s(.*)")


def _parents(stack: list[list[Any]]) -> str:
    """The joined path of the top section's parents; each entry's path is joined once."""
    if len(stack) < 2:
        return ""
    first = len(stack) - 2
    while first > 0 and stack[first][2] is None:
        first -= 1
    for i in range(first, len(stack) - 1):
        if stack[i][2] is None:
            above = stack[i - 1][2] + _PATH_SEPARATOR if i else ""
            stack[i][2] = above + stack[i][1]
    path: str = stack[-2][2]
    return path


def markdown_sections(text: str) -> Iterator[tuple[str, str]]:
    """The sections of a Markdown page in order, each with its parents' header path (joined by
    the parser separator) — the split of LlamaIndex's ``MarkdownNodeParser.get_nodes_from_node``,
    line for line (``tests/tools/test_runbook_walk.py`` compares them on generated pages), in
    linear time: that parser hashes the whole page once per section (its source-node link), so
    a 4 MB page of short sections cost minutes of CPU (60 000 headings: 127 s)."""
    section: list[str] = []
    # [level, heading, its whole path or None]: a path is joined once, when a section first
    # needs it as its parents' (a long heading over many short sections is not copied again).
    stack: list[list[Any]] = []
    in_code = False

    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            section.append(line + "\n")
            continue
        header = None if in_code else _HEADER.match(line)
        if header is None:
            section.append(line + "\n")
            continue
        if (done := "".join(section).strip()):
            yield _parents(stack), done
        level, heading = len(header.group(1)), header.group(2)
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append([level, heading, None])
        section = ["#" * level + f" {heading}\n"]
    if (done := "".join(section).strip()):
        yield _parents(stack), done


def heading_chains(rel: str, text: str) -> Iterator[tuple[str, str | None, str]]:
    """Each part of a runbook in page order: its stored heading chain, its own heading line's
    text (``None`` for text before the first heading) and its body."""
    title = title_of(text, Path(rel).stem)
    last: tuple[str, str | None] | None = None  # (header path, its stored prefix): siblings
    for header_path, content in markdown_sections(text):
        first, _, rest = content.partition("\n")
        if not (first.startswith("#") and first.lstrip("#")[:1].isspace()):
            yield title[:STORED_LABEL_CHARS], None, content.strip()
            continue
        own = first.lstrip("#").strip()
        if last is None or last[0] is not header_path:
            last = (header_path, _stored_prefix(header_path, title))
        prefix = last[1]
        label = own if prefix is None else f"{prefix}{HEADING_SEPARATOR}{own}"
        yield (label or title)[:STORED_LABEL_CHARS], own, rest.strip()


def _stored_prefix(header_path: str, title: str) -> str | None:
    """The stored chain of a section's parents (the page title dropped when it leads), cut to
    what a label can show; None when there are none. Computed once per run of siblings."""
    parents = [p for p in header_path.split(_PATH_SEPARATOR) if p]
    if parents and parents[0] == title:
        parents = parents[1:]
    if not parents:
        return None
    return HEADING_SEPARATOR.join(parents)[: STORED_LABEL_CHARS + 1]


def read_runbook(folder: Path, rel: str) -> str | None:
    """The text of one served runbook of ``folder`` (the same checks as indexing), or None."""
    try:
        raw = _read_served(folder.resolve(strict=True), rel)
    except (OSError, RuntimeError):
        return None
    return _text_of(raw) if raw is not None else None


def _split_sections(rel: str, text: str) -> list[Section]:
    title = title_of(text, Path(rel).stem)
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
    ``MAX_RUNBOOK_BYTES``, not on a kernel pseudo file system (a folder that is itself a link
    into ``/proc`` or ``/sys``), read bounded (it may still grow); closes ``fd``."""
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RUNBOOK_BYTES:
            return None
        if pseudo_filesystem(fd) is not None:
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


def read_sections(folder: Path, sources: tuple[Source, ...]) -> tuple[list[Section], str]:
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


def iter_sections(folder: Path) -> Iterator[Section]:
    """Every section of every runbook in ``folder`` (for tooling and tests)."""
    sections, _ = read_sections(folder, scan(folder))
    yield from sections


def runbook_titles(folder: Path, limit: int) -> list[str]:
    """The titles of the first ``limit`` served runbooks of ``folder`` (path order)."""
    sources = scan(folder)
    root = folder.resolve(strict=True)
    titles: list[str] = []
    for source in sources:
        if len(titles) >= limit:
            break
        raw = _read_served(root, source.rel)
        text = _text_of(raw) if raw is not None else None
        if text is not None:
            titles.append(title_of(text, Path(source.rel).stem))
    return titles
