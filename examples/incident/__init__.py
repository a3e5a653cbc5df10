"""The bundled demo incident (runbooks, logs, cassettes, MySQL seed).

Installed as the data package ``sre_diag.resources.incident`` (see pyproject), which is how the
product finds it (``sre_diag.resources``); scripts in this folder are run by path, not imported.
"""
