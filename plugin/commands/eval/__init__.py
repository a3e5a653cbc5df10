"""``eval``: run evaluation cases through the real harness and score them (CONTRACTS §1, §9).

:mod:`~sre_diag.commands.eval.cases` finds and reads the cases, :mod:`~sre_diag.commands.eval.score`
scores one result, :mod:`~sre_diag.commands.eval.database` prepares a case's throwaway database,
:mod:`~sre_diag.commands.eval.runner` runs every case (:func:`run_eval`, the command) and
:mod:`~sre_diag.commands.eval.report` renders the table and the report. The names callers use are
re-exported here.
"""

from sre_diag.commands.eval.cases import CaseSpec, EvalUsageError, Expect, discover_cases
from sre_diag.commands.eval.report import RunReport
from sre_diag.commands.eval.runner import run_eval
from sre_diag.commands.eval.score import score

__all__ = [
    "CaseSpec",
    "EvalUsageError",
    "Expect",
    "RunReport",
    "discover_cases",
    "run_eval",
    "score",
]
