"""PySpark 4 data source "popmq" (planned: see the Spark connector issue)."""

__all__: list[str] = []
