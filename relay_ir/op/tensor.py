"""Operator definitions (filled in by the operator library)."""
