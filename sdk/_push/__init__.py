"""The parts of ``popmq.sdk.push_consumer``, one concern a module.

``push_consumer.AsyncPushConsumer`` builds them and passes each its collaborators; none of
them reaches into another's state. POP mode: ``flow_control`` (room and held messages),
``listener`` (calling the listener), ``dispatcher`` (FIFO groups, ack/nack/release),
``acker`` (batched acks), ``invisible_renewal`` and ``pop_receiver``. Queue-exclusive mode:
``assignment`` (QueryAssignment) and ``queue_worker`` (one queue by offset). Both:
``options`` and ``registration`` (heartbeats).
"""
