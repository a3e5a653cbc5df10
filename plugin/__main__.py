"""``python -m plugin`` — the command line (also the ``sre-diag`` console script)."""

from __future__ import annotations

import sys

from plugin.commands.cli import main

if __name__ == "__main__":
    sys.exit(main())
