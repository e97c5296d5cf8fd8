"""Chaos tools: the real server as a subprocess, SIGKILLed while clients run (checker.py)."""
