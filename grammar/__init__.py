"""Package data: the Relay text grammar (relay.lark)."""
