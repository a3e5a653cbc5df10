"""The bundled eval suite: one folder per case (``case.json``, cassettes, runbooks, logs, MySQL).

Installed as the data package ``plugin.resources.evals`` (see pyproject), which is how an
installed ``sre-diag eval`` finds it (``plugin.resources.bundled_evals()``, ``python -m
plugin.resources evals``); the scripts in this folder write the cases and are run by path.
"""
