"""The strict Draft gate: examples for each defect, and hypothesis properties."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sre_diag.contract.draft import DiagnosisDraft, DraftDefect, DraftRejected, parse_draft

CALL_IDS = ["call-1", "call-2", "call_abc"]


def _valid() -> dict[str, Any]:
    return {
        "conclusion": {"summary": "s", "confidence": "LOW", "evidence_tool_call_ids": ["call-1"]},
        "analysis": [
            {
                "kind": "FINDING",
                "statement": "f",
                "evidence": {"status": "CITED", "tool_call_ids": ["call-1"]},
            },
            {
                "kind": "NEGATIVE_OBSERVATION",
                "statement": "n",
                "evidence": {"status": "NO_EVIDENCE", "scope": "checkout-web ERROR 10:00–10:30"},
            },
        ],
        "action_plan": ["a"],
        "recommendations": [],
        "limitations": {"checked_scope": ["c"], "missing_info": []},
    }


def _parse(text: str, ready: list[str] | None = None, max_bytes: int = 16384) -> DiagnosisDraft:
    return parse_draft(
        text, max_bytes=max_bytes, ready_ids=ready if ready is not None else CALL_IDS
    )


def _defect(text: str, **kwargs: Any) -> DraftDefect:
    with pytest.raises(DraftRejected) as info:
        _parse(text, **kwargs)
    return info.value.defect


def test_whitespace_around_the_object_is_allowed() -> None:
    draft = _parse("\n\t  " + json.dumps(_valid()) + "  \r\n")
    assert draft.cited_ids() == {"call-1"}


@pytest.mark.parametrize(
    ("mutate", "defect"),
    [
        (lambda d: {**d, "extra": 1}, DraftDefect.SCHEMA),
        (lambda d: {k: v for k, v in d.items() if k != "limitations"}, DraftDefect.SCHEMA),
        (lambda d: {**d, "conclusion": None}, DraftDefect.SCHEMA),  # missing_info empty
        (lambda d: {**d, "action_plan": ["  "]}, DraftDefect.SCHEMA),  # blank text
        (lambda d: {**d, "action_plan": ["x" * 301]}, DraftDefect.SCHEMA),
        (lambda d: {**d, "recommendations": ["r"] * 11}, DraftDefect.SCHEMA),
        (
            lambda d: {
                **d,
                "analysis": [
                    {
                        "kind": "FINDING",
                        "statement": "f",
                        "evidence": {"status": "NO_EVIDENCE", "scope": "x"},
                    }
                ],
            },
            DraftDefect.SCHEMA,
        ),
        (
            lambda d: {**d, "conclusion": {**d["conclusion"], "evidence_tool_call_ids": []}},
            DraftDefect.SCHEMA,
        ),
        (
            lambda d: {**d, "conclusion": {**d["conclusion"], "confidence": "CERTAIN"}},
            DraftDefect.SCHEMA,
        ),
        (
            lambda d: {
                **d,
                "conclusion": {**d["conclusion"], "evidence_tool_call_ids": ["call-9"]},
            },
            DraftDefect.UNKNOWN_CITATION,
        ),
    ],
)
def test_schema_and_citation_defects(mutate: Any, defect: DraftDefect) -> None:
    assert _defect(json.dumps(mutate(_valid()))) is defect


def test_text_defects() -> None:
    body = json.dumps(_valid())
    assert _defect("") is DraftDefect.EMPTY
    assert _defect(" \n ") is DraftDefect.EMPTY
    assert _defect("```json\n" + body + "\n```") is DraftDefect.FENCED
    assert _defect("Draft: " + body) is DraftDefect.PREFIXED
    assert _defect(body + body) is DraftDefect.SUFFIXED
    assert _defect(body[:-5]) is DraftDefect.MALFORMED
    assert _defect(body, max_bytes=100) is DraftDefect.OVERSIZED
    assert _defect('{"conclusion": null, "conclusion": null}') is DraftDefect.DUPLICATE_KEY
    assert _defect("[1, 2]") is DraftDefect.SCHEMA
    nan = body.replace('"recommendations": []', '"recommendations": NaN')
    assert _defect(nan) is DraftDefect.MALFORMED


def test_a_citation_of_a_non_ready_call_is_unknown() -> None:
    assert _defect(json.dumps(_valid()), ready=["call-2"]) is DraftDefect.UNKNOWN_CITATION


_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40
).filter(lambda s: bool(s.strip()))
_ids = st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3, unique=True)
_evidence = st.one_of(
    st.builds(lambda ids: {"status": "CITED", "tool_call_ids": ids}, _ids),
    st.builds(lambda s: {"status": "NO_EVIDENCE", "scope": s}, _text),
)


@st.composite
def drafts(draw: st.DrawFn) -> dict[str, Any]:
    analysis = []
    for _ in range(draw(st.integers(0, 4))):
        evidence = draw(_evidence)
        kind = (
            "FINDING"
            if evidence["status"] == "CITED" and draw(st.booleans())
            else "NEGATIVE_OBSERVATION"
        )
        analysis.append({"kind": kind, "statement": draw(_text), "evidence": evidence})
    has_conclusion = draw(st.booleans())
    missing = draw(st.lists(_text, min_size=0 if has_conclusion else 1, max_size=3))
    return {
        "conclusion": (
            {
                "summary": draw(_text),
                "confidence": draw(st.sampled_from(["HIGH", "MEDIUM", "LOW"])),
                "evidence_tool_call_ids": draw(_ids),
            }
            if has_conclusion
            else None
        ),
        "analysis": analysis,
        "action_plan": draw(st.lists(_text, max_size=3)),
        "recommendations": draw(st.lists(_text, max_size=3)),
        "limitations": {
            "checked_scope": draw(st.lists(_text, max_size=3)),
            "missing_info": missing,
        },
    }


@settings(max_examples=200, deadline=None)
@given(drafts())
def test_every_valid_draft_round_trips(draft: dict[str, Any]) -> None:
    parsed = _parse(json.dumps(draft, ensure_ascii=False))
    assert json.loads(parsed.model_dump_json()) == draft


_non_ws = st.text(min_size=1, max_size=20).filter(lambda s: s.strip(" \t\n\r") != "")


@settings(max_examples=200, deadline=None)
@given(drafts(), _non_ws, st.booleans())
def test_any_non_whitespace_prefix_or_suffix_is_rejected(
    draft: dict[str, Any], extra: str, as_prefix: bool
) -> None:
    body = json.dumps(draft, ensure_ascii=False)
    text = extra + body if as_prefix else body + extra
    with pytest.raises(DraftRejected):
        _parse(text)
