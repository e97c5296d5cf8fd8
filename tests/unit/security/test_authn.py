"""The Authenticator: which credential failed, the root user, its secret file, clock skew."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from popmq.broker_core import InvalidArgumentError, UnauthenticatedError
from popmq.security import signing
from popmq.security.authn import Authenticator, load_root_user
from popmq.security.config import SecurityConfig
from popmq.security.gate import Gate, StaticDirectory
from popmq.security.model import User, UserType

ROOT_SECRET = "root-secret-do-not-print"
NOW = 1_795_774_500.0  # 2026-11-27T10:15:00Z
CONFIG = SecurityConfig(authentication=True, root_access_key="root", root_secret_key=ROOT_SECRET)
DIRECTORY = StaticDirectory(
    [
        User("app", "app-secret", UserType.NORMAL),
        User("gone", "gone-secret", UserType.NORMAL, enabled=False),
    ]
)


def signed(access_key: str, secret: str, at: float = NOW) -> list[tuple[str, str]]:
    headers = signing.headers(access_key, secret, at)
    return [("x-mq-client-id", "c1"), *headers.items()]


def authenticator(config: SecurityConfig = CONFIG, clock: float = NOW) -> Authenticator:
    return Authenticator(DIRECTORY, config, clock=lambda: clock)


def refusal(metadata: list[tuple[str, str]], auth: Authenticator | None = None) -> str:
    with pytest.raises(UnauthenticatedError) as caught:
        (auth or authenticator()).authenticate(metadata, "10.0.0.1")
    return str(caught.value)


def test_root_signs_in_as_super_from_its_source() -> None:
    principal = authenticator().authenticate(signed("root", ROOT_SECRET), "10.0.0.1")
    assert (principal.access_key, principal.user_type, principal.source) == (
        "root",
        UserType.SUPER,
        "10.0.0.1",
    )


def test_directory_users_sign_in_with_their_type() -> None:
    principal = authenticator().authenticate(signed("app", "app-secret"), "10.0.0.2")
    assert principal.user_type is UserType.NORMAL


def test_root_wins_over_a_directory_user_of_the_same_key() -> None:
    shadow = StaticDirectory([User("root", "other", UserType.NORMAL)])
    auth = Authenticator(shadow, CONFIG)
    assert auth.authenticate(signed("root", ROOT_SECRET), "").is_super
    assert "does not match" in refusal(signed("root", "other"), auth)


def test_each_failure_names_the_credential_and_never_the_secret() -> None:
    wrong = signed("root", "guess")
    messages = {
        "missing": refusal([("x-mq-client-id", "c1")]),
        "malformed": refusal([("authorization", "Basic cm9vdA=="), ("x-mq-date-time", "x")]),
        "empty": refusal(
            [
                ("authorization", "MQv2-HMAC-SHA1 Credential=, Signature=" + "0" * 40),
                ("x-mq-date-time", "20261127T101500Z"),
            ]
        ),
        "unknown": refusal(signed("nobody", "x")),
        "disabled": refusal(signed("gone", "gone-secret")),
        "mismatch": refusal(wrong),
    }
    assert "no authorization header" in messages["missing"]
    assert "malformed" in messages["malformed"]
    assert "names no access key" in messages["empty"]
    assert messages["unknown"] == "access key 'nobody' is unknown"
    assert messages["disabled"] == "access key 'gone' is disabled"
    assert "signature of access key 'root' does not match" in messages["mismatch"]
    given = dict(wrong)["authorization"].rpartition("=")[2]
    expected = signing.sign(ROOT_SECRET, dict(wrong)["x-mq-date-time"])
    for message in messages.values():
        assert ROOT_SECRET not in message
        assert given not in message and given.lower() not in message
        assert expected not in message and expected.lower() not in message


def test_a_very_long_access_key_is_cut_in_the_message() -> None:
    message = refusal(signed("k" * 500, "x"))
    assert len(message) < 200


def test_without_a_skew_window_any_signed_date_time_is_accepted() -> None:
    # The Python and Java clients send local time labelled Z; RocketMQ checks nothing.
    long_ago = signed("root", ROOT_SECRET, at=NOW - 365 * 86400)
    assert authenticator().authenticate(long_ago, "").is_super
    odd = [
        ("x-mq-date-time", "not a date"),
        (
            "authorization",
            "MQv2-HMAC-SHA1 Credential=root, SignedHeaders=x-mq-date-time, "
            f"Signature={signing.sign(ROOT_SECRET, 'not a date')}",
        ),
    ]
    assert authenticator().authenticate(odd, "").is_super


def test_skew_window_refuses_date_times_outside_it_either_way() -> None:
    config = SecurityConfig(
        authentication=True,
        root_access_key="root",
        root_secret_key=ROOT_SECRET,
        max_clock_skew_s=300,
    )
    auth = authenticator(config)
    assert auth.authenticate(signed("root", ROOT_SECRET, NOW - 299), "").is_super
    assert auth.authenticate(signed("root", ROOT_SECRET, NOW + 299), "").is_super
    behind = refusal(signed("root", ROOT_SECRET, NOW - 3600), auth)
    assert "3600s behind the server's clock" in behind
    assert "max_clock_skew_s allows 300s" in behind
    assert "ahead of" in refusal(signed("root", ROOT_SECRET, NOW + 301), auth)


def test_skew_is_checked_only_after_the_signature() -> None:
    # A caller without the secret learns nothing of the server's clock.
    config = SecurityConfig(
        authentication=True, root_access_key="root", root_secret_key="s", max_clock_skew_s=1
    )
    assert "does not match" in refusal(signed("root", "wrong", NOW - 3600), authenticator(config))


def secret_file(tmp_path: Path, text: str, mode: int) -> str:
    path = tmp_path / "root.secret"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def test_root_secret_is_read_from_an_owner_only_file_without_its_line_break(
    tmp_path: Path,
) -> None:
    path = secret_file(tmp_path, "from-file\n", 0o600)
    user = load_root_user(SecurityConfig(root_access_key="root", root_secret_key_file=path))
    assert user is not None and user.secret_key == "from-file" and user.user_type is UserType.SUPER


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_root_secret_file_readable_by_others_refuses_to_start(tmp_path: Path, mode: int) -> None:
    path = secret_file(tmp_path, "s", mode)
    with pytest.raises(InvalidArgumentError, match=f"mode {mode:04o}.*chmod 600") as caught:
        load_root_user(SecurityConfig(root_access_key="root", root_secret_key_file=path))
    assert "\n" not in str(caught.value)


def test_root_secret_file_missing_or_empty_refuses_to_start(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        load_root_user(SecurityConfig(root_access_key="root", root_secret_key_file=missing))
    empty = secret_file(tmp_path, "\n", 0o600)
    with pytest.raises(InvalidArgumentError, match="is empty"):
        load_root_user(SecurityConfig(root_access_key="root", root_secret_key_file=empty))


def test_root_secret_file_behind_a_symlink_counts_the_target_mode(tmp_path: Path) -> None:
    # Kubernetes mounts secrets as symlinks; what matters is who may read the bytes.
    target = secret_file(tmp_path, "s", 0o600)
    link = tmp_path / "link"
    os.symlink(target, link)
    config = SecurityConfig(root_access_key="root", root_secret_key_file=str(link))
    user = load_root_user(config)
    assert user is not None and user.secret_key == "s"
    Path(target).chmod(0o644)
    with pytest.raises(InvalidArgumentError, match="mode 0644"):
        load_root_user(config)


def test_root_access_key_without_a_secret_refuses_to_start() -> None:
    with pytest.raises(InvalidArgumentError, match="needs a secret"):
        load_root_user(SecurityConfig(root_access_key="root"))


def test_no_root_access_key_means_no_root_user() -> None:
    assert load_root_user(SecurityConfig()) is None


def test_gate_is_off_without_authentication_and_refuses_authentication_without_users() -> None:
    assert Gate.from_config(SecurityConfig()).interceptor() is None
    assert Gate.from_config(CONFIG).interceptor() is not None
    with pytest.raises(InvalidArgumentError, match="no user can sign in"):
        Gate.from_config(SecurityConfig(authentication=True))
