"""A server process's configuration from a TOML file, POPMQ_* environment variables and
flags: `popmq serve`, `popmq proxy` and `popmq broker` read the same settings (config.py).

Precedence: flags > environment > file > defaults. Every setting belongs to one frozen
dataclass (one per concern); its TOML section is the dataclass's field name:

    [server]        ServerConfig: listen, shutdown_grace_s
    [connections]   ConnectionConfig: keepalive and idle limits of client connections
    [metrics]       MetricsConfig: listen
    [log]           LogConfig: level, format
    [broker]        BrokerConfig's own settings (broker_name, allow_rename,
                    auto_create_topics, default_topic_queues)
    [store] [pop] [long_polling] [groups] [retention] [messages] ...  BrokerConfig's parts
    [clients]       ClientRegistryConfig

The sections and keys are read from the dataclasses themselves, so a field added to one is
configurable at once. The environment variable of `pop.max_batch` is POPMQ_POP_MAX_BATCH;
the generic flag is `--set pop.max_batch=64`. An unknown section, key or POPMQ_* variable is
an error naming the nearest valid one; a removed setting (RETIRED) is an error naming what
replaced it, so an old config file fails at startup saying what to write instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from popmq.broker_core import InvalidArgumentError
from popmq.runtime.config import ServerConfig
from popmq.security.config import SECRET_SETTINGS

ENV_PREFIX = "POPMQ_"
NOT_SETTINGS = frozenset(
    {
        "POPMQ_ACCESS_KEY",
        "POPMQ_CONFIG",
        "POPMQ_ENDPOINT",
        "POPMQ_ETCD",
        "POPMQ_NODE_MODULES",
        "POPMQ_PURE_PYTHON",
        "POPMQ_TLS",
        "POPMQ_TLS_CA",
        "POPMQ_TLS_CERT",
        "POPMQ_TLS_KEY",
        "POPMQ_SECRET_KEY",
        "POPMQ_TLS_SERVER_NAME",
    }
)
"""POPMQ_* variables that are not settings: the config file path, the CLI's endpoint, TLS
options and credentials, the test suite's etcd binary and Node modules (a developer
exports them for the whole suite, whose servers must still start), and the switch that runs
the Python sources of the compiled modules (popmq/_compiled.py)."""
ROOT_SECTION = "server"
REDACTED = "<redacted>"
"""What is shown instead of a secret's value (--print-config, GetServerInfo, errors)."""

_ONE_BROKER_NAME = (
    "the broker has one name, broker.broker_name ([broker] broker_name, "
    "POPMQ_BROKER_BROKER_NAME), which routes, queue assignment and receipt handles all use"
)
RETIRED: Mapping[str, str] = {
    "clients.broker_name": _ONE_BROKER_NAME,
    "rocketmq.broker_name": _ONE_BROKER_NAME,
}
"""Removed settings ("section.key") -> what to use instead. rocketmq.broker_name was a
RocketMQConfig field set in code; it is listed so that a file naming it is told the same."""


class SettingsError(InvalidArgumentError):
    """A configuration value, key or file is not valid; the message says what and where."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Setting:
    section: str
    key: str
    path: tuple[str, ...]
    """Field names from ServerConfig down to the field."""
    type: Any
    default: Any

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def env(self) -> str:
        return f"{ENV_PREFIX}{self.section}_{self.key}".upper()

    @property
    def secret(self) -> bool:
        """Whether its value is a secret, never shown (`[security]` SECRET_SETTINGS)."""
        return self.section == "security" and self.key in SECRET_SETTINGS


def _is_dataclass_type(value: Any) -> bool:
    return isinstance(value, type) and dataclasses.is_dataclass(value)


def _walk(cls: type, path: tuple[str, ...], section: str, out: dict[str, _Setting]) -> None:
    hints = typing.get_type_hints(cls)
    instance = cls()
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if _is_dataclass_type(kind):
            _walk(kind, (*path, field.name), field.name, out)
            continue
        setting = _Setting(
            section, field.name, (*path, field.name), kind, getattr(instance, field.name)
        )
        out[setting.name] = setting


def settings_table() -> dict[str, _Setting]:
    """Every configurable setting by "section.key", in declaration order."""
    table: dict[str, _Setting] = {}
    _walk(ServerConfig, (), ROOT_SECTION, table)
    return table


def _check_retired(name: str, where: str) -> None:
    """Refuse a removed setting, naming its replacement."""
    instead = RETIRED.get(name)
    if instead is not None:
        raise SettingsError(f"{name} ({where}) is no longer a setting: {instead}")


def _suggest(word: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


# -- values -------------------------------------------------------------------------------------


def _coerce(setting: _Setting, value: Any, where: str) -> Any:
    """Check a TOML value (or parse a string from the environment or a flag) for a setting."""
    kind = setting.type
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(inner) == 1:
            return _coerce(dataclasses.replace(setting, type=inner[0]), value, where)
    text = isinstance(value, str)

    def fail(expected: str) -> SettingsError:
        shown = REDACTED if setting.secret else repr(value)
        return SettingsError(
            f"{setting.name} = {shown} ({where}) is not valid: expected {expected}"
        )

    if kind is bool:
        if isinstance(value, bool):
            return value
        if text and value.strip().lower() in ("true", "1", "yes", "on"):
            return True
        if text and value.strip().lower() in ("false", "0", "no", "off"):
            return False
        raise fail("true or false")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text:
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                pass
        raise fail("an integer")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif text:
            try:
                number = float(value.strip())
            except ValueError:
                raise fail("a number") from None
        else:
            raise fail("a number")
        if not math.isfinite(number):
            raise fail("a finite number")
        return number
    if kind is str:
        if text:
            return value
        raise fail("a string")
    if kind is Path:
        if text and value:
            return Path(value)
        raise fail("a path")
    if origin is Literal:
        choices = typing.get_args(kind)
        if value in choices:
            return value
        raise fail("one of " + ", ".join(str(c) for c in choices))
    if origin is tuple and typing.get_args(kind)[1:] == (Ellipsis,):
        item = dataclasses.replace(setting, type=typing.get_args(kind)[0])
        items = value.split(",") if text else value
        if not isinstance(items, list | tuple):
            raise fail("a list")
        return tuple(_coerce(item, v.strip() if isinstance(v, str) else v, where) for v in items)
    raise fail(f"a value of type {kind} (set it in code; it has no text form)")


def _whole(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _toml_value(value: Any) -> str:
    """A value in TOML syntax (for --print-config and GetServerInfo)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, tuple | list):
        # Whole seconds as integers, as the defaults and most files write them: [1, 5, 2.5],
        # not the [1.0, 5.0, 2.5] a float setting's coercion would show.
        return "[" + ", ".join(_toml_value(_whole(v)) for v in value) + "]"
    return json.dumps(str(value))


# -- sources ------------------------------------------------------------------------------------


def read_file(path: Path) -> dict[str, Any]:
    """Parse a TOML config file into {"section.key": value}, refusing unknown names."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
    table = settings_table()
    sections = sorted({s.section for s in table.values()})
    found: dict[str, Any] = {}
    for section, body in data.items():
        if isinstance(body, dict):
            for key in body:
                _check_retired(f"{section}.{key}", str(path))
        if section not in sections:
            raise SettingsError(
                f"unknown section [{section}] in {path}{_suggest(section, sections)} "
                f"(sections: {', '.join(sections)})"
            )
        if not isinstance(body, dict):
            raise SettingsError(f"{section} in {path} must be a table: write [{section}]")
        for key, value in body.items():
            name = f"{section}.{key}"
            if name not in table:
                raise SettingsError(f"unknown key {name} in {path}{_suggest(name, list(table))}")
            found[name] = _coerce(table[name], value, str(path))
    return found


def read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """{"section.key": value} from POPMQ_<SECTION>_<KEY> variables; unknown ones are errors."""
    table = settings_table()
    by_env = {s.env: s for s in table.values()}
    retired = {f"{ENV_PREFIX}{name.replace('.', '_')}".upper(): name for name in RETIRED}
    found: dict[str, Any] = {}
    for variable, value in environ.items():
        if not variable.startswith(ENV_PREFIX) or variable in NOT_SETTINGS:
            continue
        if variable in retired:
            _check_retired(retired[variable], f"environment {variable}")
        setting = by_env.get(variable)
        if setting is None:
            raise SettingsError(
                f"unknown environment variable {variable}{_suggest(variable, sorted(by_env))}"
            )
        found[setting.name] = _coerce(setting, value, f"environment {variable}")
    return found


def parse_assignments(assignments: list[str]) -> dict[str, Any]:
    """{"section.key": value} from `--set section.key=value` flags."""
    table = settings_table()
    found: dict[str, Any] = {}
    for text in assignments:
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep:
            raise SettingsError(f"--set {text!r} is not SECTION.KEY=VALUE")
        _check_retired(name, "--set")
        if name not in table:
            raise SettingsError(f"unknown setting {name} in --set{_suggest(name, list(table))}")
        found[name] = _coerce(table[name], value, "--set")
    return found


# -- building -----------------------------------------------------------------------------------


def build(values: Mapping[str, Any]) -> ServerConfig:
    """A ServerConfig with `values` ({"section.key": value}) over the defaults."""
    table = settings_table()
    tree: dict[str, Any] = {}
    for name, value in values.items():
        setting = table.get(name)
        if setting is None:
            _check_retired(name, "settings")
            raise SettingsError(f"unknown setting {name}{_suggest(name, list(table))}")
        node = tree
        for part in setting.path[:-1]:
            node = node.setdefault(part, {})
        node[setting.path[-1]] = value
    config: ServerConfig = _construct(ServerConfig, tree, ROOT_SECTION)
    return config


def _construct(cls: type, tree: Mapping[str, Any], section: str) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in tree:
            continue
        kind = hints[field.name]
        value = tree[field.name]
        kwargs[field.name] = (
            _construct(kind, value, field.name) if _is_dataclass_type(kind) else value
        )
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a __post_init__ rule across fields
        raise SettingsError(f"[{section}] is not valid: {exc}") from None


def load(
    *,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> ServerConfig:
    """The effective configuration: flags over environment over file over defaults.

    `flags` maps "section.key" to values already typed or to strings (from `--set`).
    """
    values: dict[str, Any] = {}
    if config_file is not None:
        values.update(read_file(config_file))
    values.update(read_env(environ or {}))
    table = settings_table()
    for name, value in (flags or {}).items():
        _check_retired(name, "command line")
        if name not in table:
            raise SettingsError(f"unknown setting {name}{_suggest(name, list(table))}")
        values[name] = _coerce(table[name], value, "command line")
    return build(values)


def items(config: ServerConfig) -> dict[str, str]:
    """The configuration as {"section.key": TOML value}, in declaration order; a secret
    that is set shows as "<redacted>" (GetServerInfo, --print-config, never its value)."""
    out: dict[str, str] = {}
    for setting in settings_table().values():
        value: Any = config
        for part in setting.path:
            value = getattr(value, part)
        if value is not None:
            out[setting.name] = _toml_value(REDACTED if setting.secret and value else value)
    return out


def to_toml(config: ServerConfig) -> str:
    """The configuration as a TOML document that `--config` reads back unchanged, but for
    the secrets: a secret that is set is a comment saying so (its value is never printed,
    and a "<redacted>" read back would become the secret), to be given again from the
    environment or the file it came from."""
    values = items(config)
    table = settings_table()
    sections: dict[str, list[str]] = {}
    for setting in table.values():
        value = values.get(setting.name)
        if value is None:
            line = f"# {setting.key} is unset"
        elif setting.secret and value != '""':
            line = f"# {setting.key} = {REDACTED} (a secret: set, not shown; {setting.env})"
        else:
            line = f"{setting.key} = {value}"
        sections.setdefault(setting.section, []).append(line)
    return "\n".join(
        f"[{section}]\n" + "\n".join(lines) + "\n" for section, lines in sections.items()
    )
