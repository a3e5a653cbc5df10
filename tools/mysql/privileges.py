"""Is the configured MySQL/MariaDB account read-only? Decided from its effective grants.

``DIAG_MYSQL_REQUIRE_READ_ONLY`` (default true) makes ``query_mysql`` execute nothing unless the
account's privileges, at every level and through every role granted to it (recursively), are
only ``SELECT`` / ``SHOW VIEW`` / ``USAGE``, with no ``GRANT OPTION`` and no ``ADMIN OPTION``.
The guard is the first boundary; the account is the one the server enforces, so a team that
points the bot at an account that can write gets a clear refusal instead of a silent risk.

The grant text is parsed conservatively: any line it cannot classify makes the verdict "not
read-only", and so does a role whose grants cannot be read.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

__all__ = [
    "MAX_ROLES",
    "PUBLIC",
    "READ_ONLY_PRIVILEGES",
    "GrantVerdict",
    "assess_grant_lines",
    "effective_grants_verdict",
]

READ_ONLY_PRIVILEGES = frozenset({"SELECT", "SHOW VIEW", "USAGE"})
MAX_ROLES = 32

_PRIVILEGE_GRANT = re.compile(r"GRANT (?P<privileges>.+?) ON (?P<object>.+?) TO (?P<rest>.+)", re.S)
_ROLE_GRANT = re.compile(r"GRANT (?P<roles>.+?) TO (?P<rest>.+)", re.S)
_COLUMN_LIST = re.compile(r"\s*\([^()]*\)\s*$")
_QUOTED = re.compile(r"`((?:[^`]|``)*)`")


@dataclass(frozen=True, slots=True)
class GrantVerdict:
    """The outcome for one account: ``read_only`` and, when not, a reason safe to log."""

    read_only: bool
    reason: str
    roles: tuple[str, ...] = field(default=())


def assess_grant_lines(lines: Iterable[str]) -> GrantVerdict:
    """Judge the lines of one ``SHOW GRANTS``; the roles it names are for the caller to follow."""
    roles: list[str] = []
    for raw in lines:
        line = " ".join(raw.split())
        upper = line.upper()
        if upper.startswith(("SET DEFAULT ROLE", "REVOKE ")):
            continue  # a default-role marker or a partial revoke only ever narrows
        if not upper.startswith("GRANT "):
            return GrantVerdict(False, "unrecognised grant line")
        verdict = _assess_grant(line, roles)
        if verdict is not None:
            return verdict
    return GrantVerdict(True, "read-only", tuple(roles))


def _assess_grant(line: str, roles: list[str]) -> GrantVerdict | None:
    privilege = _PRIVILEGE_GRANT.fullmatch(_mask_quoted(line))
    if privilege is not None:
        rest = privilege.group("rest").upper()
        if "GRANT OPTION" in rest:
            return GrantVerdict(False, "account holds GRANT OPTION")
        listed = line[privilege.start("privileges") : privilege.end("privileges")]
        for name in _privilege_names(listed):
            if name not in READ_ONLY_PRIVILEGES:
                return GrantVerdict(False, f"account holds {name}")
        return None
    role = _ROLE_GRANT.fullmatch(_mask_quoted(line))
    if role is None:
        return GrantVerdict(False, "unrecognised grant line")
    if "ADMIN OPTION" in role.group("rest").upper():
        return GrantVerdict(False, "account holds ADMIN OPTION on a role")
    references = _role_names(line[role.start("roles") : role.end("roles")])
    if not references:
        return GrantVerdict(False, "unrecognised role grant")
    roles.extend(references)
    return None


def _mask_quoted(line: str) -> str:
    """The line with the content of back-quoted and single-quoted names blanked (same length),
    so that a name containing `` ON `` or `` TO `` cannot move the parse."""
    def blank(match: re.Match[str]) -> str:
        return match.group(0)[0] + "x" * (len(match.group(0)) - 2) + match.group(0)[-1]

    masked = _QUOTED.sub(blank, line)
    return re.sub(r"'(?:[^'\\]|\\.|'')*'", blank, masked)


def _privilege_names(text: str) -> list[str]:
    """``SELECT (`a`, `b`), SHOW VIEW`` → ``["SELECT", "SHOW VIEW"]`` (column lists dropped)."""
    names: list[str] = []
    depth, current = 0, list[str]()
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            names.append("".join(current))
            current = []
        else:
            current.append(char)
    names.append("".join(current))
    return [" ".join(_COLUMN_LIST.sub("", name).upper().split()) for name in names]


def _role_names(text: str) -> list[str]:
    """Role references as ``SHOW GRANTS FOR`` accepts them: `` `r` `` or `` `r`@`h` ``."""
    references: list[str] = []
    for part in re.split(r",(?=(?:[^`]*`[^`]*`)*[^`]*$)", text):
        quoted = _QUOTED.findall(part)
        if not quoted:
            continue
        references.append("@".join(f"`{name}`" for name in quoted[:2]))
    return references


RunShowGrants = Callable[[str | None], Awaitable[list[str]]]


PUBLIC = "PUBLIC"


async def effective_grants_verdict(
    show_grants: RunShowGrants, *, include_public: bool = False
) -> GrantVerdict:
    """Follow the account's grants, every role reachable from them and, with
    ``include_public`` (MariaDB 10.11+), the grants to ``PUBLIC`` (which every account holds,
    and which ``SHOW GRANTS FOR CURRENT_USER()`` does not list).

    ``show_grants(None)`` returns the lines of ``SHOW GRANTS FOR CURRENT_USER()``;
    ``show_grants(role)`` those of ``SHOW GRANTS FOR <role>`` (``PUBLIC`` included). Any
    failure to read a role's grants is a "not read-only" verdict (fail closed).
    """
    verdict = assess_grant_lines(await show_grants(None))
    if not verdict.read_only:
        return verdict
    seen: set[str] = set()
    pending = list(verdict.roles)
    if include_public:
        pending.insert(0, PUBLIC)
    while pending:
        role = pending.pop()
        if role in seen:
            continue
        seen.add(role)
        if len(seen) > MAX_ROLES:
            return GrantVerdict(False, "too many roles to verify")
        try:
            lines = await show_grants(role)
        except Exception:  # a role whose grants we cannot read cannot be trusted
            return GrantVerdict(False, "grants of a granted role are not readable")
        role_verdict = assess_grant_lines(lines)
        if not role_verdict.read_only:
            via = "PUBLIC" if role == PUBLIC else "a role"
            return GrantVerdict(False, f"through {via}: {role_verdict.reason}")
        pending.extend(role_verdict.roles)
    return GrantVerdict(True, "read-only", tuple(sorted(seen)))
