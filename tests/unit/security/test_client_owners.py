"""ClientOwners: a client id is its first user's; the table forgets the least recently used."""

from __future__ import annotations

import pytest

from popmq.broker_core import PermissionDeniedError
from popmq.security.client_owners import ClientOwners
from popmq.security.records import check_cidrs


def test_the_first_user_owns_a_client_id_and_others_are_refused() -> None:
    owners = ClientOwners()
    owners.claim("host@1", "alice")
    owners.claim("host@1", "alice")
    with pytest.raises(PermissionDeniedError, match="'bob' may not use client id 'host@1'"):
        owners.claim("host@1", "bob")
    owners.claim("host@2", "bob")
    assert len(owners) == 2


def test_the_least_recently_used_id_is_forgotten_first() -> None:
    owners = ClientOwners(capacity=2)
    owners.claim("a", "alice")
    owners.claim("b", "bob")
    owners.claim("a", "alice")  # a is now the most recent
    owners.claim("c", "carol")  # b goes
    assert len(owners) == 2
    owners.claim("b", "mallory")  # forgotten: claimable anew (and a goes)
    with pytest.raises(PermissionDeniedError):
        owners.claim("c", "mallory")


def test_an_ipv4_mapped_cidr_is_stored_as_the_ipv4_network_peers_are_matched_in() -> None:
    assert check_cidrs(["::ffff:10.0.0.0/104", "::ffff:192.0.2.7", "fd00::/8"]) == (
        "10.0.0.0/8",
        "192.0.2.7/32",
        "fd00::/8",
    )
