"""The masker of pattern mining: a log message's variable parts as ``<*>``.

:func:`mask_message` applies :data:`_MASKS` in order (numbers with their sign or comparator,
durations with an attached or spelled unit, byte sizes, hex, UUIDs, IPv4/IPv6/MAC addresses,
host names and ``host:port``, ids mixing letters and digits, dates and times in ISO, syslog,
ctime, RFC 2822, Apache and US forms, quoted values, an empty ``()`` where a value stands; then
wildcards joined by punctuation collapse). :mod:`sre_diag.tools.logs.summary` builds the
pattern of a key with it (redacted first) and groups a window's lines by pattern.

Every rule is linear on every input shape (``tests/tools/test_evidence_mask_linear.py``), and
each runs only on text holding its gate (see :data:`_GATES`): most rules cannot match most
messages, and finding that out costs a substring test, not the rule's pass.
"""

from __future__ import annotations

import re

from sre_diag.tools.logs.variants import WILDCARD

__all__ = ["mask_key_text", "mask_message"]

# Applied in order to redacted text. Every rule is linear: runs are bounded by a character
# they cannot contain, and lookarounds are fixed-width.
_NOT_ALNUM_BEFORE = r"(?<![A-Za-z0-9])"
_NOT_ALNUM_AFTER = r"(?![A-Za-z0-9])"
_NOT_HOST_BEFORE = r"(?<![A-Za-z0-9.@-])(?<!//)"  # a URL's host names the upstream: kept
# Month and weekday names, abbreviated, full or in capitals (Jan, January, JAN; Thu, Thurs,
# Thursday, THU): masked as date parts, i.e. only beside a day, a year or another date part.
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTH = (
    r"(?=[ADFJMNOS])(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?|"
    + "|".join(m.upper() for m in _MONTHS)
    + ")"
)
_WEEKDAY = (
    r"(?=[FMSTW])(?:Mon(?:day)?|Tue(?:s(?:day)?)?|Wed(?:nesday)?|Thu(?:rs?(?:day)?)?|Fri(?:day)?"
    r"|Sat(?:urday)?|Sun(?:day)?|" + "|".join(d.upper() for d in _WEEKDAYS) + ")"
)
_HOST_SUFFIX = (
    r"(?:com|net|org|io|dev|app|cloud|local|localdomain|internal|lan|corp|home|svc|cluster|edu|gov"
    r"|info|biz|co|ac)"
)
# A dotted name taken whole (possessive: never given back label by label, which cost a
# backtracking stack as deep as the run), then its last label checked by lookbehinds.
_HOST_NAME = r"[A-Za-z0-9][A-Za-z0-9-]*+(?:\.[A-Za-z0-9][A-Za-z0-9-]*+)++"
_HOST_ENDS = (
    "(?:"
    + "|".join(
        rf"(?<=\.{suffix})|(?<=\.{suffix}\.[a-z][a-z])"
        for suffix in _HOST_SUFFIX.removeprefix("(?:").removesuffix(")").split("|")
    )
    + ")"
)
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    # quoted values after = or : (key="value", "key": "value")
    (re.compile(r"(?P<k>[=:] ?)(?P<q>[\"'])[^\"'\n]{0,200}(?P=q)"), r"\g<k>\g<q><*>\g<q>"),
    # UUIDs
    (
        re.compile(
            _NOT_ALNUM_BEFORE + r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
            r"-[0-9a-fA-F]{12}" + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # ISO dates and times
    (
        re.compile(r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?"),
        WILDCARD,
    ),
    # times with AM/PM (US): 10:05 PM, 3:04:05 a.m.
    (
        re.compile(r"(?<!\d)\d{1,2}:\d\d(?::\d\d(?:[.,]\d+)?)? ?[AaPp]\.?[Mm]\.?(?![A-Za-z])"),
        WILDCARD,
    ),
    # IPv6 and MAC addresses, before clock times (whose digits they may hold): up to 8 groups of
    # hex joined by colons, with a :: or 6+ groups holding a digit (a time has 4 at most)
    # (fe80::1c6a:7dff:fe00:1, a4:5e:60:e2:0b:11, [::1]:80); a run starts only where no letter,
    # digit or colon precedes it, and its length is bounded
    (
        re.compile(
            r"(?<![0-9A-Za-z:])"
            r"(?=[0-9A-Fa-f:]{0,37}::|(?=[0-9A-Fa-f:]{0,39}\d)(?:[0-9A-Fa-f]{1,4}:){5})"
            r"(?:[0-9A-Fa-f]{1,4}:|:){2,7}(?::|[0-9A-Fa-f]{1,4})(?![0-9A-Za-z:])"
        ),
        WILDCARD,
    ),
    (re.compile(r"(?<!\d)\d\d:\d\d:\d\d(?:[.,]\d+)?"), WILDCARD),
    # weekday and month names next to a day or year (syslog, RFC 2822, Apache, Java dates):
    # Mon Jun 14, Jun 14 2023, 14-Jun-2023, 14/Jun/2023:10:00:00; January 5, 2026 is one value
    (
        re.compile(r"(?<![A-Za-z])" + _WEEKDAY + r"\.?,? (?=" + _MONTH + r"|\d)"),
        WILDCARD + " ",
    ),
    (
        re.compile(
            r"(?<![A-Za-z])" + _MONTH + r"\.?(?: {1,2}\d{1,2}, \d{4}(?!\d)"
            r"|(?= {1,2}\d{1,2}(?!\d)| \d{4}(?!\d)|[-/]\d))"
        ),
        WILDCARD,
    ),
    (re.compile(r"(?<=\d[-/ ])" + _MONTH + r"(?=[-/ ]\d)"), WILDCARD),
    # IPv4 with an optional port
    (re.compile(r"\d(?<![\d.]\d)\d{0,2}(?:\.\d{1,3}){3}(?::\d{1,5})?(?![\d.])"), WILDCARD),
    # host names: a dotted name under a common suffix (node-7.prod.example.com, *.internal,
    # a.example.co.uk) or of 3+ labels under a country code (proxy.cse.cuhk.edu.hk, x.b.nl),
    # or a name with a dash or two dots before a port (db-primary:3306); a one-dot name before
    # a number is left alone (Bar.java:123 is a source line, not a host), and so is the host
    # of a URL (https://api.stripe.com/… and https://api.adyen.com/… are different events)
    (
        re.compile(
            _NOT_HOST_BEFORE
            + r"(?:"
            + _HOST_NAME
            + _HOST_ENDS
            + r"|(?=(?:[A-Za-z0-9][A-Za-z0-9-]*+\.){2})"
            + _HOST_NAME
            + r"(?<=\.[a-z][a-z]))(?::\d{1,5}(?!\d))?"
        ),
        WILDCARD,
    ),
    (
        re.compile(
            _NOT_HOST_BEFORE + r"[A-Za-z][A-Za-z0-9]*(?:(?:-[A-Za-z0-9]+)+(?:\.[A-Za-z0-9-]+)*"
            r"|(?:\.[A-Za-z0-9-]+){2,}):\d{2,5}(?![\d.]|:\d)"
        ),
        WILDCARD,
    ),
    # hex: 0x…, or a run of 8+ hex characters with a digit and a letter (digits alone are a
    # number, which may still take a unit: 11721005 bytes (11.1 MB) is one size)
    (re.compile(_NOT_ALNUM_BEFORE + r"0[xX][0-9a-fA-F]+" + _NOT_ALNUM_AFTER), WILDCARD),
    (
        re.compile(
            _NOT_ALNUM_BEFORE
            + r"[-+]?(?:(?=[a-fA-F]*\d)(?=\d*[a-fA-F])[0-9a-fA-F]{8,}|[a-f]{8,}|[A-F]{8,})"
            + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # sizes with their byte unit, which a formatter picks by the value: 24 B, 9.2 KB, 3.1GiB
    (
        re.compile(
            _NOT_ALNUM_BEFORE
            + r"(?<![0-9][.,])[-+]?\d+(?:[.,]\d+)* ?(?:[KMGTPE]i?B|B|bytes)"
            + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # durations with a spelled unit after a space are one value, unit and comparator included:
    # <1 sec, 12 seconds, 3 min, 1.5 hours -> <*> (as 00:01 is)
    (
        re.compile(
            r"(?<![A-Za-z0-9<>])(?:[<>]=?|~)?(?<![0-9][.,])\d+(?:[.,]\d+)* "
            r"(?:[mun]?secs?|[mun]?seconds?|mins?|minutes?|hrs?|hours?|days?)" + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # numbers with a unit (durations, sizes, percentages) keep the unit: 3000ms -> <*>ms.
    # A number starts only where no digit group ends just before it: started at every group of
    # 1.1.1.… the rule rescanned the rest of the run from each (quadratic).
    (
        re.compile(
            _NOT_ALNUM_BEFORE
            + r"(?<![0-9][.,])[-+]?\d+(?:[.,]\d+)*(?=(?:ns|us|µs|ms|s|m|h|d|[KMGT]i?B|B|%)"
            + _NOT_ALNUM_AFTER
            + ")"
        ),
        WILDCARD,
    ),
    # ids mixing letters and digits: 6+ characters, or 4+ with two digits (pay_MVFKZ6VQPC8Z ->
    # pay_<*>, a1b2 -> <*>; ipv6, log4j keep their letters)
    (
        re.compile(
            _NOT_ALNUM_BEFORE + r"(?=[A-Za-z]*\d)(?=\d*[A-Za-z])"
            r"(?:(?=[A-Za-z0-9]{6})|(?=[A-Za-z]*\d[A-Za-z]*\d))[A-Za-z0-9]{4,}" + _NOT_ALNUM_AFTER
        ),
        WILDCARD,
    ),
    # short slot ids after a prefix: one or two capitals and digits (Thunderbird_C6, rack-B12)
    (re.compile(r"(?<=[A-Za-z0-9][_-])[A-Z]{1,2}\d{1,4}" + _NOT_ALNUM_AFTER), WILDCARD),
    # upper-case ids after a prefix, even without a digit: pay_DAMPHFXMULRU -> pay_<*>
    (re.compile(r"(?<=_)[A-Z0-9]{12,}" + _NOT_ALNUM_AFTER), WILDCARD),
    # every remaining digit run (a version's dots included), with its sign where one stands
    # alone before it (offset=-12, blk_-1608…; node-3 keeps its dash): no digit is ever shown
    # (written to start with the class of its first character, so that its pass skips to the
    # candidates in C: a sign not after a letter or digit, or a digit)
    (
        re.compile(r"[-+\d](?:(?<=[-+])(?<![A-Za-z0-9][-+])\d+|(?<=\d)\d*)(?:[.,]\d+)*"),
        WILDCARD,
    ),
    # an empty value in brackets where a value stands: host () vs host (name) -> (<*>)
    (re.compile(r"(?<![^ =:,])\(\)(?![^ ,;.])"), "(" + WILDCARD + ")"),
    # adjacent wildcards joined by punctuation collapse: <*>.<*>, <*>:<*>, a list <*>,<*>, and
    # a value with its other rendering in brackets: 1190 bytes (1.16 KB) -> <*> (<*>) -> <*>
    (re.compile(r"<\*>(?:[.:/,-]<\*>| \(<\*>\))+"), WILDCARD),
)


def _any_of(*needles: str) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(needle) for needle in needles))


# A rule runs only on text holding its gate: a substring (``""``: any text) and, when given, a
# match of a needle that every match of the rule contains (a cheap search: each needle starts
# with a literal or a small class, so the search skips to its candidates in C). What a message
# cannot match then costs a substring test or one search, not the rule's pass, and a needle
# shared by consecutive rules is searched once while the text is unchanged. Gates only skip
# passes that would find nothing (tests/tools/test_pattern_quality.py compares with every rule
# run); each needle is linear like the rules (tests/tools/test_evidence_mask_linear.py).
_MONTH_NEEDLE = _any_of(*_MONTHS, *(m.upper() for m in _MONTHS))
_HH = "[0-9a-fA-F]"
_GATES: tuple[tuple[str, re.Pattern[str] | None], ...] = (
    ("", re.compile(r"[\"'](?:(?<=[=:][\"'])|(?<=[=:] [\"']))")),  # ="  = '  :"  : '
    ("-", re.compile(rf"-{_HH}{{4}}-{_HH}{{4}}-{_HH}{{4}}-")),  # a UUID's middle groups
    ("-", re.compile(r"-\d\d-\d")),  # 2026-11-28
    (":", re.compile(r":\d\d(?::\d\d)?(?:[.,]\d++)? ?[AaPp]")),  # 10:05 PM
    (":", re.compile(rf":(?::|(?:{_HH}{{1,4}}:){{4}})")),  # a :: or 6+ groups
    (":", re.compile(r":\d\d:\d")),  # 10:05:00
    ("", _any_of(*_WEEKDAYS, *(d.upper() for d in _WEEKDAYS))),
    ("", _MONTH_NEEDLE),
    ("", _MONTH_NEEDLE),
    (".", re.compile(r"\.\d{1,3}\.\d{1,3}\.\d")),  # 10.0.0.1
    (".", re.compile(r"\.[a-z](?<=[A-Za-z0-9-]\.[a-z])")),  # a dotted name
    (":", re.compile(r"[-.][A-Za-z0-9]*+:\d\d")),  # host:port: a dash or dot in the name
    ("", re.compile(r"[xX](?<=(?<![A-Za-z0-9])0[xX])[0-9a-fA-F]")),  # 0x…
    ("", re.compile(rf"{_HH}{{8}}")),
    ("", re.compile(r"\d ?(?:[KMGTPE]i?B|B|bytes)(?![A-Za-z0-9])")),  # 24 B, 9.2 KB, 7 bytes
    ("", re.compile(r"\d [numshd]")),  # 12 seconds
    ("", re.compile(r"\d[nuµmshdKMGTB%]")),  # 3000ms
    ("", re.compile(r"\d(?:(?<=[A-Za-z]\d)|[A-Za-z])")),  # a letter beside a digit
    ("", re.compile(r"[_-][A-Z]{1,2}\d")),  # _C6
    ("_", re.compile(r"_[A-Z0-9]{12}")),  # _DAMPHFXMULRU
    ("", None),  # digits: the rule's own pass starts only at a digit or sign
    ("()", None),
    (WILDCARD, None),
)
_Gated = tuple[tuple[re.Pattern[str], str, str, re.Pattern[str] | None], ...]
_GATED: _Gated = tuple(
    (pattern, replacement, literal, needle)
    for (pattern, replacement), (literal, needle) in zip(_MASKS, _GATES, strict=True)
)
# A pattern key's text holds no ASCII digit but 0 (summary.pattern_key turns every ASCII digit
# into 0; redaction adds none): on such text that is ASCII, the needles that start with a digit
# start with the literal 0 instead, which the search finds several times faster than a class.
# On that text each finds what its general form finds (tests/tools/test_pattern_quality.py).
_ZERO_NEEDLES = {
    14: re.compile(r"0 ?(?:[KMGTPE]i?B|B|bytes)(?![A-Za-z0-9])"),
    15: re.compile(r"0 [numshd]"),
    16: re.compile(r"0[numshdKMGTB%]"),
    17: re.compile(r"0(?:(?<=[A-Za-z]0)|[A-Za-z])"),
}
_GATED_ZERO: _Gated = tuple(
    (pattern, replacement, literal, _ZERO_NEEDLES.get(index, needle))
    for index, (pattern, replacement, literal, needle) in enumerate(_GATED)
)


def mask_message(text: str) -> str:
    """``text`` with its variable parts as ``<*>`` (the rules above, in order)."""
    return _masked(text, _GATED)


def mask_key_text(text: str) -> str:
    """:func:`mask_message` of text whose only ASCII digit is ``0`` (a pattern key's, redacted)."""
    return _masked(text, _GATED_ZERO if text.isascii() else _GATED)


def _masked(text: str, gated: _Gated) -> str:
    searched: re.Pattern[str] | None = None  # the needle last searched in this very text
    found = False
    for pattern, replacement, literal, needle in gated:
        if literal not in text:
            continue
        if needle is not None:
            if needle is not searched:
                searched, found = needle, needle.search(text) is not None
            if not found:
                continue
        masked = pattern.sub(replacement, text)
        if masked != text:
            text, searched = masked, None
    return text
