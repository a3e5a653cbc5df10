"""Processes: ``serve`` (HTTP or Socket Mode), the queue worker, and the operations endpoints."""
