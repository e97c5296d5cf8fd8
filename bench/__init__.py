"""popmq benchmarks: `python -m bench --scenario NAME [--quick]` (`make bench` runs all)."""
