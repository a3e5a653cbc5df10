"""The strict Draft gate (``plugin/contract/draft.py``) at its exact boundaries (written for its
cosmic-ray run): every length and count limit of CONTRACTS §5 accepted at the limit and refused
one past it, the byte cap counted in UTF-8, a citation set equal to the READY ids accepted,
which defect each kind of bad text gets, and the schemas handed out as fresh copies; a Draft
that passed the gate cannot be edited, a wide object is a SCHEMA defect (not a duplicate key),
and the limit and the READY ids are passed by name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from sre_diag.contract.draft import (
    DiagnosisDraft,
    DraftDefect,
    DraftRejected,
    draft_json_schema,
    draft_strict_schema,
    parse_draft,
)
from sre_diag.contract.envelope import MAX_TOOL_CALL_ID_CHARS

READY = ["call-1"]


def _draft(**fields: Any) -> dict[str, Any]:
    draft: dict[str, Any] = {
        "conclusion": {"summary": "s", "confidence": "LOW", "evidence_tool_call_ids": ["call-1"]},
        "analysis": [],
        "action_plan": [],
        "recommendations": [],
        "limitations": {"checked_scope": [], "missing_info": []},
    }
    draft.update(fields)
    return draft


def _parse(
    value: dict[str, Any] | str | None, ready: list[str] = READY, **kw: Any
) -> DiagnosisDraft:
    text = value if value is None or isinstance(value, str) else json.dumps(value)
    return parse_draft(text, max_bytes=kw.get("max_bytes", 1 << 20), ready_ids=ready)


def _defect(value: dict[str, Any] | str | None, ready: list[str] = READY, **kw: Any) -> DraftDefect:
    with pytest.raises(DraftRejected) as refused:
        _parse(value, ready, **kw)
    assert str(refused.value) == refused.value.defect.value
    return refused.value.defect


def _conclusion(summary: str = "s", ids: list[str] = READY) -> dict[str, Any]:
    return {"summary": summary, "confidence": "HIGH", "evidence_tool_call_ids": ids}


def _finding(statement: str = "f", ids: list[str] = READY) -> dict[str, Any]:
    return {
        "kind": "FINDING",
        "statement": statement,
        "evidence": {"status": "CITED", "tool_call_ids": ids},
    }


def _negative(scope: str = "x", statement: str = "n") -> dict[str, Any]:
    return {
        "kind": "NEGATIVE_OBSERVATION",
        "statement": statement,
        "evidence": {"status": "NO_EVIDENCE", "scope": scope},
    }


# -- text limits -----------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["x", "连", "🚀"])
def test_a_statement_takes_1_to_500_characters(char: str) -> None:
    for size in (1, 500):
        _parse(_draft(conclusion=_conclusion(char * size)))
        _parse(_draft(analysis=[_finding(char * size)]))
    assert _defect(_draft(conclusion=_conclusion(char * 501))) is DraftDefect.SCHEMA
    assert _defect(_draft(analysis=[_finding(char * 501)])) is DraftDefect.SCHEMA


@pytest.mark.parametrize("char", ["x", "连"])
def test_an_item_takes_1_to_300_characters(char: str) -> None:
    for size in (1, 300):
        item = char * size
        _parse(_draft(action_plan=[item], recommendations=[item]))
        _parse(_draft(limitations={"checked_scope": [item], "missing_info": [item]}))
        _parse(_draft(analysis=[_negative(scope=item)]))
    item = char * 301
    for fields in (
        {"action_plan": [item]},
        {"recommendations": [item]},
        {"limitations": {"checked_scope": [item], "missing_info": []}},
        {"limitations": {"checked_scope": [], "missing_info": [item]}},
        {"analysis": [_negative(scope=item)]},
    ):
        assert _defect(_draft(**fields)) is DraftDefect.SCHEMA


@pytest.mark.parametrize("blank", ["", " ", "\n\t"])
def test_blank_text_is_refused_everywhere(blank: str) -> None:
    for fields in (
        {"conclusion": _conclusion(blank)},
        {"analysis": [_finding(blank)]},
        {"analysis": [_negative(scope=blank)]},
        {"action_plan": [blank]},
        {"limitations": {"checked_scope": [], "missing_info": [blank]}},
    ):
        assert _defect(_draft(**fields)) is DraftDefect.SCHEMA


def test_a_tool_call_id_takes_1_to_the_envelope_limit() -> None:
    longest = "c" * MAX_TOOL_CALL_ID_CHARS
    _parse(_draft(conclusion=_conclusion(ids=[longest])), ready=[longest])
    _parse(_draft(conclusion=_conclusion(ids=["c"])), ready=["c"])
    too_long = longest + "c"
    assert _defect(_draft(conclusion=_conclusion(ids=[too_long])), [too_long]) is (
        DraftDefect.SCHEMA
    )
    # An empty id is a schema defect even if some call of the run had one.
    assert _defect(_draft(conclusion=_conclusion(ids=[""])), [""]) is DraftDefect.SCHEMA
    assert _defect(_draft(analysis=[_finding(ids=[""])]), ["", "call-1"]) is DraftDefect.SCHEMA


# -- count limits ----------------------------------------------------------------------------


def test_a_citation_names_1_to_10_ids() -> None:
    ids = [f"call-{n}" for n in range(11)]
    _parse(_draft(conclusion=_conclusion(ids=ids[:10])), ready=ids)
    _parse(_draft(analysis=[_finding(ids=ids[:10])]), ready=ids)
    _parse(_draft(analysis=[_finding(ids=ids[:1])]), ready=ids)
    assert _defect(_draft(conclusion=_conclusion(ids=ids)), ids) is DraftDefect.SCHEMA
    assert _defect(_draft(analysis=[_finding(ids=ids)]), ids) is DraftDefect.SCHEMA
    assert _defect(_draft(analysis=[_finding(ids=[])]), ids) is DraftDefect.SCHEMA


@pytest.mark.parametrize("field", ["analysis", "action_plan", "recommendations"])
def test_each_list_holds_up_to_10_entries(field: str) -> None:
    entry: Any = _negative() if field == "analysis" else "a"
    _parse(_draft(**{field: [entry] * 10}))
    assert _defect(_draft(**{field: [entry] * 11})) is DraftDefect.SCHEMA


@pytest.mark.parametrize("field", ["checked_scope", "missing_info"])
def test_each_limitation_holds_up_to_10_entries(field: str) -> None:
    other = "missing_info" if field == "checked_scope" else "checked_scope"
    _parse(_draft(limitations={field: ["a"] * 10, other: []}))
    assert _defect(_draft(limitations={field: ["a"] * 11, other: []})) is DraftDefect.SCHEMA


# -- rules across fields ---------------------------------------------------------------------


def test_a_finding_is_cited_a_negative_observation_may_be_either() -> None:
    cited_negative = {**_finding(), "kind": "NEGATIVE_OBSERVATION"}
    assert _parse(_draft(analysis=[cited_negative, _negative()])).analysis[0].kind == (
        "NEGATIVE_OBSERVATION"
    )
    uncited_finding = {**_negative(), "kind": "FINDING"}
    assert _defect(_draft(analysis=[uncited_finding])) is DraftDefect.SCHEMA


def test_without_a_conclusion_missing_info_is_required() -> None:
    missing = {"checked_scope": [], "missing_info": ["the pool metrics"]}
    draft = _parse(_draft(conclusion=None, limitations=missing))
    assert draft.conclusion is None and draft.cited_ids() == frozenset()
    assert _defect(_draft(conclusion=None)) is DraftDefect.SCHEMA
    # With a conclusion nothing need be missing.
    assert _parse(_draft()).limitations.missing_info == ()


def test_the_cited_ids_are_the_conclusions_and_the_cited_analysis() -> None:
    ready = ["a", "b", "c", "d"]
    draft = _parse(
        _draft(conclusion=_conclusion(ids=["a"]), analysis=[_finding(ids=["b", "c"]), _negative()]),
        ready,
    )
    assert draft.cited_ids() == frozenset({"a", "b", "c"})
    no_conclusion = _draft(
        conclusion=None,
        analysis=[_finding(ids=["d"])],
        limitations={"checked_scope": [], "missing_info": ["m"]},
    )
    assert _parse(no_conclusion, ready).cited_ids() == frozenset({"d"})


def test_citing_exactly_the_ready_calls_is_accepted_one_more_is_not() -> None:
    draft = _draft(conclusion=_conclusion(ids=["a", "b"]))
    assert _parse(draft, ["a", "b"]).cited_ids() == frozenset({"a", "b"})
    assert _parse(draft, ["b", "a", "z"]).cited_ids() == frozenset({"a", "b"})
    assert _defect(draft, ["a"]) is DraftDefect.UNKNOWN_CITATION
    assert _defect(draft, []) is DraftDefect.UNKNOWN_CITATION
    finding_only = _draft(conclusion=_conclusion(ids=["a"]), analysis=[_finding(ids=["q"])])
    assert _defect(finding_only, ["a"]) is DraftDefect.UNKNOWN_CITATION


# -- the text --------------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["x", "连", "🚀"])
def test_the_byte_cap_is_counted_in_utf8_at_its_exact_byte(char: str) -> None:
    text = json.dumps(_draft(conclusion=_conclusion(char * 50)), ensure_ascii=False)
    size = len(text.encode("utf-8"))
    _parse(text, max_bytes=size)
    assert _defect(text, max_bytes=size - 1) is DraftDefect.OVERSIZED
    # The whitespace around the object counts too.
    assert _defect(text + " ", max_bytes=size) is DraftDefect.OVERSIZED


def test_which_defect_each_bad_text_gets() -> None:
    body = json.dumps(_draft())
    assert _defect(None) is DraftDefect.EMPTY
    assert _defect("\t\r\n ") is DraftDefect.EMPTY
    assert _defect("```" + body) is DraftDefect.FENCED
    assert _defect(" ```json\n" + body + "\n```") is DraftDefect.FENCED
    assert _defect("{") is DraftDefect.MALFORMED
    assert _defect("[") is DraftDefect.MALFORMED
    assert _defect("x" + body) is DraftDefect.PREFIXED
    assert _defect("\u00a0" + body) is DraftDefect.PREFIXED  # not JSON whitespace
    assert _defect(body + "x") is DraftDefect.SUFFIXED
    assert _defect(body + "\u00a0") is DraftDefect.SUFFIXED
    assert _defect('"a draft"') is DraftDefect.SCHEMA
    assert _defect("[]") is DraftDefect.SCHEMA
    assert _defect("[" * 200 + "]" * 200) is DraftDefect.TOO_DEEP
    assert _defect('{"a": 1, "a": 1}') is DraftDefect.DUPLICATE_KEY
    for constant in ("NaN", "Infinity", "-Infinity"):
        text = body.replace('"recommendations": []', f'"recommendations": [{constant}]')
        assert _defect(text) is DraftDefect.MALFORMED
    assert _parse(" \n" + body + "\r\t").conclusion is not None


# -- the schemas -----------------------------------------------------------------------------


def test_the_schemas_are_fresh_copies_of_the_draft_model() -> None:
    assert json.loads(draft_json_schema()) == DiagnosisDraft.model_json_schema()
    first = draft_strict_schema()
    first["properties"].clear()
    first["injected"] = True
    second = draft_strict_schema()
    assert "injected" not in second and second["properties"]
    assert second == draft_strict_schema() and second is not draft_strict_schema()
    assert set(second["properties"]) == {
        "conclusion",
        "analysis",
        "action_plan",
        "recommendations",
        "limitations",
    }


def test_a_draft_cannot_change_once_it_passed_the_gate() -> None:
    draft = _parse(_draft(analysis=[_finding()]), ["call-1"])
    with pytest.raises(ValidationError):
        draft.conclusion = None  # type: ignore[misc]
    with pytest.raises(ValidationError):
        draft.analysis[0].evidence.tool_call_ids = ("call-9",)  # type: ignore[misc,union-attr]
    assert draft.cited_ids() == frozenset({"call-1"})


def test_many_distinct_keys_are_a_schema_defect_not_a_duplicate() -> None:
    wide = {f"k{n}": n for n in range(300)}
    assert _defect(json.dumps(wide)) is DraftDefect.SCHEMA
    assert _defect(json.dumps(_draft(limitations={"checked_scope": [], **wide}))) is (
        DraftDefect.SCHEMA
    )
    assert _defect(json.dumps(wide)[:-1] + ', "k7": 7}') is DraftDefect.DUPLICATE_KEY


def test_the_limit_and_the_ready_ids_are_passed_by_name() -> None:
    body = json.dumps(_draft())
    with pytest.raises(TypeError):
        parse_draft(body, 1 << 20, READY)  # type: ignore[misc]
    assert parse_draft(text=body, max_bytes=1 << 20, ready_ids=READY).cited_ids() == {"call-1"}
