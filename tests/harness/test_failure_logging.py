"""The one failure-logging helper (STYLE 11): a handled failure is one line with its stable short
reason, the exception type's name; never its message (which may carry a secret) nor a traceback."""

from __future__ import annotations

import logging

import pytest

from sre_diag.log import failure_reason, log_failure

_SECRET = "mysql://diag:hunter2@db/prod"


def _fail_here(logger: logging.Logger) -> None:
    try:
        raise ConnectionRefusedError(_SECRET)
    except ConnectionRefusedError as exc:
        log_failure(logger, logging.WARNING, "job %s not started: %s", "1-0", exc=exc)


def test_the_reason_is_the_type_name() -> None:
    assert failure_reason(TimeoutError("slow " + _SECRET)) == "TimeoutError"


def test_one_line_with_the_reason_and_never_the_message(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tests.failure_logging")
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        _fail_here(logger)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "job 1-0 not started: ConnectionRefusedError"
    assert record.exc_info is None
    assert _SECRET not in caplog.text
    # The line is attributed to the caller, not to the helper.
    assert record.funcName == "_fail_here"
