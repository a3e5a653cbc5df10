"""Create (or recreate) the bundled incident database and its read-only diagnosis account.

A checkout's shortcut for ``python -m sre_diag.commands.setup_mysql`` (the module the wheel ships;
its docstring has the details).
"""

from __future__ import annotations

import sys

from sre_diag.commands.setup_mysql import main

if __name__ == "__main__":
    sys.exit(main())
