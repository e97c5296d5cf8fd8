"""The CLI's credentials: --access-key and its secret's sources, and `popmq auth headers`
(no server: the headers are checked with the server's own verifier)."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest

from popmq import Credentials
from popmq.broker_core import UnauthenticatedError
from popmq.cli import main as cli_main
from popmq.security import signing
from popmq.security.authn import Authenticator
from popmq.security.config import SecurityConfig
from popmq.security.gate import StaticDirectory


def _resolve(argv: list[str], env: dict[str, str]) -> Credentials | None:
    args = cli_main.build_parser().parse_args(["topic", "list", *argv])
    return cli_main.resolve_credentials(args, env)


def test_credentials_come_from_flags_then_environment(tmp_path: Path) -> None:
    assert _resolve([], {}) is None
    env = {"POPMQ_ACCESS_KEY": "env-ak", "POPMQ_SECRET_KEY": "env-sk"}
    assert _resolve([], env) == Credentials("env-ak", "env-sk")
    assert _resolve(["--access-key", "flag-ak"], env) == Credentials("flag-ak", "env-sk")
    secret = tmp_path / "secret"
    secret.write_text("file-sk\n")
    secret.chmod(0o600)
    got = _resolve(["--access-key", "ak", "--secret-key-file", str(secret)], env)
    assert got == Credentials("ak", "file-sk")
    assert _resolve(["--access-key", "ak", "--secret-key", "s"], {}) == Credentials("ak", "s")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--access-key", "ak"], {}, "access key 'ak' needs its secret key"),
        ([], {"POPMQ_SECRET_KEY": "s"}, "secret key is given .POPMQ_SECRET_KEY. but no access"),
        (["--access-key", "a b", "--secret-key", "s"], {}, "printable ASCII without spaces"),
    ],
)
def test_incomplete_or_unusable_credentials_are_usage_errors(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(cli_main.CredentialsError, match=message):
        _resolve(argv, env)


def test_a_secret_file_others_may_read_is_refused_naming_the_fix(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("sk")
    secret.chmod(0o644)
    with pytest.raises(cli_main.CredentialsError, match=r"mode 0644.*chmod 600"):
        _resolve(["--access-key", "ak", "--secret-key-file", str(secret)], {})


def test_main_exits_2_on_half_given_credentials(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POPMQ_SECRET_KEY", raising=False)
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["topic", "list", "--access-key", "ak"])
    assert exited.value.code == 2
    assert "needs its secret key" in capsys.readouterr().err


def _verifier(max_skew_s: float, now: float) -> Authenticator:
    config = SecurityConfig(
        authentication=True,
        root_access_key="root",
        root_secret_key="root-secret",
        max_clock_skew_s=max_skew_s,
    )
    return Authenticator(StaticDirectory(), config, clock=lambda: now)


def _printed_headers(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[tuple[str, str]]:
    assert cli_main.main(["auth", "headers", *argv]) == 0
    out, err = capsys.readouterr()
    assert "root-secret" not in out + err
    words = shlex.split(out)
    assert words[0::2] == ["-H", "-H"]
    pairs = [word.split(": ", 1) for word in words[1::2]]
    return [(key, value) for key, value in pairs]


def test_auth_headers_print_grpcurl_arguments_the_server_accepts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POPMQ_SECRET_KEY", "root-secret")
    now = time.time()
    metadata = _printed_headers(["--access-key", "root", "--minutes", "10"], capsys)
    assert {key for key, _ in metadata} == {signing.AUTHORIZATION, signing.DATE_TIME}
    # Without a clock-skew window (the default) they are accepted whenever.
    assert _verifier(0, now + 86400).authenticate(metadata, "").access_key == "root"
    # Signed for the middle of the 10 minutes: a 300 s window covers all of them...
    for at in (now + 1, now + 599):
        assert _verifier(300, at).authenticate(metadata, "").access_key == "root"
    # ... and not later.
    with pytest.raises(UnauthenticatedError, match=r"behind"):
        _verifier(300, now + 1200).authenticate(metadata, "")


def test_auth_headers_json_and_without_credentials(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POPMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("POPMQ_SECRET_KEY", raising=False)
    assert cli_main.main(["auth", "headers"]) == 2
    assert "needs credentials" in capsys.readouterr().err
    monkeypatch.setenv("POPMQ_ACCESS_KEY", "root")
    monkeypatch.setenv("POPMQ_SECRET_KEY", "root-secret")
    assert cli_main.main(["auth", "headers", "--json", "--minutes", "0"]) == 0
    headers = json.loads(capsys.readouterr().out)
    assert _verifier(60, time.time()).authenticate(headers.items(), "").access_key == "root"
