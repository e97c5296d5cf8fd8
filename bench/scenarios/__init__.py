"""The scenarios run side by side with Redis Streams and NATS JetStream, one module each.

Every module has ``run(settings, ...) -> ScenarioResult`` (used by ``bench.report``),
``render(result) -> str`` (its markdown tables) and ``main(*, quick) -> str`` (registered in
``bench.__main__``), and a ``settings(quick)`` giving its sizes.
"""
