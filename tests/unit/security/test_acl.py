"""Policy evaluation (security/acl.py): specificity, DENY ties, CIDRs, ALL, ANY."""

from __future__ import annotations

import pytest

from popmq.broker_core import PermissionDeniedError
from popmq.security.acl import allowed, authorize, decide, source_ip
from popmq.security.model import (
    ANONYMOUS_SUPER,
    Action,
    Check,
    Decision,
    Pattern,
    Policy,
    Principal,
    Resource,
    ResourceType,
    User,
    UserType,
)

TOPIC, GROUP, CLUSTER, ANY = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.ANY,
)
LITERAL, PREFIXED, ANY_NAME = Pattern.LITERAL, Pattern.PREFIXED, Pattern.ANY
ALLOW, DENY = Decision.ALLOW, Decision.DENY
PUB, SUB, GET, ALL = Action.PUB, Action.SUB, Action.GET, Action.ALL
PEER = "ipv4:10.1.2.3:5555"


def policy(
    kind: ResourceType,
    pattern: Pattern,
    name: str,
    *actions: Action,
    decision: Decision = ALLOW,
    cidrs: tuple[str, ...] = (),
) -> Policy:
    return Policy(kind, pattern, name, frozenset(actions), decision, cidrs)


def check(kind: ResourceType, name: str, action: Action, *alternatives: Action) -> Check:
    return Check(Resource(kind, name), action, alternatives)


def app(source: str = PEER) -> Principal:
    return Principal("app", UserType.NORMAL, source)


APP = User("app", "secret-key", UserType.NORMAL, True)


# -- specificity ------------------------------------------------------------------------------


def test_literal_deny_beats_prefixed_allow() -> None:
    policies = [
        policy(TOPIC, PREFIXED, "ord", PUB),
        policy(TOPIC, LITERAL, "orders", PUB, decision=DENY),
    ]
    assert not allowed(policies, check(TOPIC, "orders", PUB), PEER)
    assert allowed(policies, check(TOPIC, "ordinal", PUB), PEER)


def test_literal_allow_beats_prefixed_deny() -> None:
    policies = [
        policy(TOPIC, PREFIXED, "ord", PUB, decision=DENY),
        policy(TOPIC, LITERAL, "orders", PUB),
    ]
    assert allowed(policies, check(TOPIC, "orders", PUB), PEER)
    assert not allowed(policies, check(TOPIC, "ordinal", PUB), PEER)


def test_longer_prefix_beats_shorter_prefix() -> None:
    policies = [
        policy(TOPIC, PREFIXED, "a", SUB),
        policy(TOPIC, PREFIXED, "ab", SUB, decision=DENY),
        policy(TOPIC, PREFIXED, "abc", SUB),
    ]
    assert allowed(policies, check(TOPIC, "a1", SUB), PEER)
    assert not allowed(policies, check(TOPIC, "ab1", SUB), PEER)
    assert allowed(policies, check(TOPIC, "abc1", SUB), PEER)


def test_prefixed_beats_any_pattern() -> None:
    policies = [
        policy(TOPIC, ANY_NAME, "", PUB, decision=DENY),
        policy(TOPIC, PREFIXED, "public-", PUB),
    ]
    assert allowed(policies, check(TOPIC, "public-news", PUB), PEER)
    assert not allowed(policies, check(TOPIC, "private", PUB), PEER)


def test_named_type_beats_any_type_even_with_a_looser_pattern() -> None:
    # A TOPIC policy with pattern ANY outranks an ANY-type LITERAL one: type comes first.
    policies = [
        policy(ANY, LITERAL, "orders", SUB, decision=DENY),
        policy(TOPIC, ANY_NAME, "", SUB),
    ]
    assert allowed(policies, check(TOPIC, "orders", SUB), PEER)
    # For a group the ANY-type policy is the only match.
    assert not allowed(policies, check(GROUP, "orders", SUB), PEER)


def test_policy_of_another_type_does_not_match() -> None:
    policies = [policy(GROUP, LITERAL, "orders", SUB)]
    assert not allowed(policies, check(TOPIC, "orders", SUB), PEER)


# -- ties -------------------------------------------------------------------------------------


def test_deny_wins_a_tie_whatever_the_order() -> None:
    allow = policy(TOPIC, LITERAL, "orders", ALL)
    deny = policy(TOPIC, LITERAL, "orders", Action.DELETE, decision=DENY)
    for policies in ([allow, deny], [deny, allow]):
        assert not allowed(policies, check(TOPIC, "orders", Action.DELETE), PEER)
        assert allowed(policies, check(TOPIC, "orders", PUB), PEER)


def test_deny_wins_a_tie_of_equal_prefixes_with_other_cidrs() -> None:
    policies = [
        policy(TOPIC, PREFIXED, "ord", PUB, cidrs=("10.0.0.0/8",)),
        policy(TOPIC, PREFIXED, "ord", PUB, decision=DENY, cidrs=("10.1.0.0/16",)),
    ]
    assert not allowed(policies, check(TOPIC, "orders", PUB), "ipv4:10.1.2.3:1")
    assert allowed(policies, check(TOPIC, "orders", PUB), "ipv4:10.2.0.1:1")


# -- actions ----------------------------------------------------------------------------------


def test_all_covers_every_action_and_others_only_themselves() -> None:
    policies = [policy(GROUP, LITERAL, "billing", ALL), policy(TOPIC, LITERAL, "t", PUB)]
    for action in Action:
        assert allowed(policies, check(GROUP, "billing", action), PEER)
    assert allowed(policies, check(TOPIC, "t", PUB), PEER)
    assert not allowed(policies, check(TOPIC, "t", SUB), PEER)


def test_an_alternative_action_suffices() -> None:
    policies = [policy(TOPIC, LITERAL, "orders", SUB)]
    assert allowed(policies, check(TOPIC, "orders", PUB, SUB), PEER)
    assert not allowed(policies, check(TOPIC, "orders", PUB, GET), PEER)


def test_policy_not_covering_the_action_does_not_decide() -> None:
    # The DENY covers SUB only, so PUB is decided by the (less specific) ALLOW.
    policies = [
        policy(TOPIC, LITERAL, "orders", SUB, decision=DENY),
        policy(TOPIC, ANY_NAME, "", PUB),
    ]
    assert allowed(policies, check(TOPIC, "orders", PUB), PEER)
    assert not allowed(policies, check(TOPIC, "orders", SUB), PEER)


# -- ANY --------------------------------------------------------------------------------------


def test_any_type_any_pattern_covers_everything_including_the_cluster() -> None:
    policies = [policy(ANY, ANY_NAME, "", GET)]
    assert allowed(policies, check(TOPIC, "x", GET), PEER)
    assert allowed(policies, check(GROUP, "y", GET), PEER)
    assert allowed(policies, check(CLUSTER, "", GET), PEER)


def test_a_list_check_needs_a_policy_on_every_name() -> None:
    every_topic = check(TOPIC, "", Action.LIST)
    assert not allowed([policy(TOPIC, PREFIXED, "a", Action.LIST)], every_topic, PEER)
    assert allowed([policy(TOPIC, ANY_NAME, "", Action.LIST)], every_topic, PEER)


def test_no_policy_denies() -> None:
    assert decide([], Resource(TOPIC, "t"), PUB, PEER) == (None, None)
    assert not allowed([], check(TOPIC, "t", PUB), PEER)


# -- source CIDRs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "ip"),
    [
        ("ipv4:127.0.0.1:5555", "127.0.0.1"),
        ("ipv6:[::1]:5555", "::1"),
        ("ipv6:%5B::1%5D:5555", "::1"),  # how grpc 1.85 reports it
        ("ipv6:%5B::ffff:10.1.2.3%5D:5555", "10.1.2.3"),  # dual-stack listener
        ("10.0.0.9", "10.0.0.9"),
        ("fd00::7", "fd00::7"),
        ("[fd00::7]:80", "fd00::7"),
        ("10.0.0.9:80", "10.0.0.9"),
        ("unix:/tmp/popmq.sock", None),
        ("", None),
    ],
)
def test_source_ip_reads_grpc_peers(source: str, ip: str | None) -> None:
    parsed = source_ip(source)
    assert (None if parsed is None else str(parsed)) == ip


def test_ipv4_cidr_matches_only_its_network() -> None:
    policies = [policy(TOPIC, LITERAL, "t", PUB, cidrs=("192.168.0.0/16", "10.9.9.9/32"))]
    assert allowed(policies, check(TOPIC, "t", PUB), "ipv4:192.168.3.4:1")
    assert allowed(policies, check(TOPIC, "t", PUB), "ipv4:10.9.9.9:1")
    assert not allowed(policies, check(TOPIC, "t", PUB), "ipv4:10.9.9.8:1")
    assert not allowed(policies, check(TOPIC, "t", PUB), "ipv6:%5B::1%5D:1")


def test_ipv6_cidr_matches_ipv6_peers() -> None:
    policies = [policy(TOPIC, LITERAL, "t", PUB, cidrs=("::1/128", "fd00::/8"))]
    assert allowed(policies, check(TOPIC, "t", PUB), "ipv6:[::1]:5555")
    assert allowed(policies, check(TOPIC, "t", PUB), "ipv6:%5Bfd12::3%5D:5555")
    assert not allowed(policies, check(TOPIC, "t", PUB), "ipv6:[fe80::1]:5555")
    assert not allowed(policies, check(TOPIC, "t", PUB), "ipv4:127.0.0.1:5555")


def test_ipv4_mapped_ipv6_peer_matches_an_ipv4_cidr() -> None:
    policies = [policy(TOPIC, LITERAL, "t", PUB, cidrs=("10.0.0.0/8",))]
    assert allowed(policies, check(TOPIC, "t", PUB), "ipv6:%5B::ffff:10.1.2.3%5D:5555")


def test_policy_with_cidrs_never_matches_a_peer_without_ip() -> None:
    policies = [policy(TOPIC, LITERAL, "t", PUB, cidrs=("0.0.0.0/0", "::/0"))]
    assert not allowed(policies, check(TOPIC, "t", PUB), "unix:/tmp/s")
    assert allowed([policy(TOPIC, LITERAL, "t", PUB)], check(TOPIC, "t", PUB), "unix:/tmp/s")


def test_deny_from_a_network_outside_it_leaves_the_allow() -> None:
    policies = [
        policy(TOPIC, LITERAL, "t", PUB),
        policy(TOPIC, LITERAL, "t", PUB, decision=DENY, cidrs=("203.0.113.0/24",)),
    ]
    assert not allowed(policies, check(TOPIC, "t", PUB), "ipv4:203.0.113.9:1")
    assert allowed(policies, check(TOPIC, "t", PUB), PEER)


# -- authorize --------------------------------------------------------------------------------


def test_super_principal_passes_without_a_user() -> None:
    authorize(ANONYMOUS_SUPER, None, (), [check(CLUSTER, "", ALL)])


def test_stored_super_user_passes_and_disabled_user_is_refused() -> None:
    checks = [check(GROUP, "billing", SUB)]
    authorize(app(), User("app", "s" * 8, UserType.SUPER, True), (), checks)
    everything = [policy(ANY, ANY_NAME, "", ALL)]
    with pytest.raises(PermissionDeniedError, match="'app' is disabled"):
        authorize(app(), User("app", "s" * 8, UserType.NORMAL, False), everything, checks)
    with pytest.raises(PermissionDeniedError, match="'app' does not exist"):
        authorize(app(), None, everything, checks)


def test_refusal_names_user_action_and_resource() -> None:
    policies = [policy(TOPIC, LITERAL, "orders", PUB)]
    checks = [check(TOPIC, "orders", PUB), check(GROUP, "billing", SUB)]
    with pytest.raises(PermissionDeniedError) as caught:
        authorize(app(), APP, policies, checks)
    assert str(caught.value) == "user 'app' may not SUB group 'billing': no policy allows it"
    assert caught.value.code == "PERMISSION_DENIED"


def test_refusal_by_a_deny_policy_names_it() -> None:
    policies = [
        policy(TOPIC, ANY_NAME, "", ALL),
        policy(TOPIC, PREFIXED, "secret-", SUB, decision=DENY),
    ]
    with pytest.raises(PermissionDeniedError) as caught:
        authorize(app(), APP, policies, [check(TOPIC, "secret-plans", SUB)])
    assert str(caught.value) == (
        "user 'app' may not SUB topic 'secret-plans': policy DENY SUB on topics prefixed "
        "'secret-' denies it"
    )


def test_refusal_of_a_cluster_or_list_check_reads_well() -> None:
    with pytest.raises(PermissionDeniedError, match="may not UPDATE the cluster"):
        authorize(app(), APP, [], [check(CLUSTER, "", Action.UPDATE)])
    with pytest.raises(PermissionDeniedError, match="may not LIST every topic"):
        authorize(app(), APP, [], [check(TOPIC, "", Action.LIST)])
    with pytest.raises(PermissionDeniedError, match="may not PUB or SUB topic 'orders'"):
        authorize(app(), APP, [], [check(TOPIC, "orders", PUB, SUB)])


def test_every_check_must_pass() -> None:
    policies = [policy(TOPIC, LITERAL, "orders", SUB), policy(GROUP, LITERAL, "billing", SUB)]
    authorize(app(), APP, policies, [check(TOPIC, "orders", SUB), check(GROUP, "billing", SUB)])
    with pytest.raises(PermissionDeniedError, match="group 'other'"):
        authorize(app(), APP, policies, [check(TOPIC, "orders", SUB), check(GROUP, "other", SUB)])
