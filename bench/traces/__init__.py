"""Recorded-style agent traffic kept apart from the test suite, and the scripts that wrote it."""
