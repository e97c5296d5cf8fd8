"""docs/security.md's walk-through, step 4, run as written against a real server with TLS and
authentication (only the host, the CA file and the root secret's path are this test's), then
step 6's checks as the user it made."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq import Admin, Credentials, PermissionDeniedError, Producer, SimpleConsumer, TLSConfig
from popmq.security import audit
from popmq.security.config import SecurityConfig
from tests.support.certs import CertificateAuthority
from tests.support.server_thread import ServerThread

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
ROOT = Credentials("root", "r00t-s3cret-from-a-file")


def _step_four() -> str:
    text = DOC.read_text()
    start = text.index("**4. A NORMAL user")
    block = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    assert block is not None, "step 4 has no sh block"
    return block.group(1)


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "ca")


@pytest.fixture
def server(tmp_path: Path, ca: CertificateAuthority) -> Iterator[ServerThread]:
    pair = ca.server()
    security = SecurityConfig(
        tls_cert_file=str(pair.cert),
        tls_key_file=str(pair.key),
        authentication=True,
        root_access_key=ROOT.access_key,
        root_secret_key=ROOT.secret_key,
    )
    thread = ServerThread(tmp_path / "data", security=security)
    thread.start()
    yield thread
    thread.stop()


def test_the_walk_through_runs_as_written(
    server: ServerThread, ca: CertificateAuthority, tmp_path: Path
) -> None:
    secret_file = tmp_path / "root.secret"
    secret_file.write_text(ROOT.secret_key + "\n")
    secret_file.chmod(0o600)
    script = (
        _step_four()
        .replace("mq.example.com:8081", server.endpoint)
        .replace("POPMQ_TLS_CA=ca.crt", f"POPMQ_TLS_CA={shlex.quote(str(ca.cert))}")
        .replace("/etc/popmq/root.secret", shlex.quote(str(secret_file)))
    )
    popmq = f"{shlex.quote(sys.executable)} -m popmq.cli"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("POPMQ_")}
    denied_before = audit.audit_count("topic.delete", "PERMISSION_DENIED")
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f'popmq() {{ {popmq} "$@"; }}\n{script}'],
        capture_output=True,
        text=True,
        timeout=180,
        env=environ,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    found = re.search(r"secret key \(shown only now\): (\S+)", ran.stdout)
    assert found is not None, ran.stdout
    app = Credentials("billing-app", found.group(1))
    tls = TLSConfig(ca_file=str(ca.cert))

    # "it may receive from `orders` in group `billing`, and nothing else"
    with Producer(server.endpoint, tls=tls, credentials=ROOT) as producer:
        producer.send("orders", b"for billing")
    with SimpleConsumer(
        server.endpoint, group="billing", topic="orders", tls=tls, credentials=app
    ) as consumer:
        [message] = consumer.receive(wait_s=5)
        consumer.ack(message)
    with Producer(server.endpoint, tls=tls, credentials=app) as producer:
        with pytest.raises(PermissionDeniedError):
            producer.send("orders", b"not its job")
    # Step 6: no configuration for it, and a delete refused, counted and audited.
    with Admin(server.endpoint, tls=tls, credentials=app) as admin:
        with pytest.raises(PermissionDeniedError):
            admin.delete_topic("orders")
    assert audit.audit_count("topic.delete", "PERMISSION_DENIED") == denied_before + 1
