"""PySpark 4 data source "popmq": read topics by offset or by POP, write DataFrames to topics.

Register it with a session, then use the short name::

    from popmq.spark import PopMQDataSource
    spark.dataSource.register(PopMQDataSource)
    df = spark.read.format("popmq").option("endpoint", "127.0.0.1:8081") \\
        .option("topic", "orders").load()

Importing ``spark_connector`` while a SparkSession is active registers the source with it,
so ``format("popmq")`` works right after the import; ``register(spark)`` does the same for
a session created later. docs/spark.md describes the modes, options and guarantees.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from popmq.spark.errors import (
    DataLossError,
    OffsetFormatError,
    OptionError,
    PopMQConnectorError,
)
from popmq.spark.source import PopMQDataSource

__all__ = [
    "DataLossError",
    "OffsetFormatError",
    "OptionError",
    "PopMQConnectorError",
    "PopMQDataSource",
    "register",
]


def register(spark: SparkSession | None = None) -> None:
    """Register the "popmq" source with `spark` (default: the active session).

    Raises:
        RuntimeError: No session was given and none is active.
    """
    session = spark if spark is not None else SparkSession.getActiveSession()
    if session is None:
        raise RuntimeError("no active SparkSession: create one, then call register(spark)")
    session.dataSource.register(PopMQDataSource)


def _register_with_active_session() -> None:
    # Executors import this package too (to unpickle readers); they have no session.
    session = SparkSession.getActiveSession()
    if session is not None:
        session.dataSource.register(PopMQDataSource)


_register_with_active_session()
