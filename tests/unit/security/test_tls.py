"""TLS files and settings, without a server: what is refused and what a reload does.

The certificates are made at test time (tests/support/certs.py, the openssl command).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from popmq import InvalidArgumentError as SdkInvalidArgumentError
from popmq import TLSConfig
from popmq.runtime import settings
from popmq.sdk.tls import channel_security
from popmq.security.config import SecurityConfig
from popmq.security.tls import (
    CertificateFiles,
    ServerTLS,
    TLSFilesError,
    broker_channel_tls,
    load_files,
)
from tests.support.certs import CertificateAuthority, KeyPair, require_openssl


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def pair(ca: CertificateAuthority) -> KeyPair:
    return ca.server()


def files(cert: Path, key: Path, ca: Path | None = None) -> CertificateFiles:
    return CertificateFiles(
        cert=("tls_cert_file", str(cert)),
        key=("tls_key_file", str(key)),
        ca=("tls_client_ca_file", str(ca)) if ca else None,
    )


def test_good_files_load_with_the_leaf_fingerprint(ca: CertificateAuthority, pair: KeyPair) -> None:
    loaded = load_files(files(pair.cert, pair.key, ca.cert))
    assert loaded.chain == pair.cert.read_bytes() and loaded.ca == ca.cert.read_bytes()
    openssl = subprocess.run(
        [require_openssl(), "x509", "-noout", "-fingerprint", "-sha256", "-in", str(pair.cert)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.fingerprint == openssl.stdout.strip().partition("=")[2]


def test_a_missing_file_is_named_with_its_setting(pair: KeyPair, tmp_path: Path) -> None:
    missing = tmp_path / "nope.key"
    with pytest.raises(TLSFilesError) as caught:
        load_files(files(pair.cert, missing))
    assert str(caught.value) == (
        f"security.tls_key_file {missing}: cannot read it (No such file or directory)"
    )


def test_a_key_of_another_certificate_is_refused(ca: CertificateAuthority, pair: KeyPair) -> None:
    other = ca.server("other-server")
    with pytest.raises(TLSFilesError, match=r"tls_key_file .* is not the private key of the cert"):
        load_files(files(pair.cert, other.key))


def test_files_that_are_not_pem_are_refused_saying_what_they_should_hold(
    ca: CertificateAuthority, pair: KeyPair, tmp_path: Path
) -> None:
    der = tmp_path / "server.der"
    subprocess.run(
        [require_openssl(), "x509", "-in", str(pair.cert), "-outform", "der", "-out", str(der)],
        check=True,
    )
    with pytest.raises(TLSFilesError, match=r"not a PEM file .*binary data"):
        load_files(files(der, pair.key))
    with pytest.raises(TLSFilesError, match=r"tls_cert_file .*holds no PEM certificate"):
        load_files(files(pair.key, pair.key))  # the key given as the certificate
    with pytest.raises(TLSFilesError, match=r"tls_key_file .*holds no PEM private key"):
        load_files(files(pair.cert, pair.cert))
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    with pytest.raises(TLSFilesError, match=r"tls_client_ca_file .*not a valid PEM certificate"):
        load_files(files(pair.cert, pair.key, broken))


def test_an_encrypted_key_is_refused_without_asking_for_a_password(
    pair: KeyPair, tmp_path: Path
) -> None:
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        [require_openssl(), "pkey", "-in", str(pair.key), "-aes256", "-passout", "pass:x",
         "-out", str(encrypted)],
        check=True,
    )  # fmt: skip
    with pytest.raises(TLSFilesError, match="the private key is encrypted"):
        load_files(files(pair.cert, encrypted))


def test_a_combined_pem_file_serves_as_certificate_and_key(pair: KeyPair, tmp_path: Path) -> None:
    both = tmp_path / "both.pem"
    both.write_bytes(pair.key.read_bytes() + pair.cert.read_bytes())
    assert load_files(files(both, both)).fingerprint


def _server_tls(pair: KeyPair, tmp_path: Path) -> tuple[ServerTLS, KeyPair]:
    served = KeyPair(tmp_path / "served.pem", tmp_path / "served.key")
    shutil.copy(pair.cert, served.cert)
    shutil.copy(pair.key, served.key)
    config = SecurityConfig(tls_cert_file=str(served.cert), tls_key_file=str(served.key))
    return ServerTLS(config, what="test"), served


def test_grpc_gets_a_reloaded_configuration_once(
    ca: CertificateAuthority, pair: KeyPair, tmp_path: Path
) -> None:
    tls, served = _server_tls(pair, tmp_path)
    assert tls._fetch() is None  # nothing reloaded: grpc keeps the initial certificate
    other = ca.server("next")
    shutil.copy(other.cert, served.cert)
    shutil.copy(other.key, served.key)
    assert tls.changed()
    assert tls.reload() is True
    assert not tls.changed()
    assert tls._fetch() is not None
    assert tls._fetch() is None  # taken by one handshake, then kept


def test_a_failed_reload_hands_grpc_nothing_and_is_not_retried_until_a_file_changes(
    pair: KeyPair, tmp_path: Path
) -> None:
    tls, served = _server_tls(pair, tmp_path)
    before = tls.fingerprint
    served.key.write_text("garbage")
    assert tls.changed()
    assert tls.reload() is False
    assert tls._fetch() is None and tls.fingerprint == before
    assert not tls.changed()  # the failure was seen: the check waits for the next change
    shutil.copy(pair.key, served.key)
    assert tls.changed()


def test_the_file_check_reloads_by_itself(
    ca: CertificateAuthority, pair: KeyPair, tmp_path: Path
) -> None:
    served = KeyPair(tmp_path / "served.pem", tmp_path / "served.key")
    shutil.copy(pair.cert, served.cert)
    shutil.copy(pair.key, served.key)
    config = SecurityConfig(
        tls_cert_file=str(served.cert), tls_key_file=str(served.key), tls_reload_check_s=0.05
    )
    other = ca.server("polled")

    async def scenario() -> str:
        tls = ServerTLS(config)
        tls.start()
        before = tls.fingerprint
        shutil.copy(other.cert, served.cert)
        shutil.copy(other.key, served.key)
        try:
            for _ in range(500):  # 10 s at most
                if tls.fingerprint != before:
                    break
                await asyncio.sleep(0.02)
        finally:
            await tls.close()
        return tls.fingerprint

    assert asyncio.run(scenario()) == load_files(files(other.cert, other.key)).fingerprint


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"tls_cert_file": "c.pem"}, "go together"),
        ({"tls_client_ca_file": "ca.pem"}, "needs the server's own"),
        ({"plaintext_listen": "127.0.0.1:8082"}, "needs tls_cert_file"),
        ({"tls_cert_file": "c", "tls_key_file": "k", "tls_reload_check_s": -1}, ">= 0"),
        ({"broker_tls_server_name": "b.internal"}, "set broker_tls = true"),
        ({"broker_tls": True, "broker_tls_cert_file": "c.pem"}, "go together"),
    ],
)
def test_inconsistent_tls_settings_are_refused(settings_: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SecurityConfig(**settings_)  # type: ignore[arg-type]


def test_broker_tls_without_a_ca_file_uses_the_system_roots() -> None:
    tls = broker_channel_tls(SecurityConfig(broker_tls=True, broker_tls_server_name="b.internal"))
    assert tls is not None and tls.options() == [("grpc.ssl_target_name_override", "b.internal")]
    assert broker_channel_tls(SecurityConfig()) is None


def test_the_clis_tls_variables_are_not_server_settings() -> None:
    environ = {"POPMQ_TLS": "1", "POPMQ_TLS_CA": "/etc/ca.pem", "POPMQ_TLS_CERT": "c.pem",
               "POPMQ_TLS_KEY": "k.pem", "POPMQ_TLS_SERVER_NAME": "popmq"}  # fmt: skip
    assert settings.load(environ=environ).security == SecurityConfig()


def test_sdk_tls_config_checks_its_arguments_and_files(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    client = ca.client()
    with pytest.raises(SdkInvalidArgumentError, match="cert_file and key_file go together"):
        TLSConfig(cert_file=client.cert)
    with pytest.raises(SdkInvalidArgumentError, match="server_name is empty"):
        TLSConfig(server_name=" ")
    with pytest.raises(SdkInvalidArgumentError, match=r"ca_file .*nope.pem: cannot read it"):
        channel_security(TLSConfig(ca_file=tmp_path / "nope.pem"))
    with pytest.raises(SdkInvalidArgumentError, match=r"ca_file .*not a PEM certificate file"):
        channel_security(TLSConfig(ca_file=client.key))
    with pytest.raises(TypeError, match="tls must be a bool or a TLSConfig"):
        channel_security("yes")  # type: ignore[arg-type]
    assert channel_security(False) is None
    named = channel_security(TLSConfig(ca_file=ca.cert, server_name="popmq.internal"))
    assert named is not None
    assert named.options == (("grpc.ssl_target_name_override", "popmq.internal"),)
    assert channel_security(TLSConfig(cert_file=client.cert, key_file=client.key)) is not None


def test_a_client_given_a_channel_takes_no_tls() -> None:
    from popmq import AsyncProducer

    with pytest.raises(ValueError, match="a given channel has its own"):
        AsyncProducer("127.0.0.1:8081", channel=object(), tls=True)
