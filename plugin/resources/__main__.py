"""``python -m sre_diag.resources NAME``: where the installed package keeps one of its data sets.

Prints one absolute path: ``evals`` (the bundled eval suite), ``slack-event`` (the sample
Slack event envelope), ``cassette`` (the recorded model turns that replay it offline:
``sre-diag replay EVENT --cassette FILE`` with the demo's runbooks and logs), ``incident`` (the
demo incident), ``knowledge`` and ``logs`` (its runbooks and log folder), ``mysql`` (its schema
and seed), ``manifest`` and ``manifest-http`` (the Slack app manifests for Socket Mode and for
``serve --http``). Exit 2 on an unknown name.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sre_diag.resources import (
    BUNDLED_CASSETTES,
    BUNDLED_INCIDENT,
    BUNDLED_KNOWLEDGE,
    BUNDLED_LOGS,
    BUNDLED_MYSQL,
    bundled_evals,
    manifest_path,
    sample_slack_event,
)

__all__ = ["PATHS", "main"]

PATHS: dict[str, Callable[[], Path]] = {
    "evals": bundled_evals,
    "slack-event": sample_slack_event,
    "cassette": lambda: BUNDLED_CASSETTES / "without-mysql.json",
    "incident": lambda: BUNDLED_INCIDENT,
    "knowledge": lambda: BUNDLED_KNOWLEDGE,
    "logs": lambda: BUNDLED_LOGS,
    "mysql": lambda: BUNDLED_MYSQL,
    "manifest": manifest_path,
    "manifest-http": lambda: manifest_path(http=True),
}


def main(argv: Sequence[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv)
    if len(names) != 1 or names[0] not in PATHS:
        sys.stderr.write(f"usage: python -m sre_diag.resources {{{','.join(PATHS)}}}\n")
        return 2
    sys.stdout.write(f"{PATHS[names[0]]()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
