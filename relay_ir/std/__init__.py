"""Package data: the standard prelude in Relay text (prelude.rly)."""
