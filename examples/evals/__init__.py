"""The bundled eval suite: one folder per case (``case.json``, cassettes, runbooks, logs, MySQL).

Installed as the data package ``sre_diag.resources.evals`` (see pyproject), which is how an
installed ``sre-diag eval`` finds it (``sre_diag.resources.bundled_evals()``, ``python -m
sre_diag.resources evals``); the scripts in this folder write the cases and are run by path.
"""
