""":func:`sre_diag.tools.logs.variants.variant_targets` keeps each target's hash once and builds a
target's text only when it may be chosen (issue 20: faster); it chooses exactly what the direct
form below chooses, which computes every target three times, on random windows of patterns
that share most of their tokens (so positions are wide, narrow, dominated and chained)."""

from __future__ import annotations

import random
from collections.abc import Mapping

from sre_diag.tools.logs.variants import MERGE_MAX_ENTRIES, MERGE_VARIANTS, _final, _targets
from sre_diag.tools.logs.variants import variant_targets as fast_targets


def _direct_targets(patterns: Mapping[str, int]) -> dict[str, str]:
    ranked = sorted(patterns.items(), key=lambda kv: (-kv[1], kv[0]))
    positions = _direct_positions(ranked)
    chosen: dict[str, str] = {}
    for pattern, count in ranked:
        best = _direct_best(pattern, count, patterns, positions)
        if best is not None:
            chosen[pattern] = best
    return {pattern: _final(chosen, target) for pattern, target in chosen.items()}


def _direct_positions(ranked: list[tuple[str, int]]) -> dict[int, list[int]]:
    positions: dict[int, list[int]] = {}
    for pattern, count in ranked:
        for target in _targets(pattern):
            entry = positions.get(hash(target))
            if entry is not None:
                entry[0] += 1
                entry[1] += count
            elif len(positions) < MERGE_MAX_ENTRIES:
                positions[hash(target)] = [1, count, 0]
    for pattern, count in ranked:
        for target in _targets(pattern):
            entry = positions.get(hash(target))
            if entry is not None and count * MERGE_VARIANTS > entry[1]:
                entry[2] += 1
    return positions


def _direct_best(
    pattern: str, count: int, patterns: Mapping[str, int], positions: dict[int, list[int]]
) -> str | None:
    best: tuple[int, int, str] | None = None
    for target in _targets(pattern):
        variants, lines, dominant = positions.get(hash(target), (1, count, 1))
        behind = patterns.get(target, 0)
        if variants < MERGE_VARIANTS and (behind < count or variants > 1):
            continue
        if variants >= MERGE_VARIANTS and dominant > 1 and count * MERGE_VARIANTS > lines:
            continue
        weight = (-(lines + behind), -variants, target)
        if best is None or weight < best:
            best = weight
    return None if best is None else best[2]


VOCAB = ["a", "b", "c", "failed", "ok", "<*>", "<*>,", "x:", "user", "<*>ms", "id=<*>", "d;"]


def _window(rng: random.Random) -> dict[str, int]:
    base = [rng.choice(VOCAB) for _ in range(rng.randint(1, 6))]
    window: dict[str, int] = {}
    for _ in range(rng.randint(1, 60)):
        tokens = list(base)
        for _ in range(rng.randint(0, 2)):
            tokens[rng.randrange(len(tokens))] = rng.choice([*VOCAB, f"w{rng.randint(0, 9)}"])
        if rng.random() < 0.2:
            tokens.append(rng.choice(VOCAB))
        window[" ".join(tokens)] = rng.choice([1, 1, 2, 3, 5, 8, 20, 100])
    return window


def test_the_fast_form_chooses_what_the_direct_form_chooses() -> None:
    rng = random.Random(20)
    for _ in range(1500):
        window = _window(rng)
        assert fast_targets(window) == _direct_targets(window), window
