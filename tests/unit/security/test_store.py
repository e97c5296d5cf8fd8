"""Users and policies (security/store.py, records.py): validation, grant and revoke,
durability in the broker's store, the cluster store's cache, and the AclAuthorizer."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import pytest

from popmq._gen.popmq.v1 import admin_pb2, messaging_pb2
from popmq.broker_core import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from popmq.coordination.local_coordinator import LocalCoordinator
from popmq.security.model import (
    Action,
    Decision,
    Pattern,
    Policy,
    Principal,
    ResourceType,
    UserType,
)
from popmq.security.records import fingerprint
from popmq.security.store import (
    AclAuthorizer,
    ClusterSecurityStore,
    LocalSecurityStore,
    SecurityStore,
)
from tests.unit.conftest import OpenBroker

SECRET = "s3cret-key-1"
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


def topic_policy(
    name: str,
    *actions: Action,
    pattern: Pattern = Pattern.LITERAL,
    decision: Decision = Decision.ALLOW,
    cidrs: tuple[str, ...] = (),
) -> Policy:
    return Policy(TOPIC, pattern, name, frozenset(actions), decision, cidrs)


def test_user_is_created_enabled_normal_and_durable_across_a_restart(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            store = LocalSecurityStore(broker)
            await store.start()
            record = await store.create_user("app", SECRET)
            assert (record.user_type, record.enabled, record.policies) == (
                UserType.NORMAL,
                True,
                (),
            )
            await store.grant("app", topic_policy("orders", Action.PUB))
            await store.create_user("ops", SECRET + "x", user_type=UserType.SUPER)
            await store.create_user("gone", SECRET)
            await store.delete_user("gone")
        async with open_broker() as broker:
            store = LocalSecurityStore(broker)
            await store.start()
            assert sorted(store.records()) == ["app", "ops"]
            app = store.user("app")
            assert app is not None and app.secret_key == SECRET
            assert store.record("app").policies == (topic_policy("orders", Action.PUB),)  # type: ignore[union-attr]
            assert store.user("ops").user_type is UserType.SUPER  # type: ignore[union-attr]
            assert store.user("gone") is None

    asyncio.run(scenario())


def test_secret_never_shows_in_a_record_repr() -> None:
    async def scenario() -> None:
        store = ClusterSecurityStore(LocalCoordinator("t"))
        await store.start()
        record = await store.create_user("app", SECRET)
        assert SECRET not in repr(record)
        assert SECRET not in repr(record.user) and SECRET not in repr(store.user("app"))
        assert fingerprint(SECRET) in repr(record)
        assert len(record.fingerprint) == 16
        await store.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("access_key", "secret", "message"),
    [
        ("", SECRET, "access key '' is invalid"),
        ("a b", SECRET, "access key 'a b' is invalid"),
        ("a,Signature=x", SECRET, "is invalid: use 1..64 of letters"),
        ("x" * 65, SECRET, "is invalid"),
        ("app", "short", "secret key has 5 characters: use 8..256 printable"),
        ("app", " padded-secret", "no space at either end"),
        ("app", "line\nbreak!", "no space at either end"),
        ("root", SECRET, "access key 'root' is the root user's"),
    ],
)
def test_bad_users_are_refused_saying_what_is_allowed(
    access_key: str, secret: str, message: str
) -> None:
    async def scenario() -> None:
        store = ClusterSecurityStore(LocalCoordinator("t"), reserved=("root",))
        await store.start()
        with pytest.raises(InvalidArgumentError, match=message):
            await store.create_user(access_key, secret)
        assert store.records() == {}
        await store.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (
            Policy(ResourceType.CLUSTER, Pattern.LITERAL, "x", frozenset({Action.GET})),
            "a CLUSTER policy covers the one cluster: give pattern ANY and no name",
        ),
        (topic_policy("x", Action.PUB, pattern=Pattern.ANY), "pattern ANY takes no name"),
        (topic_policy("", Action.PUB), "policy name '' is invalid"),
        (topic_policy("", Action.PUB, pattern=Pattern.PREFIXED), "policy prefix '' is invalid"),
        (topic_policy("a b", Action.PUB), "policy name 'a b' is invalid"),
        (topic_policy("orders"), "a policy needs at least one action"),
        (
            topic_policy("orders", Action.PUB, cidrs=("10.0.0.1/8",)),
            "source CIDR '10.0.0.1/8' is not a network",
        ),
        (topic_policy("orders", Action.PUB, cidrs=("nowhere",)), "source CIDR 'nowhere'"),
    ],
)
def test_bad_policies_are_refused_saying_what_is_allowed(policy: Policy, message: str) -> None:
    async def scenario() -> None:
        store = ClusterSecurityStore(LocalCoordinator("t"))
        await store.start()
        await store.create_user("app", SECRET)
        with pytest.raises(InvalidArgumentError, match=message):
            await store.grant("app", policy)
        assert store.record("app").policies == ()  # type: ignore[union-attr]
        await store.close()

    asyncio.run(scenario())


async def _store_with_app(store: SecurityStore) -> SecurityStore:
    await store.start()
    await store.create_user("app", SECRET)
    return store


def test_grant_merges_actions_into_the_policy_of_the_same_key() -> None:
    async def scenario() -> None:
        store = await _store_with_app(ClusterSecurityStore(LocalCoordinator("t")))
        await store.grant("app", topic_policy("orders", Action.PUB))
        await store.grant("app", topic_policy("orders", Action.SUB))
        await store.grant("app", topic_policy("orders", Action.SUB, decision=Decision.DENY))
        await store.grant("app", topic_policy("orders", Action.PUB, cidrs=("10.0.0.7",)))
        record = await store.grant("app", topic_policy("orders", Action.SUB))  # again: no-op
        assert record.policies == (
            topic_policy("orders", Action.PUB, Action.SUB),
            topic_policy("orders", Action.SUB, decision=Decision.DENY),
            topic_policy("orders", Action.PUB, cidrs=("10.0.0.7/32",)),
        )
        every = await store.grant("app", topic_policy("orders", *Action))
        assert every.policies[0].actions == frozenset({Action.ALL})
        await store.close()

    asyncio.run(scenario())


def test_revoke_removes_actions_then_the_policy() -> None:
    async def scenario() -> None:
        store = await _store_with_app(ClusterSecurityStore(LocalCoordinator("t")))
        await store.grant("app", topic_policy("orders", Action.ALL))
        record = await store.revoke("app", topic_policy("orders", Action.DELETE))
        assert record.policies[0].actions == frozenset(Action) - {Action.ALL, Action.DELETE}
        with pytest.raises(NotFoundError, match="does not grant DELETE"):
            await store.revoke("app", topic_policy("orders", Action.DELETE))
        with pytest.raises(NotFoundError, match="has no DENY policy on topic 'orders'"):
            await store.revoke("app", topic_policy("orders", decision=Decision.DENY))
        record = await store.revoke("app", topic_policy("orders"))  # no actions: all of it
        assert record.policies == ()
        await store.close()

    asyncio.run(scenario())


def test_changes_of_a_missing_user_are_not_found_and_a_repeat_create_exists() -> None:
    async def scenario() -> None:
        store = await _store_with_app(ClusterSecurityStore(LocalCoordinator("t")))
        with pytest.raises(AlreadyExistsError, match="user 'app' already exists"):
            await store.create_user("app", SECRET)
        for change in (
            store.update_user("nobody", enabled=False),
            store.delete_user("nobody"),
            store.grant("nobody", topic_policy("t", Action.PUB)),
            store.revoke("nobody", topic_policy("t", Action.PUB)),
        ):
            with pytest.raises(NotFoundError, match="user 'nobody' does not exist"):
                await change
        with pytest.raises(InvalidArgumentError, match="changes nothing"):
            await store.update_user("app")
        await store.close()

    asyncio.run(scenario())


def test_concurrent_grants_to_one_user_lose_none(open_broker: OpenBroker) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            local = await _store_with_app(LocalSecurityStore(broker))
            cluster = await _store_with_app(ClusterSecurityStore(LocalCoordinator("t")))
            for store in (local, cluster):
                await asyncio.gather(
                    *(store.grant("app", topic_policy(f"t{i}", Action.PUB)) for i in range(20))
                )
                assert len(store.record("app").policies) == 20  # type: ignore[union-attr]
            await cluster.close()

    asyncio.run(scenario())


def test_cluster_stores_on_one_coordinator_see_each_others_changes() -> None:
    async def scenario() -> None:
        coordinator = LocalCoordinator("t")
        a, b = ClusterSecurityStore(coordinator), ClusterSecurityStore(coordinator)
        await a.start()
        await b.start()
        await a.create_user("app", SECRET)
        await a.grant("app", topic_policy("orders", Action.PUB))
        async with asyncio.timeout(5):
            # Polls another store's state: what a proxy's next request would read.
            while b.record("app") is None or not b.record("app").policies:  # type: ignore[union-attr]  # noqa: ASYNC110
                await asyncio.sleep(0.001)
        await a.delete_user("app")
        async with asyncio.timeout(5):
            while b.user("app") is not None:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
        await a.close()
        await b.close()

    asyncio.run(scenario())


# -- AclAuthorizer ----------------------------------------------------------------------------


def test_authorizer_checks_a_normal_user_against_its_current_policies() -> None:
    async def scenario() -> None:
        store = await _store_with_app(ClusterSecurityStore(LocalCoordinator("t")))
        authorizer = AclAuthorizer(store)
        app = Principal("app", UserType.NORMAL, "ipv4:10.0.0.7:4000")
        method = "/popmq.v1.MessagingService/SendMessages"
        send_a = messaging_pb2.SendMessagesRequest(
            messages=[messaging_pb2.OutgoingMessage(topic="a")]
        )
        send_b = messaging_pb2.SendMessagesRequest(
            messages=[messaging_pb2.OutgoingMessage(topic="b")]
        )
        pop_a = messaging_pb2.PopRequest(group="g", topic="a")
        with pytest.raises(PermissionDeniedError, match="may not PUB topic 'a'"):
            authorizer.authorize(app, authorizer.checks(method, send_a))
        await store.grant("app", topic_policy("a", Action.PUB))
        authorizer.authorize(app, authorizer.checks(method, send_a))
        with pytest.raises(PermissionDeniedError, match="may not PUB topic 'b'"):
            authorizer.authorize(app, authorizer.checks(method, send_b))
        with pytest.raises(PermissionDeniedError, match="may not SUB topic 'a'"):
            authorizer.authorize(app, authorizer.checks("/popmq.v1.MessagingService/Pop", pop_a))
        await store.update_user("app", enabled=False)
        with pytest.raises(PermissionDeniedError, match="'app' is disabled"):
            authorizer.authorize(app, authorizer.checks(method, send_a))
        await store.update_user("app", enabled=True, user_type=UserType.SUPER)
        authorizer.authorize(app, authorizer.checks(method, send_b))
        await store.delete_user("app")
        with pytest.raises(PermissionDeniedError, match="'app' does not exist"):
            authorizer.authorize(app, authorizer.checks(method, send_a))
        root = dataclasses.replace(app, access_key="root", user_type=UserType.SUPER)
        authorizer.authorize(
            root,
            authorizer.checks(
                "/popmq.v1.AdminService/DeleteTopic", admin_pb2.DeleteTopicRequest(name="a")
            ),
        )
        await store.close()

    asyncio.run(scenario())


def test_a_deletion_whose_caller_is_cancelled_mid_write_still_signs_the_user_out(
    open_broker: OpenBroker,
) -> None:
    async def scenario() -> None:
        async with open_broker() as broker:
            store = LocalSecurityStore(broker)
            await store.start()
            await store.create_user("gone", SECRET)
            deleting = asyncio.ensure_future(store.delete_user("gone"))
            await asyncio.sleep(0)  # it waits for its synced write
            deleting.cancel()  # as grpc cancels a handler whose client went away
            with contextlib.suppress(asyncio.CancelledError):
                await deleting
            await asyncio.sleep(0.05)  # the write commits all the same
            assert store.user("gone") is None

    asyncio.run(scenario())
