"""popmq's apache.rocketmq.v2 protos describe exactly the official client's wire schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("wire_schema.py")


def _schema(*modules: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *modules], capture_output=True, text=True, check=True
    ).stdout
    schema: dict[str, object] = json.loads(out)
    return schema


def test_generated_schema_matches_the_official_clients_descriptors() -> None:
    official = _schema(
        "rocketmq.grpc_protocol.definition_pb2", "rocketmq.grpc_protocol.service_pb2"
    )
    ours = _schema(
        "popmq._gen.apache.rocketmq.v2.definition_pb2", "popmq._gen.apache.rocketmq.v2.service_pb2"
    )
    assert "service apache.rocketmq.v2.MessagingService" in ours
    assert len(official) > 60  # 60+ messages and enums: a real dump, not an empty one
    missing = sorted(set(official) - set(ours))
    extra = sorted(set(ours) - set(official))
    assert missing == [] and extra == []
    differing = [name for name in sorted(official) if official[name] != ours[name]]
    assert differing == []
