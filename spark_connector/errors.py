"""Errors the connector raises itself (server errors arrive as the SDK's PopMQError family)."""

from __future__ import annotations

__all__ = ["DataLossError", "OffsetFormatError", "OptionError", "PopMQConnectorError"]


class PopMQConnectorError(Exception):
    """Root of the errors raised by the popmq Spark connector itself."""


class OptionError(PopMQConnectorError, ValueError):
    """A data source option is missing, malformed or out of range; the message says which
    option and what is allowed."""


class OffsetFormatError(PopMQConnectorError, ValueError):
    """A checkpointed offset was written by another format version, mode or topic."""


class DataLossError(PopMQConnectorError):
    """Offsets the query needs are gone (retention deleted them, or the topic was deleted
    or lost queues). Set failOnDataLoss=false to skip what is gone instead."""
