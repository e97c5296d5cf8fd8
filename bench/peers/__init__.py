"""Peer servers (redis-server, nats-server) and popmq as child processes, and one client
interface over all three (``targets``)."""
