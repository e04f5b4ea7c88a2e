"""Subcommands of the `rly` command line (one module each)."""
