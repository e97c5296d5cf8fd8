"""Warnings of a failure that repeats (a full disk fails every write and every background
retry until space returns): logged when the text changes and then every `every_s`, at
debug level in between, so a read-only store does not write a warning a second."""

from __future__ import annotations

import logging
import time


class RepeatedWarning:
    """One source of warnings (the writer, the revive loop); not thread-safe (loop only)."""

    def __init__(self, logger: logging.Logger, every_s: float = 30.0) -> None:
        self._log = logger
        self._every_s = every_s
        self._last_text = ""
        self._last_logged = 0.0

    def warn(self, message: str, *args: object) -> None:
        text = message % args if args else message
        now = time.monotonic()
        if text != self._last_text or now - self._last_logged >= self._every_s:
            self._last_text, self._last_logged = text, now
            self._log.warning("%s", text)
        else:
            self._log.debug("%s", text)
