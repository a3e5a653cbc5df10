"""The offline doubles the product ships, all on loopback, speaking the real wire protocols.

- ``loopback``: start an aiohttp application on a free 127.0.0.1 port (``LoopbackServer``).
- ``scripted_model``: an OpenAI-compatible chat server that answers a script in order
  (``demo`` replays a recorded cassette through it; tests and ``bench`` drive the harness with it).
- ``recording_slack``: a Slack Web API that records every call (``replay`` posts to it).

They are part of the product (``demo`` and ``replay`` run on them), so they ship in the wheel.
``bench/`` and the tests reuse them.
"""
