"""POP consumption: the pop path and everything that tracks a delivery until it is done.

- reader.py: pop, the per-queue read under its try-lock (with context.py's QueueRead);
- live_checkpoints.py: the only owner of checkpoint state (tracking, revive timer, the
  flush hook); checkpoint_buffer.py: chained checkpoints held in memory until they linger;
  checkpoint.py: one checkpoint and its record;
- ack.py: ack, nack, change-invisible-time, dead-letter, receipt-handle resolution;
  receipt.py: the receipt-handle codec; superseded.py: handles refused after a move;
- fifo.py: FIFO message groups; revive.py: the revive loop; retry.py: retry and dead-letter
  topics, and where a copy of an unacked message goes.
"""
