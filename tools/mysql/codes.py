"""MySQL and MariaDB failures mapped to the stable adapter error codes.

Server and client error numbers are grouped by the code they map to (:func:`classify`); the
exception text never travels further than the log.
"""

from __future__ import annotations

from sre_diag.tools.base import AdapterErrorCode

__all__ = ["MEANINGS", "classify", "error_number"]


# Server / client error numbers, grouped by the stable code they map to.
_TIMEOUT_ERRORS = frozenset({1969, 3024, 1317, 1028})
_UNAVAILABLE_ERRORS = frozenset(
    {1040, 1045, 1053, 1129, 1130, 1203, 1226, 2002, 2003, 2005, 2006, 2013, 2055}
)
_FORBIDDEN_ERRORS = frozenset({1044, 1142, 1143, 1227, 1370, 1792})
_INVALID_INPUT_ERRORS = frozenset(
    {1052, 1054, 1055, 1060, 1064, 1066, 1111, 1140, 1146, 1222, 1241, 1242, 1248, 1305,
     1582, 1583, 1630, 4015, 4074}  # 4015, 4074: a window function where none may be
)  # fmt: skip


def classify(error: BaseException) -> AdapterErrorCode:
    """Map a driver/server/network failure to a stable code."""
    if isinstance(error, TimeoutError):
        return AdapterErrorCode.TIMEOUT
    number = error_number(error)
    for codes, result in (
        (_TIMEOUT_ERRORS, AdapterErrorCode.TIMEOUT),
        (_UNAVAILABLE_ERRORS, AdapterErrorCode.UNAVAILABLE),
        (_FORBIDDEN_ERRORS, AdapterErrorCode.FORBIDDEN_QUERY),
        (_INVALID_INPUT_ERRORS, AdapterErrorCode.INVALID_INPUT),
    ):
        if number in codes:
            return result
    if isinstance(error, ConnectionError | OSError):
        return AdapterErrorCode.UNAVAILABLE
    return AdapterErrorCode.INTERNAL


def error_number(error: BaseException) -> int | None:
    """The MySQL error number carried by pymysql errors (``args[0]``), if any."""
    args = getattr(error, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


# What an operator is told, in ``check``, for the error numbers it meets there.
MEANINGS = {
    1044: "access denied to the database",
    1045: "access denied (user or password)",
    1049: "unknown database",
    1142: "the account may not write diag_audit",
    1054: "diag_audit has an older layout (no kind column); drop it or add"
    " `id BIGINT AUTO_INCREMENT PRIMARY KEY` and `kind VARCHAR(16)`",
    1146: "table does not exist",
    2003: "cannot connect (nothing listening, or a firewall)",
    2005: "unknown host",
    2013: "the server closed the connection",
}
