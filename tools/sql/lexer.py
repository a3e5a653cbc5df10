"""A conservative MariaDB/MySQL lexer: the last check of the exact text sent to the server.

The SQL guard checks a sqlglot tree, but the server parses *text*. Wherever the two readers of
a text disagree (a parser differential), a statement that was checked is not the statement that
runs. Two such gaps were real: sqlglot pastes some nodes verbatim into its output (charset names,
interval units, type parameters), and it reads ``--`` followed by any Unicode whitespace as a
comment where MariaDB only does so for ASCII whitespace and control characters.

This module closes the class rather than the examples. It reads text by MariaDB's lexical rules
(``'…'`` strings with backslash escapes and doubled quotes, back-quoted identifiers, numbers,
words, operators) and refuses whatever it cannot classify unambiguously:

- any comment form (``--``, ``#``, ``/* … */``, including the executable ``/*! … */``);
- ``;`` (one statement only), ``@`` variables, ``?`` placeholders, ``\\`` outside strings,
  braces, brackets and every other character it does not know;
- any character outside printable ASCII, except inside a ``'…'`` string literal;
- a number glued to a word (``1e`` / ``1abc`` are identifiers to MariaDB);
- a back-quoted name directly followed by ``(`` (MariaDB then calls a *stored* function of that
  name, e.g. `` `now`() ``);
- in *rendered* mode, any bare word outside a fixed vocabulary of the keywords, function names,
  units, type names and character sets that the guard's rendering can legitimately produce.

Two modes: :func:`scan_raw` for the model's own text (before parsing: comments, non-ASCII and
stacked statements are refused up front, and nesting depth is bounded so the parser never
recurses deeply) and :func:`scan_rendered` for the guard's rendering (all of the above plus the
vocabulary; the caller compares token counts with the checked tree).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sre_diag.tools.errors import LexRefusal

MAX_PAREN_DEPTH = 32


class LexKind(StrEnum):
    """Token classes the scanner knows."""

    WORD = "WORD"
    QUOTED_IDENT = "QUOTED_IDENT"
    STRING = "STRING"
    NUMBER = "NUMBER"
    OPERATOR = "OPERATOR"


@dataclass(frozen=True, slots=True)
class LexToken:
    """One classified token; ``text`` is the exact source slice."""

    kind: LexKind
    text: str


_WORD_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_WORD_CHARS = _WORD_START | frozenset("0123456789")
_DIGITS = frozenset("0123456789")
_SPACE = frozenset(" \t\r\n")
# Longest first: a multi-character operator wins over its prefix.
_OPERATORS = (
    "<=>", "->>", "<=", ">=", "<>", "!=", "<<", ">>", "->",
    "(", ")", ",", ".", "+", "-", "*", "/", "%", "=", "<", ">", "&", "|", "^", "~",
)  # fmt: skip
_QUOTED_IDENT_CHARS = frozenset(chr(c) for c in range(0x20, 0x7F)) - {"`"}

# Words the guard's rendering may contain: keywords of a SELECT, the rendered names of the
# allowlisted functions, interval units, CAST target types and character sets.
RENDERED_VOCABULARY = frozenset(
    """
    SELECT DISTINCT FROM WHERE GROUP BY HAVING ORDER ASC DESC LIMIT OFFSET AS ON USING JOIN
    INNER LEFT RIGHT OUTER CROSS NATURAL STRAIGHT_JOIN UNION ALL INTERSECT EXCEPT WITH ROLLUP
    AND OR XOR NOT IS NULL TRUE FALSE UNKNOWN IN BETWEEN LIKE ESCAPE EXISTS CASE WHEN THEN ELSE
    END INTERVAL DIV COLLATE SEPARATOR OVER PARTITION ROWS RANGE UNBOUNDED PRECEDING FOLLOWING
    CURRENT ROW WINDOW NULLS FIRST LAST
    CAST CHAR CHARACTER SET SIGNED UNSIGNED INTEGER INT BIGINT DECIMAL DATE DATETIME TIME
    TIMESTAMP DOUBLE FLOAT BINARY JSON VARCHAR TEXT
    COUNT SUM AVG MIN MAX GROUP_CONCAT ANY_VALUE STD STDDEV STDDEV_POP STDDEV_SAMP VARIANCE
    VAR_POP VAR_SAMP
    ROW_NUMBER RANK DENSE_RANK NTILE LAG LEAD FIRST_VALUE LAST_VALUE NTH_VALUE PERCENT_RANK
    CUME_DIST
    IF IFNULL COALESCE NULLIF GREATEST LEAST
    CONCAT CONCAT_WS SUBSTRING SUBSTR SUBSTRING_INDEX LOWER UPPER LCASE UCASE TRIM LTRIM RTRIM
    LEADING TRAILING BOTH LENGTH CHAR_LENGTH CHARACTER_LENGTH LOCATE POSITION INSTR FIELD
    FIND_IN_SET
    ABS CEIL CEILING FLOOR ROUND TRUNCATE SIGN POW POWER SQRT LN EXP
    DATE_FORMAT STR_TO_DATE NOW CURDATE CURTIME CURRENT_TIMESTAMP CURRENT_DATE CURRENT_TIME
    UTC_TIMESTAMP UTC_DATE UTC_TIME DATE_ADD DATE_SUB ADDDATE SUBDATE DATEDIFF TIMESTAMPDIFF
    TIMESTAMPADD EXTRACT YEAR QUARTER MONTH WEEK DAY DAYOFWEEK DAYOFMONTH DAYOFYEAR DAYNAME HOUR
    MINUTE SECOND MICROSECOND LAST_DAY TIMEDIFF TIME_TO_SEC SEC_TO_TIME UNIX_TIMESTAMP
    FROM_UNIXTIME WEEKDAY YEARWEEK MONTHNAME CONVERT_TZ
    SECOND_MICROSECOND MINUTE_MICROSECOND MINUTE_SECOND HOUR_MICROSECOND HOUR_SECOND HOUR_MINUTE
    DAY_MICROSECOND DAY_SECOND DAY_MINUTE DAY_HOUR YEAR_MONTH
    JSON_EXTRACT JSON_UNQUOTE
    UTF8MB4 UTF8MB3 UTF8 LATIN1 ASCII
    """.split()
)


def scan_raw(text: str) -> list[LexToken]:
    """Classify the model's own text; raises :class:`LexRefusal` on anything ambiguous.

    Trailing ``;`` (and whitespace) are tolerated here only, since models often end a statement
    with one; the rendering the server receives never carries it.
    """
    stripped = text.rstrip()
    while stripped.endswith(";"):
        stripped = stripped[:-1].rstrip()
    return _Scanner(stripped, rendered=False).scan()


def scan_rendered(text: str) -> list[LexToken]:
    """Classify the exact text about to be sent; raises :class:`LexRefusal` on any doubt."""
    return _Scanner(text, rendered=True).scan()


class _Scanner:
    """One left-to-right pass; every branch either consumes a known token or refuses."""

    def __init__(self, text: str, *, rendered: bool) -> None:
        self._text = text
        self._rendered = rendered
        self._pos = 0
        self._depth = 0
        self._tokens: list[LexToken] = []

    def scan(self) -> list[LexToken]:
        text = self._text
        while self._pos < len(text):
            char = text[self._pos]
            if char in _SPACE:
                self._pos += 1
            elif char == "'" or (char == '"' and not self._rendered):
                self._string(char)
            elif char == "`":
                self._quoted_ident()
            elif char in _DIGITS:
                self._number()
            elif char in _WORD_START:
                self._word()
            else:
                self._operator()
        return self._tokens

    def _emit(self, kind: LexKind, start: int) -> None:
        self._tokens.append(LexToken(kind, self._text[start : self._pos]))

    def _string(self, quote: str) -> None:
        """A quoted literal: backslash escapes any character, a doubled quote is a quote.

        ``"…"`` is a string to MariaDB without ``ANSI_QUOTES`` (the adapter's session mode); it
        is accepted from the model only, since the rendering always uses ``'…'``.
        """
        text, start = self._text, self._pos
        pos = start + 1
        while pos < len(text):
            char = text[pos]
            if char == "\\":
                pos += 2
                continue
            if char == quote:
                if text.startswith(quote * 2, pos):
                    pos += 2
                    continue
                self._pos = pos + 1
                self._emit(LexKind.STRING, start)
                return
            pos += 1
        raise LexRefusal("unterminated string")

    def _quoted_ident(self) -> None:
        """A back-quoted name of printable ASCII without back-quotes (no ```` escapes)."""
        text, start = self._text, self._pos
        end = text.find("`", start + 1)
        if end < 0:
            raise LexRefusal("unterminated quoted identifier")
        body = text[start + 1 : end]
        if not body or any(char not in _QUOTED_IDENT_CHARS for char in body):
            raise LexRefusal("quoted identifier with unclassifiable characters")
        if text.startswith("``", end):
            raise LexRefusal("escaped back-quote")
        self._pos = end + 1
        rest = text[self._pos :].lstrip(" \t\r\n")
        if rest.startswith("("):
            raise LexRefusal("quoted name called as a function")
        self._emit(LexKind.QUOTED_IDENT, start)

    def _number(self) -> None:
        """Digits, an optional fraction and exponent; never glued to a word character."""
        text, start = self._text, self._pos
        pos = _skip(text, start, _DIGITS)
        if text.startswith(".", pos) and pos + 1 < len(text) and text[pos + 1] in _DIGITS:
            pos = _skip(text, pos + 1, _DIGITS)
        if pos < len(text) and text[pos] in "eE":
            exponent = pos + 1
            if exponent < len(text) and text[exponent] in "+-":
                exponent += 1
            if exponent < len(text) and text[exponent] in _DIGITS:
                pos = _skip(text, exponent, _DIGITS)
        if pos < len(text) and (text[pos] in _WORD_CHARS or text[pos] in "$`"):
            raise LexRefusal("number glued to a word")
        if start > 0 and text[start - 1] == ".":
            raise LexRefusal("number after a dot")
        self._pos = pos
        self._emit(LexKind.NUMBER, start)

    def _word(self) -> None:
        text, start = self._text, self._pos
        pos = _skip(text, start, _WORD_CHARS)
        if pos < len(text) and (text[pos] == "$" or text[pos] == "'" or text[pos] == "`"):
            raise LexRefusal("word glued to a quote or $")
        word = text[start:pos]
        if self._rendered and word.upper() not in RENDERED_VOCABULARY:
            raise LexRefusal(f"unknown word {word[:32]!r}")
        self._pos = pos
        self._emit(LexKind.WORD, start)

    def _operator(self) -> None:
        text, pos = self._text, self._pos
        char = text[pos]
        if ord(char) > 0x7E or ord(char) < 0x20:
            raise LexRefusal(f"character U+{ord(char):04X} outside a string")
        if text.startswith("--", pos) or text.startswith("/*", pos) or char == "#":
            raise LexRefusal("comment")
        if text.startswith("*/", pos):
            raise LexRefusal("comment end")
        for operator in _OPERATORS:
            if text.startswith(operator, pos):
                self._track_depth(operator)
                self._pos = pos + len(operator)
                self._emit(LexKind.OPERATOR, pos)
                return
        raise LexRefusal(f"character {char!r}")

    def _track_depth(self, operator: str) -> None:
        if operator == "(":
            self._depth += 1
            if self._depth > MAX_PAREN_DEPTH:
                raise LexRefusal("nesting too deep")
        elif operator == ")":
            self._depth -= 1
            if self._depth < 0:
                raise LexRefusal("unbalanced parenthesis")


def _skip(text: str, pos: int, chars: frozenset[str]) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos
