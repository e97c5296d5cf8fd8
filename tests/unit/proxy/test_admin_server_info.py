"""GetServerInfo's configuration is shown to SUPER users only (secrets redacted even then)."""

from __future__ import annotations

import asyncio
from typing import Any

from popmq._gen.popmq.v1 import admin_pb2
from popmq.proxy.admin import AdminServicer
from popmq.runtime.settings import items, load
from popmq.security.model import ANONYMOUS_SUPER, Principal, UserType, set_principal
from tests.unit.conftest import OpenBroker


class _Context:
    """GetServerInfo reads nothing of its grpc context unless it fails."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


async def _info(servicer: AdminServicer, principal: Principal) -> Any:
    set_principal(principal)  # this task's context only: each call below is its own task
    return await servicer.GetServerInfo(admin_pb2.GetServerInfoRequest(), _Context())


def test_server_info_config_is_for_super_users_only(open_broker: OpenBroker) -> None:
    config = load(environ={"POPMQ_SECURITY_METRICS_BEARER_TOKEN": "s3cr3t-token"})

    async def scenario() -> None:
        async with open_broker() as broker:
            servicer = AdminServicer(broker, config_items=items(config))
            normal = Principal("alice", UserType.NORMAL, "ipv4:127.0.0.1:1")
            root = Principal("root", UserType.SUPER, "ipv4:127.0.0.1:2")
            hidden, shown, anonymous = await asyncio.gather(
                asyncio.create_task(_info(servicer, normal)),
                asyncio.create_task(_info(servicer, root)),
                asyncio.create_task(_info(servicer, ANONYMOUS_SUPER)),
            )
            assert dict(hidden.config) == {}
            assert hidden.version and hidden.data_dir == shown.data_dir  # the rest is there
            assert shown.config["security.metrics_bearer_token"] == '"<redacted>"'
            assert "s3cr3t" not in str(shown)
            assert dict(anonymous.config) == dict(shown.config)  # authentication off: as today

    asyncio.run(scenario())
