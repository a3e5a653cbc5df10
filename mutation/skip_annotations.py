"""Mark as SKIPPED, in a cosmic-ray session, every mutant that lies wholly inside a type annotation.

Only for a module with ``from __future__ import annotations``: there no annotation is evaluated
at run time, so such a mutant (``str | None`` into ``str - None``…) is equivalent by
construction and would only pay both test steps for nothing (mypy strict rejects each). A
runtime expression that uses ``|`` (``Decision = Execute | Respond | Stop``) is not an
annotation and is left to run. Usage: ``python mutation/skip_annotations.py SESSION``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from cosmic_ray.work_db import use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult

Span = tuple[tuple[int, int], tuple[int, int]]


def annotation_spans(source: str) -> list[Span]:
    """The (start, end) positions (row 1-based, column 0-based) of every annotation."""
    tree = ast.parse(source)
    future = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )
    if not future:
        return []
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return [
        ((a.lineno, a.col_offset), (a.end_lineno or a.lineno, a.end_col_offset or 0)) for a in found
    ]


def main(session: str) -> int:
    skipped = 0
    with use_db(session) as db:
        spans: dict[Path, list[Span]] = {}
        for item in db.work_items:
            inside = True
            for mutation in item.mutations:
                path = Path(mutation.module_path)
                if path not in spans:
                    spans[path] = annotation_spans(path.read_text(encoding="utf-8"))
                start, end = tuple(mutation.start_pos), tuple(mutation.end_pos)
                if not any(lo <= start and end <= hi for lo, hi in spans[path]):
                    inside = False
            if inside and item.mutations:
                db.set_result(
                    item.job_id,
                    WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="annotation"),
                )
                skipped += 1
    print(f"skip_annotations: {skipped} mutants inside annotations marked SKIPPED")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
