"""The command line and its commands: diagnose, serve, worker, replay, demo, check, patterns,
eval."""
