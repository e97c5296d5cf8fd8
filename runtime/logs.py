"""Server logging: one line per event, with its context, as text or JSON.

Context travels in `extra` (`log.info("...", extra={"topic": t, "group": g})`) under the
names in CONTEXT_FIELDS; both formats print it, so a line says which topic, group and client
it is about without parsing the message.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

CONTEXT_FIELDS = ("rpc", "code", "duration_ms", "peer", "topic", "group", "detail")
"""Record attributes a line carries when present (JSON: all of them)."""
_IN_TEXT_MESSAGE = frozenset({"rpc", "code", "duration_ms"})
"""Context the RPC log line's text message already shows."""

LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    """How the server logs."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    """Least severe level written. At info: admin RPCs, failed RPCs, topic and group changes,
    startup and shutdown; at debug also every successful messaging RPC."""
    format: Literal["text", "json"] = "text"
    """text: `time LEVEL logger: message key=value ...`; json: one JSON object per line."""

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"log.level {self.level!r} is not one of {', '.join(LEVELS)}")
        if self.format not in ("text", "json"):
            raise ValueError(f"log.format {self.format!r} is not one of text, json")


def _context(record: logging.LogRecord) -> dict[str, object]:
    return {
        name: getattr(record, name)
        for name in CONTEXT_FIELDS
        if getattr(record, name, None) not in (None, "")
    }


class TextFormatter(logging.Formatter):
    """`2026-11-21T16:00:00.123Z INFO proxy.rpc: message topic=orders group=billing`."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line = f"{stamp.replace('+00:00', 'Z')} {record.levelname} {record.name}: "
        line += record.getMessage()
        for key, value in _context(record).items():
            if key in _IN_TEXT_MESSAGE:
                continue
            text = str(value)
            line += f" {key}={json.dumps(text) if (' ' in text or not text) else text}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the context fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_context(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(config: LogConfig) -> None:
    """Send the root logger's records to stderr in the configured format and level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if config.format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(config.level.upper())
