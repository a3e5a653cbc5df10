"""Library chatter only at DEBUG (issue 23): bm25s sets its own logger to DEBUG when it is
imported, after the process configured its logging; its "Building index" lines still stay out
of stderr unless ``DIAG_LOG_LEVEL=DEBUG``."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from sre_diag.log import build_handler, configure_logging


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    library = logging.getLogger("bm25s")
    library_level = library.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        library.setLevel(library_level)


def _emitted(library_level: int) -> str:
    stream = io.StringIO()
    handler = build_handler("text", stream, library_level=library_level)
    logger = logging.getLogger("bm25s")
    logger.setLevel(logging.DEBUG)  # what bm25s does on import
    logger.addHandler(handler)
    try:
        logger.debug("Building index from IDs objects")
        logger.warning("a real warning")
        logging.getLogger("sre_diag.harness.run").debug("own debug line")
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_library_debug_lines_are_dropped_unless_debug() -> None:
    quiet = _emitted(logging.WARNING)
    assert "Building index" not in quiet and "a real warning" in quiet
    assert "Building index" in _emitted(logging.DEBUG)


@pytest.mark.usefixtures("restored_logging")
def test_configure_logging_holds_bm25s_at_warning_unless_debug() -> None:
    configure_logging("INFO")
    assert not logging.getLogger("bm25s").isEnabledFor(logging.INFO)
    configure_logging("DEBUG")
    assert logging.getLogger("bm25s").isEnabledFor(logging.DEBUG)


@pytest.mark.usefixtures("restored_logging")
def test_bm25s_index_build_is_silent_at_info(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO")
    import bm25s  # sets its logger to DEBUG, after the configuration above

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(["db pool exhausted", "disk full"], show_progress=False),
                    show_progress=False)  # fmt: skip
    assert "Building index" not in capsys.readouterr().err
