"""`popmq serve` configuration: TOML file, POPMQ_* environment, flags, precedence, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from popmq.broker_core.config import DEFAULT_RETRY_BACKOFF_S
from popmq.runtime import settings
from popmq.runtime.config import ServerConfig


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "popmq.toml"
    path.write_text(text)
    return path


def test_nothing_set_gives_the_defaults() -> None:
    assert settings.load() == ServerConfig()


def test_a_file_sets_values_in_every_kind_of_section(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[server]
listen = "0.0.0.0:9000"
shutdown_grace_s = 2

[store]
data_dir = "/var/lib/popmq"
flush = "async"

[pop]
max_batch = 64

[groups]
retry_backoff_s = [1, 2.5, 60]

[broker]
auto_create_topics = true

[metrics]
listen = "127.0.0.1:9464"

[log]
format = "json"
level = "debug"
""",
    )
    config = settings.load(config_file=path)
    assert config.listen == "0.0.0.0:9000"
    assert config.shutdown_grace_s == 2.0 and isinstance(config.shutdown_grace_s, float)
    assert config.broker.store.data_dir == Path("/var/lib/popmq")
    assert config.broker.store.flush == "async"
    assert config.broker.pop.max_batch == 64
    assert config.broker.pop.default_invisible_s == 30.0  # untouched keys keep defaults
    assert config.broker.groups.retry_backoff_s == (1.0, 2.5, 60.0)
    assert config.broker.auto_create_topics is True
    assert config.metrics.listen == "127.0.0.1:9464"
    assert (config.log.format, config.log.level) == ("json", "debug")


def test_precedence_is_flags_then_environment_then_file_then_defaults(tmp_path: Path) -> None:
    path = _write(
        tmp_path, '[server]\nlisten = "file:1"\n[pop]\nmax_batch = 10\nmax_scan_per_pop = 7\n'
    )
    environ = {"POPMQ_SERVER_LISTEN": "env:2", "POPMQ_POP_MAX_BATCH": "20", "HOME": "/x"}
    config = settings.load(config_file=path, environ=environ, flags={"server.listen": "flag:3"})
    assert config.listen == "flag:3"
    assert config.broker.pop.max_batch == 20
    assert config.broker.pop.max_scan_per_pop == 7
    assert config.broker.pop.retry_first_every == 5


def test_environment_values_are_parsed_by_type() -> None:
    config = settings.load(
        environ={
            "POPMQ_BROKER_AUTO_CREATE_TOPICS": "yes",
            "POPMQ_LONG_POLLING_MAX_TOTAL": "50_000",
            "POPMQ_RETENTION_RETENTION_S": "3600.5",
            "POPMQ_GROUPS_RETRY_BACKOFF_S": "1, 2, 3",
            "POPMQ_STORE_DATA_DIR": "/tmp/x",
            "POPMQ_CONFIG": "ignored here: it names the file",
            "POPMQ_ENDPOINT": "ignored: the CLI's",
        }
    )
    assert config.broker.auto_create_topics is True
    assert config.broker.long_polling.max_total == 50_000
    assert config.broker.retention.retention_s == 3600.5
    assert config.broker.groups.retry_backoff_s == (1.0, 2.0, 3.0)
    assert config.broker.store.data_dir == Path("/tmp/x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[pop]\nmax_bach = 3\n", "unknown key pop.max_bach in .*; did you mean pop.max_batch?"),
        (
            "[popp]\nmax_batch = 3\n",
            r"unknown section \[popp\] in .*; did you mean pop\?",
        ),
        (
            "[pop]\nmax_batch = 'many'\n",
            r"pop.max_batch = 'many' \(.*popmq.toml\) .*expected an integer",
        ),
        ("[pop]\nmax_batch = true\n", "expected an integer"),
        ("[store]\nflush = 'sometimes'\n", "expected one of sync, async"),
        ("[broker]\nauto_create_topics = 1\n", "expected true or false"),
        (
            "[pop]\nmax_batch = 5000\n",
            r"\[pop\] is not valid: pop.max_batch 5000 must be within 1..1024",
        ),
        ("pop = 3\n", "pop in .* must be a table"),
        ("[pop\n", "is not valid TOML"),
    ],
)
def test_bad_files_are_errors_that_say_what_and_where(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(settings.SettingsError, match=message):
        settings.load(config_file=_write(tmp_path, text))


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(settings.SettingsError, match="does not exist"):
        settings.load(config_file=tmp_path / "nope.toml")


def test_unknown_environment_variables_are_errors_with_a_suggestion() -> None:
    with pytest.raises(
        settings.SettingsError,
        match=r"unknown environment variable POPMQ_POP_MAX_BATCHES; "
        r"did you mean POPMQ_POP_MAX_BATCH\?",
    ):
        settings.load(environ={"POPMQ_POP_MAX_BATCHES": "3"})
    with pytest.raises(settings.SettingsError, match="expected true or false"):
        settings.load(environ={"POPMQ_BROKER_AUTO_CREATE_TOPICS": "maybe"})


def test_set_assignments_and_their_errors() -> None:
    assert settings.parse_assignments(["pop.max_batch=64", "log.format=json"]) == {
        "pop.max_batch": 64,
        "log.format": "json",
    }
    with pytest.raises(settings.SettingsError, match=r"not SECTION\.KEY=VALUE"):
        settings.parse_assignments(["pop.max_batch"])
    with pytest.raises(settings.SettingsError, match=r"did you mean log\.level\?"):
        settings.parse_assignments(["log.levle=debug"])
    with pytest.raises(settings.SettingsError, match="expected a finite number"):
        settings.parse_assignments(["pop.default_invisible_s=inf"])


def test_printed_config_reads_back_to_the_same_config(tmp_path: Path) -> None:
    config = settings.load(
        environ={"POPMQ_POP_MAX_BATCH": "100", "POPMQ_STORE_DATA_DIR": "/srv/data dir"},
        flags={"metrics.listen": "0.0.0.0:9464", "groups.retry_backoff_s": "1.5,3"},
    )
    text = settings.to_toml(config)
    assert "[pop]\nmax_batch = 100\n" in text
    assert settings.load(config_file=_write(tmp_path, text)) == config


def test_every_setting_has_a_section_an_env_name_and_a_value() -> None:
    table = settings.settings_table()
    sections = {s.section for s in table.values()}
    assert {"server", "broker", "store", "pop", "long_polling", "groups", "retention",
            "metrics", "log"} <= sections  # fmt: skip
    assert table["long_polling.max_total"].env == "POPMQ_LONG_POLLING_MAX_TOTAL"
    items = settings.items(ServerConfig())
    assert items["groups.retry_backoff_s"] == repr(list(DEFAULT_RETRY_BACKOFF_S)).replace("'", "")
    assert items["store.data_dir"] == '"data"'


def test_the_broker_name_is_a_setting_and_a_bad_one_says_what_is_allowed() -> None:
    assert settings.load().broker.broker_name == "broker-a"
    config = settings.load(environ={"POPMQ_BROKER_BROKER_NAME": "shard-7"})
    assert config.broker.broker_name == "shard-7"
    assert settings.items(config)["broker.broker_name"] == '"shard-7"'
    with pytest.raises(
        settings.SettingsError,
        match=r"^\[broker\] is not valid: broker name 'shard 7' is invalid: use only letters",
    ):
        settings.load(flags={"broker.broker_name": "shard 7"})


@pytest.mark.parametrize("retired", ["clients.broker_name", "rocketmq.broker_name"])
def test_a_removed_broker_name_setting_is_refused_naming_broker_broker_name(
    tmp_path: Path, retired: str
) -> None:
    """The broker has one name: a file, variable or flag still naming an old one fails at
    startup (it would otherwise be ignored, or rejected without saying what replaced it)."""
    section, key = retired.split(".")
    instead = r"no longer a setting: the broker has one name, broker\.broker_name"
    path = _write(tmp_path, f'[{section}]\n{key} = "shard-7"\n')
    with pytest.raises(settings.SettingsError, match=rf"^{retired} \({path}\) is {instead}"):
        settings.load(config_file=path)
    variable = f"POPMQ_{section.upper()}_BROKER_NAME"
    with pytest.raises(settings.SettingsError, match=rf"\(environment {variable}\) is {instead}"):
        settings.load(environ={variable: "shard-7"})
    with pytest.raises(settings.SettingsError, match=rf"\(--set\) is {instead}"):
        settings.parse_assignments([f"{retired}=shard-7"])
    with pytest.raises(settings.SettingsError, match=rf"\(command line\) is {instead}"):
        settings.load(flags={retired: "shard-7"})
    assert retired not in settings.settings_table()


_SECRETS = {
    "POPMQ_SECURITY_ROOT_ACCESS_KEY": "root",
    "POPMQ_SECURITY_ROOT_SECRET_KEY": "s3cr3t-root",
    "POPMQ_SECURITY_METRICS_USERNAME": "prom",
    "POPMQ_SECURITY_METRICS_PASSWORD": "s3cr3t-password",
    "POPMQ_SECURITY_METRICS_BEARER_TOKEN": "s3cr3t-token",
}


def test_secrets_are_redacted_in_the_config_items_and_the_printed_config(tmp_path: Path) -> None:
    config = settings.load(environ=_SECRETS)
    assert config.security.metrics_password == "s3cr3t-password"
    items = settings.items(config)
    for name in ("root_secret_key", "metrics_password", "metrics_bearer_token"):
        assert items[f"security.{name}"] == '"<redacted>"'
    assert items["security.metrics_username"] == '"prom"'
    text = settings.to_toml(config)
    assert "s3cr3t" not in text and "s3cr3t" not in repr(config)
    assert "# metrics_password = <redacted> (a secret: set, not shown; " in text
    # Read back, a redacted secret is unset (never the text "<redacted>"): given again from
    # the environment, the config is the same.
    back = settings.load(config_file=_write(tmp_path, text), environ=_SECRETS)
    assert back == config
    assert settings.items(ServerConfig())["security.metrics_password"] == '""'


def test_a_bad_secret_value_is_not_shown_in_the_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "[security]\nmetrics_password = 987654321\n")
    with pytest.raises(settings.SettingsError) as refused:
        settings.load(config_file=path)
    assert "987654321" not in str(refused.value)
    assert "security.metrics_password = <redacted>" in str(refused.value)
