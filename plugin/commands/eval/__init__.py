"""``eval``: run evaluation cases through the real harness and score them (CONTRACTS §1, §9).

:mod:`~plugin.commands.eval.cases` finds and reads the cases, :mod:`~plugin.commands.eval.score`
scores one result, :mod:`~plugin.commands.eval.database` prepares a case's throwaway database,
:mod:`~plugin.commands.eval.runner` runs every case (:func:`run_eval`, the command) and
:mod:`~plugin.commands.eval.report` renders the table and the report. The names callers use are
re-exported here.
"""

from plugin.commands.eval.cases import CaseSpec, EvalUsageError, Expect, discover_cases
from plugin.commands.eval.report import RunReport
from plugin.commands.eval.runner import run_eval
from plugin.commands.eval.score import score

__all__ = [
    "CaseSpec",
    "EvalUsageError",
    "Expect",
    "RunReport",
    "discover_cases",
    "run_eval",
    "score",
]
