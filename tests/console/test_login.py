"""Logging in to the console with the gRPC API's own users, and the rules every request
meets: the session cookie's flags, rate-limited failures, CSRF and Origin, no state change
on GET, the CSP, logout, and a disabled or deleted user's session ended."""

from __future__ import annotations

import dataclasses
import logging
import ssl
from pathlib import Path

import httpx
import pytest

from popmq.console.app import LOGIN_METHOD
from popmq.security import audit
from popmq.security.model import Action, Pattern, Policy, ResourceType
from tests.console.support import (
    AUTHENTICATED,
    ROOT_KEY,
    ROOT_SECRET,
    browser,
    csrf_of,
    log_in,
    serving,
)
from tests.support.certs import CertificateAuthority
from tests.support.run_async import run_async

APP_SECRET = "app-secret-9876543210"


def _cookie_header(response: httpx.Response) -> str:
    (header,) = response.headers.get_list("set-cookie")
    return header


@run_async
async def test_a_user_of_the_api_logs_in_and_gets_a_strict_http_only_session_cookie(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        assert server.security_store is not None
        await server.security_store.create_user("app", APP_SECRET)
        async with browser(server) as client:
            assert (await client.get("/")).headers["location"] == "/login"
            wrong = await log_in(client, "app", "not-the-secret")
            assert wrong.status_code == 401
            assert "do not match an enabled user" in wrong.text
            assert "set-cookie" not in wrong.headers
            unknown = await log_in(client, "nobody", APP_SECRET)
            assert unknown.status_code == 401 and unknown.text == wrong.text  # says no more

            good = await log_in(client, "app", APP_SECRET)
            assert (good.status_code, good.headers["location"]) == (303, "/")
            cookie = _cookie_header(good)
            attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
            assert attributes == {"httponly", "path=/", "samesite=strict"}  # no Secure: http
            assert APP_SECRET not in cookie and "app" not in cookie.split(";")[0]
            page = await client.get("/")
            assert page.status_code == 200
            assert "app (NORMAL)" in page.text
            assert APP_SECRET not in page.text

        async with browser(server) as root:
            assert (await log_in(root, ROOT_KEY, ROOT_SECRET)).status_code == 303
            assert "root (SUPER)" in (await root.get("/")).text


@run_async
async def test_login_failures_are_rate_limited_per_source_and_key(tmp_path: Path) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        async with browser(server) as client:
            for _ in range(5):
                assert (await log_in(client, ROOT_KEY, "guess")).status_code == 401
            limited = await log_in(client, ROOT_KEY, ROOT_SECRET)  # even the right one, now
            assert limited.status_code == 429
            assert 0 < int(limited.headers["retry-after"]) <= 60
            assert "too many failed logins" in limited.text
            assert "set-cookie" not in limited.headers


@run_async
async def test_every_answer_carries_the_content_security_policy(tmp_path: Path) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        async with browser(server) as client:
            await log_in(client, ROOT_KEY, ROOT_SECRET)
            for path in ("/login", "/", "/topics", "/static/console.js", "/no-such-page"):
                answer = await client.get(path)
                csp = answer.headers["content-security-policy"]
                assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
                assert answer.headers["x-content-type-options"] == "nosniff"
            assert (await client.get("/topics")).headers["cache-control"] == "no-store"


@run_async
async def test_a_change_needs_the_sessions_csrf_token_and_this_consoles_origin(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        async with browser(server) as client:
            await log_in(client, ROOT_KEY, ROOT_SECRET)
            token = csrf_of((await client.get("/topics")).text)
            assert server.console is not None
            own = server.console.url

            no_token = await client.post("/topics", data={"name": "a"})
            assert no_token.status_code == 403 and "CSRF token" in no_token.text
            stale = await client.post("/topics", data={"name": "a", "csrf": token + "x"})
            assert stale.status_code == 403
            other_site = await client.post(
                "/topics",
                data={"name": "a", "csrf": token},
                headers={"origin": "https://evil.example"},
            )
            assert other_site.status_code == 403 and "Origin" in other_site.text
            no_origin = httpx.AsyncClient(base_url=own, cookies=client.cookies)
            async with no_origin:
                assert (
                    await no_origin.post("/topics", data={"name": "a", "csrf": token})
                ).status_code == 403
            assert [t.name for t in await server.broker.list_topics()] == []

            header_token = await client.post(
                "/topics", data={"name": "a"}, headers={"x-csrf-token": token}
            )
            assert header_token.status_code == 303  # htmx sends the token as a header
            assert [t.name for t in await server.broker.list_topics()] == ["a"]


@run_async
async def test_get_changes_nothing(tmp_path: Path) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        await server.broker.create_topic("kept", 1)
        async with browser(server) as client:
            await log_in(client, ROOT_KEY, ROOT_SECRET)
            assert (await client.get("/logout")).status_code == 405
            assert (await client.get("/topics")).status_code == 200  # still logged in
            confirm = await client.get("/topics/delete", params={"name": "kept"})
            assert confirm.status_code == 200 and 'name="confirm"' in confirm.text
            assert [t.name for t in await server.broker.list_topics()] == ["kept"]


@run_async
async def test_logout_ends_the_session(tmp_path: Path) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        assert server.console is not None and server.console.console is not None
        sessions = server.console.console.sessions
        async with browser(server) as client:
            await log_in(client, ROOT_KEY, ROOT_SECRET)
            cookie = dict(client.cookies)
            token = csrf_of((await client.get("/")).text)
            assert len(sessions) == 1
            out = await client.post("/logout", data={"csrf": token})
            assert out.status_code == 401 and 'name="secret_key"' in out.text
            assert len(sessions) == 0
        async with browser(server) as replay:  # the old cookie is worth nothing now
            replay.cookies.update(cookie)
            assert (await replay.get("/")).headers["location"] == "/login"


@pytest.mark.parametrize("how", ["disabled", "deleted"])
@run_async
async def test_a_disabled_or_deleted_users_session_ends_at_its_next_request(
    tmp_path: Path, how: str
) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        store = server.security_store
        assert store is not None and server.console is not None
        await store.create_user("app", APP_SECRET)
        await store.grant(
            "app",
            Policy(ResourceType.TOPIC, Pattern.ANY, "", frozenset({Action.LIST, Action.GET})),
        )
        async with browser(server) as client:
            await log_in(client, "app", APP_SECRET)
            assert (await client.get("/topics")).status_code == 200
            if how == "disabled":
                await store.update_user("app", enabled=False)
            else:
                await store.delete_user("app")
            ended = await client.get("/topics")
            assert (ended.status_code, ended.headers["location"]) == (303, "/login")
            assert server.console.console is not None
            assert len(server.console.console.sessions) == 0
            if how == "disabled":  # enabled again: the ended session stays ended
                await store.update_user("app", enabled=True)
                assert (await client.get("/topics")).headers["location"] == "/login"


@run_async
async def test_the_secret_key_reaches_no_log_cookie_or_url(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    refused = audit.denied_count(LOGIN_METHOD, "UNAUTHENTICATED")
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        async with browser(server) as client:
            bad = await log_in(client, ROOT_KEY, "wrong-" + ROOT_SECRET)
            good = await log_in(client, ROOT_KEY, ROOT_SECRET)
            await client.get("/")
    # Counted in popmq_requests_denied_total (its log line is rate-limited per minute).
    assert audit.denied_count(LOGIN_METHOD, "UNAUTHENTICATED") == refused + 1
    assert "console login of user 'root'" in caplog.text
    assert ROOT_SECRET not in caplog.text
    for answer in (bad, good):
        assert ROOT_SECRET not in str(answer.headers) and ROOT_SECRET not in str(answer.url)


@run_async
async def test_under_tls_the_cookie_is_host_prefixed_and_secure(tmp_path: Path) -> None:
    authority = CertificateAuthority(tmp_path / "certs")
    pair = authority.server()
    security = dataclasses.replace(
        AUTHENTICATED, tls_cert_file=str(pair.cert), tls_key_file=str(pair.key)
    )
    async with serving(tmp_path / "data", security=security) as server:
        assert server.console is not None
        url = server.console.url
        trust = ssl.create_default_context(cafile=str(authority.cert))
        async with httpx.AsyncClient(base_url=url, headers={"origin": url}, verify=trust) as c:
            good = await log_in(c, ROOT_KEY, ROOT_SECRET)
        cookie = _cookie_header(good)
        assert cookie.startswith("__Host-popmq_console=")
        attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
        assert attributes == {"httponly", "path=/", "samesite=strict", "secure"}
