"""A cluster broker reads the TLS files and the credential it calls its peers with (at a
crash-tail reconciliation, broker/crash_tail_sync.py) on every start, before its store
opens: a bad one fails each start alike, and never one that has already begun to reconcile
(which would leave its store as if that had been done)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq.broker.server import BrokerServer
from popmq.broker_core import BrokerConfig, StoreConfig
from popmq.coordination.config import ClusterConfig
from popmq.runtime.config import ServerConfig
from popmq.security.config import SecurityConfig
from popmq.security.tls import TLSFilesError


def test_a_missing_broker_tls_file_fails_the_start_before_the_store_opens(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "b1"
    config = ServerConfig(
        listen="127.0.0.1:0",
        cluster=ClusterConfig(etcd="127.0.0.1:1"),  # never reached
        broker=BrokerConfig(broker_name="b1", store=StoreConfig(data_dir=data_dir)),
        security=SecurityConfig(
            broker_tls=True, broker_tls_ca_file=str(tmp_path / "missing-ca.pem")
        ),
    )
    server = BrokerServer(config)
    with pytest.raises(TLSFilesError, match="broker_tls_ca_file"):
        asyncio.run(server.start())
    assert not data_dir.exists()
