"""Helpers several test folders share (real servers the tests start)."""
