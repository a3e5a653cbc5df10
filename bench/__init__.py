"""Benchmark suite: ``python -m bench [--quick] [--out FILE]`` (see ``bench/__main__.py``)."""
