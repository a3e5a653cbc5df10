"""``python -m sre_diag`` — the command line (also the ``sre-diag`` console script)."""

from __future__ import annotations

import sys

from sre_diag.commands.startup import imports_without_gc

with imports_without_gc():  # the command line's modules load faster (see the module)
    from sre_diag.commands.cli import main

if __name__ == "__main__":
    sys.exit(main())
