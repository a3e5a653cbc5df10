"""Generate the bundled evaluation suite (deterministic): every case folder under examples/evals.

Each case is a different incident with its own data and a decoy a careless diagnosis would
blame (``note`` in its ``case.json``). The stories, log lines, runbooks, MySQL rows, expectations
and recorded model runs (cassettes) are all written from ``cases_a.py`` and ``cases_b.py``::

    python examples/evals/generate.py            # rewrite every case folder

Cassettes: ``cassette.json`` is a run a competent model could have produced from what it was
told (it passes); ``cassette.fail-<why>.json`` are runs that must FAIL the scoring (blames the
decoy, cites nothing, concludes on no evidence, follows an injected instruction, fails the
strict Draft). ``sre-diag eval --replay examples/evals`` replays all of them.
"""

from __future__ import annotations

from pathlib import Path

from cases_a import (
    config_flag_rollout,
    disk_retention,
    pool_exhaustion,
    provider_outage,
    slow_query_index_drop,
)
from cases_b import (
    certificate_expiry,
    lock_contention,
    no_evidence,
    prompt_injection,
    vague_question,
)

ROOT = Path(__file__).resolve().parent
CASES = (
    pool_exhaustion,
    slow_query_index_drop,
    provider_outage,
    config_flag_rollout,
    disk_retention,
    lock_contention,
    certificate_expiry,
    no_evidence,
    vague_question,
    prompt_injection,
)


def main() -> None:
    for build in CASES:
        data = build()
        data.write(ROOT)
        print(f"wrote {data.case['id']}")


if __name__ == "__main__":
    main()
