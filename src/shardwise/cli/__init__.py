"""Command-line interface: one module per command group, registered in :mod:`shardwise.cli.main`."""
