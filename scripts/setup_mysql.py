"""Create the read-only diagnosis account (and, with ``--demo-data``, the bundled database).

A checkout's shortcut for ``sre-diag setup-mysql`` (:mod:`sre_diag.commands.setup_mysql` has the
details): it never drops or revokes anything it did not create.
"""

from __future__ import annotations

import sys

from sre_diag.commands.setup_mysql import main

if __name__ == "__main__":
    sys.exit(main())
