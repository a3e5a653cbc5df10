"""Rules of :data:`sre_diag.tools.logs.masking._MASKS` rewritten for speed (issue 20: their pass
now starts with the class of their first character, so it skips to candidates in C) match
exactly where their first form matched: the same spans on random and hostile texts."""

from __future__ import annotations

import random
import re

import pytest

from sre_diag.tools.logs.masking import _MASKS
from tests.tools.test_evidence_mask_linear import UNITS
from tests.tools.test_pattern_quality import PIECES

# index in _MASKS -> the form the rule had before its rewrite
FIRST_FORMS = {
    9: r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?(?![\d.])",
    20: r"(?:(?<![A-Za-z0-9])[-+])?\d+(?:[.,]\d+)*",
}


def _spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    return [match.span() for match in pattern.finditer(text)]


@pytest.mark.parametrize("index", sorted(FIRST_FORMS))
def test_a_rewritten_rule_matches_what_its_first_form_matched(index: int) -> None:
    first, now = re.compile(FIRST_FORMS[index]), _MASKS[index][0]
    rng = random.Random(index)
    texts = ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40))) for _ in range(4000)]
    texts += [unit * 20 + tail for unit in UNITS for tail in ("", "1", ".", "-1", ":1")]
    for text in texts:
        assert _spans(now, text) == _spans(first, text), text
