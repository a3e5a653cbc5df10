"""``python -m plugin.resources NAME``: where the installed package keeps one of its data sets.

Prints one absolute path: ``evals`` (the bundled eval suite), ``slack-event`` (the sample
Slack event envelope), ``incident`` (the demo incident), ``knowledge`` and ``logs`` (its
runbooks and log folder), ``mysql`` (its schema and seed). Exit 2 on an unknown name.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from plugin.resources import (
    BUNDLED_EVALS,
    BUNDLED_INCIDENT,
    BUNDLED_KNOWLEDGE,
    BUNDLED_LOGS,
    BUNDLED_MYSQL,
    SAMPLE_SLACK_EVENT,
)

__all__ = ["PATHS", "main"]

PATHS: dict[str, Path] = {
    "evals": BUNDLED_EVALS,
    "slack-event": SAMPLE_SLACK_EVENT,
    "incident": BUNDLED_INCIDENT,
    "knowledge": BUNDLED_KNOWLEDGE,
    "logs": BUNDLED_LOGS,
    "mysql": BUNDLED_MYSQL,
}


def main(argv: Sequence[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv)
    if len(names) != 1 or names[0] not in PATHS:
        sys.stderr.write(f"usage: python -m plugin.resources {{{','.join(PATHS)}}}\n")
        return 2
    sys.stdout.write(f"{PATHS[names[0]]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
