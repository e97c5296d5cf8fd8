"""The users and policies pages: SUPER users only (a NORMAL user is neither offered them
nor let in), a grant and a revoke through the admin path with their audit lines, and the
grant applying at once to what the user may do."""

from __future__ import annotations

from pathlib import Path

from tests.console.support import (
    AUTHENTICATED,
    ROOT_KEY,
    ROOT_SECRET,
    AuditLines,
    browser,
    csrf_of,
    log_in,
    serving,
)
from tests.console.test_topics import APP_SECRET
from tests.support.run_async import run_async


@run_async
async def test_a_super_user_grants_and_revokes_policies_that_apply_at_once(
    tmp_path: Path, audit_lines: AuditLines
) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        store = server.security_store
        assert store is not None
        await server.broker.create_topic("orders", 1)
        await store.create_user("app", APP_SECRET)
        async with browser(server) as root, browser(server) as app:
            await log_in(root, ROOT_KEY, ROOT_SECRET)
            await log_in(app, "app", APP_SECRET)
            assert (await app.get("/topics")).status_code == 403

            users = await root.get("/users")
            assert users.status_code == 200 and '<tr data-user="app">' in users.text
            assert 'href="/users"' in users.text  # offered in the menu
            page = await root.get("/users/view", params={"key": "app"})
            assert "No policies" in page.text
            token = csrf_of(page.text)
            grant = {
                "csrf": token,
                "key": "app",
                "decision": "ALLOW",
                "resource_type": "TOPIC",
                "pattern": "ANY",
                "resource_name": "",
                "cidrs": "",
            }
            none = await root.post("/users/grant", data=grant)
            assert none.status_code == 400 and "choose at least one action" in none.text
            bad = await root.post("/users/grant", data={**grant, "pattern": "REGEX"})
            assert bad.status_code == 400 and "pattern &#39;REGEX&#39; is not one of" in bad.text
            granted = await root.post("/users/grant", data={**grant, "actions": ["LIST", "GET"]})
            assert granted.status_code == 303
            after = (await root.get(granted.headers["location"])).text
            assert "<td>LIST GET</td>" in after or "<td>GET LIST</td>" in after
            assert (await app.get("/topics")).status_code == 200  # at once

            revoked = await root.post("/users/revoke", data=grant)
            assert revoked.status_code == 303
            assert "No policies" in (await root.get(revoked.headers["location"])).text
            assert (await app.get("/topics")).status_code == 403
            assert 'href="/users"' not in (await app.get("/")).text
            refused = await app.get("/users")
            assert refused.status_code == 403 and "not a SUPER user" in refused.text
            sneaked = await app.post(
                "/users/grant",
                data={
                    **grant,
                    "csrf": csrf_of((await app.get("/")).text),
                    "actions": "ALL",
                    "resource_type": "ANY",
                },
            )
            assert sneaked.status_code == 403
        record = store.record("app")
        assert record is not None and record.policies == ()
    assert [(e["event"], e["user"], e["result"]) for e in audit_lines.lines] == [
        ("acl.grant", "root", "ok"),
        ("acl.revoke", "root", "ok"),
    ]
