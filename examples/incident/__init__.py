"""The bundled demo incident (runbooks, logs, cassettes, MySQL seed).

Installed as the data package ``plugin.resources.incident`` (see pyproject), which is how the
product finds it (``plugin.resources``); scripts in this folder are run by path, not imported.
"""
