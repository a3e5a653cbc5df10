"""``prepare_tls_context`` / ``take_tls_context``: the model client's TLS context can be built
in a thread at a command's start (issue 23, cold start) and is then exactly httpx's default."""

from __future__ import annotations

import ssl

import httpx
import pytest

from sre_diag.harness.model import model_http_client
from sre_diag.http_bounds import prepare_tls_context, take_tls_context


def test_nothing_prepared_is_httpx_s_own_default() -> None:
    while take_tls_context() is not True:  # one left by an in-process diagnose that failed early
        pass
    assert take_tls_context() is True


def test_the_prepared_context_is_httpx_s_default_and_taken_once() -> None:
    prepare_tls_context()
    prepare_tls_context()  # one is already being built: nothing more
    taken = take_tls_context()
    assert isinstance(taken, ssl.SSLContext)
    default = httpx.create_ssl_context()
    assert taken.verify_mode == default.verify_mode == ssl.CERT_REQUIRED
    assert taken.check_hostname is default.check_hostname is True
    assert taken.cert_store_stats() == default.cert_store_stats()
    assert taken.options == default.options
    assert take_tls_context() is True


def test_a_context_that_cannot_be_built_fails_where_the_client_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", "/nonexistent/ca.pem")
    with pytest.raises(FileNotFoundError):
        httpx.AsyncClient()  # what httpx does without a prepared context
    prepare_tls_context()
    with pytest.raises(FileNotFoundError):
        model_http_client(timeout_seconds=1, connections=1, max_draft_bytes=1024)
