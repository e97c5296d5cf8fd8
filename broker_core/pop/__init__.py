"""POP consumption: checkpoints, receipt handles, revive and the checkpoint buffer."""
