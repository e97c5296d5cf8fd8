"""`[cluster] vanished_grace_s`: how long a proxy holds a broker whose registration vanished
while its connection stayed up (coordination/routes.py RouteCache), a setting with a range."""

from __future__ import annotations

import pytest

from popmq.cluster.proxy_server import ProxyServer
from popmq.coordination.config import ClusterConfig
from popmq.coordination.routes import MAX_VANISHED_GRACE_S, VANISHED_GRACE_S, RoutesConfig
from popmq.runtime import settings


def test_the_vanished_grace_defaults_to_ten_seconds_and_is_set_like_any_setting() -> None:
    assert settings.load().cluster.vanished_grace_s == VANISHED_GRACE_S == 10.0
    assert RoutesConfig().vanished_grace_s == VANISHED_GRACE_S
    config = settings.load(environ={"POPMQ_CLUSTER_VANISHED_GRACE_S": "25"})
    assert config.cluster.vanished_grace_s == 25.0
    assert settings.load(flags={"cluster.vanished_grace_s": "0"}).cluster.vanished_grace_s == 0
    assert ClusterConfig(vanished_grace_s=MAX_VANISHED_GRACE_S).vanished_grace_s == 60.0


@pytest.mark.parametrize("value", [-0.001, -1.0, 60.001, 3600.0, float("inf"), float("nan")])
def test_a_vanished_grace_out_of_range_is_refused_saying_what_is_allowed(value: float) -> None:
    with pytest.raises(
        ValueError, match=r"cluster\.vanished_grace_s .* must be within 0\.\.60 s: 0 drops"
    ):
        ClusterConfig(vanished_grace_s=value)
    if value == value and value != float("inf"):  # the parser refuses those before the range
        with pytest.raises(settings.SettingsError, match=r"^\[cluster\] is not valid: .*0\.\.60"):
            settings.load(flags={"cluster.vanished_grace_s": str(value)})


def test_a_proxy_holds_vanished_brokers_for_its_setting() -> None:
    config = settings.load(
        flags={"cluster.etcd": "127.0.0.1:2379", "cluster.vanished_grace_s": "30"}
    )
    proxy = ProxyServer(config)
    assert proxy.broker.routes.config.vanished_grace_s == 30.0
    # The proxy's other routes setting still comes from [broker].
    assert (
        proxy.broker.routes.config.default_queues_per_broker == config.broker.default_topic_queues
    )
