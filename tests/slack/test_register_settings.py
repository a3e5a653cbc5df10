"""``register(app)`` refuses an empty ``DIAG_ADMIN_CHANNELS`` as ``serve`` does (issue 22).

A plugin mounted where it may act nowhere answered nothing and said nothing; ``serve`` refused
the same setting at start-up. Both now raise the same ``ConfigError`` before anything is mounted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slack_bolt.async_app import AsyncApp

from sre_diag.errors import ConfigError
from sre_diag.service.serve import check_serve_settings
from sre_diag.slack import register
from tests.conftest import StartServer
from tests.harness.support import settings_for


async def test_register_refuses_empty_admin_channels_like_serve(
    model_server: StartServer, tmp_path: Path
) -> None:
    model = await model_server([])
    settings = settings_for(
        model, tmp_path, DIAG_ADMIN_CHANNELS="", SLACK_BOT_TOKEN="xoxb-register-test"
    )
    app = AsyncApp(token="xoxb-register-test", request_verification_enabled=False)
    handlers_before = list(app.client.retry_handlers)
    with pytest.raises(ConfigError) as refused:
        register(app, settings)
    with pytest.raises(ConfigError) as serve_refused:
        check_serve_settings(settings, socket_mode=True)
    assert str(refused.value) == str(serve_refused.value)
    assert str(refused.value).startswith("DIAG_ADMIN_CHANNELS is empty: the bot would act nowhere")
    # Refused before anything was mounted: the client is as it was.
    assert app.client.retry_handlers == handlers_before
