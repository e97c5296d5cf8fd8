"""Replica sets of a shard: a leader's writes copied to followers, leadership in etcd.

docs/replication.md is the user's view. Modules: oplog (the batch encoding and the log
position kept in the store), log (the leader's side: positions, the in-memory log, the
in-sync wait), election (the shard's keys in etcd), follower (the follower's side),
service (ReplicationService), replica (the `popmq broker --shard` process and its roles).
"""
