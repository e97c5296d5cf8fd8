"""Who may read the metrics endpoint: basic auth, a bearer token, or anyone."""

from __future__ import annotations

import base64

import pytest

from popmq.security.config import SecurityConfig
from popmq.security.http_auth import HttpAuth


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_without_credentials_configured_anyone_may_read() -> None:
    auth = HttpAuth()
    assert not auth.required
    assert auth.allows(None)
    assert auth.challenges() == []


def test_basic_auth_needs_the_right_user_and_password() -> None:
    auth = HttpAuth(username="prom", password="pässword")
    assert auth.allows(_basic("prom", "pässword"))
    assert auth.allows("basic  " + _basic("prom", "pässword").split()[1])
    for wrong in (
        None,
        "",
        _basic("prom", "wrong"),
        _basic("other", "pässword"),
        _basic("prom", "pässword") + "!",  # not base64
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Bearer pässword",
    ):
        assert not auth.allows(wrong), wrong
    assert auth.challenges() == ['Basic realm="popmq metrics", charset="UTF-8"']


def test_a_bearer_token_is_accepted_and_either_scheme_works_when_both_are_set() -> None:
    auth = HttpAuth.from_security(
        SecurityConfig(metrics_username="u", metrics_password="p", metrics_bearer_token="t0k")
    )
    assert auth.allows("Bearer t0k")
    assert auth.allows(_basic("u", "p"))
    assert not auth.allows("Bearer t0k2")
    assert not auth.allows("Bearer ")
    assert not auth.allows("t0k")
    assert len(auth.challenges()) == 2


def test_secrets_stay_out_of_the_repr_and_half_a_pair_is_refused() -> None:
    assert "hunter2" not in repr(HttpAuth(username="u", password="hunter2", bearer_token="hunter2"))
    with pytest.raises(ValueError, match="both a username and a password"):
        HttpAuth(username="u")
