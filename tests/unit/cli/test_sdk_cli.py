"""The popmq CLI: argument parsing, output lines and exit codes (no server)."""

from __future__ import annotations

import io
import json
import os
import sys
import tomllib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Self

import pytest

from popmq import sdk
from popmq.cli import commands as cli_commands
from popmq.cli import main as cli_main
from popmq.cli import render as cli_render
from popmq.sdk.tls import TLS

UNREACHABLE = "unix:/nonexistent-popmq-test/popmq.sock"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _message(handle: str, body: bytes) -> sdk.ReceivedMessage:
    return sdk.ReceivedMessage(
        message_id=f"id-{handle}",
        topic="orders",
        queue_id=1,
        offset=4,
        body=body,
        tag="TagA",
        keys=(),
        properties={},
        born_timestamp=EPOCH,
        store_timestamp=EPOCH,
        delivery_attempt=2,
        receipt_handle=handle,
        invisible_until=EPOCH,
    )


class FakeConsumer:
    """Replaces SimpleConsumer in the CLI module; records what the command did."""

    instances: ClassVar[list[FakeConsumer]] = []
    messages: ClassVar[list[sdk.ReceivedMessage]] = []

    def __init__(
        self,
        endpoint: str,
        *,
        group: str,
        topic: str,
        filter: str,
        tls: TLS = False,
        credentials: sdk.Credentials | None = None,
    ) -> None:
        self.endpoint, self.group, self.topic, self.filter = endpoint, group, topic, filter
        self.tls = tls
        self.credentials = credentials
        self.receive_args: dict[str, Any] = {}
        self.acked: list[sdk.ReceivedMessage] = []
        self.nacked: list[tuple[sdk.ReceivedMessage, float | None]] = []
        FakeConsumer.instances.append(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def receive(self, **kwargs: Any) -> list[sdk.ReceivedMessage]:
        self.receive_args = kwargs
        return list(self.messages)

    def ack(self, messages: Sequence[sdk.ReceivedMessage]) -> None:
        self.acked.extend(messages)

    def nack(self, message: sdk.ReceivedMessage, delay_s: float | None = None) -> datetime:
        self.nacked.append((message, delay_s))
        return EPOCH


@pytest.fixture
def fake_consumer(monkeypatch: pytest.MonkeyPatch) -> type[FakeConsumer]:
    monkeypatch.setattr(FakeConsumer, "instances", [])
    monkeypatch.setattr(cli_commands, "SimpleConsumer", FakeConsumer)
    return FakeConsumer


def test_receive_prints_one_line_per_message_and_acks(
    fake_consumer: type[FakeConsumer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    messages = [_message("rh-1", b"hello"), _message("rh-2", b"\xffbad")]
    monkeypatch.setattr(fake_consumer, "messages", messages)

    code = cli_main.main(["receive", "billing", "orders", "--max", "2", "--wait", "1", "--ack"])

    assert code == 0
    assert capsys.readouterr().out.splitlines() == [
        "id-rh-1 attempt=2 queue=1 offset=4 tag=TagA body=hello",
        "id-rh-2 attempt=2 queue=1 offset=4 tag=TagA body=<binary 4 bytes>",
        "acked 2",
    ]
    (consumer,) = fake_consumer.instances
    assert (consumer.group, consumer.topic, consumer.endpoint) == (
        "billing",
        "orders",
        "127.0.0.1:8081",
    )
    assert consumer.receive_args == {"max_messages": 2, "invisible_duration_s": 30.0, "wait_s": 1.0}
    assert consumer.acked == messages


def test_receive_without_messages_says_so(
    fake_consumer: type[FakeConsumer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(fake_consumer, "messages", [])

    assert cli_main.main(["receive", "billing", "orders", "--ack"]) == 0
    assert capsys.readouterr().out == "no messages\n"
    assert fake_consumer.instances[0].acked == []


class ClosingStdout(io.StringIO):
    """A stdout whose reader goes away after `lines` lines (`| head -N`)."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.lines = lines

    def write(self, text: str) -> int:
        if self.getvalue().count("\n") >= self.lines:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


_THREE = [_message("rh-1", b"a"), _message("rh-2", b"b"), _message("rh-3", b"c")]


@pytest.mark.parametrize("count", [[], ["--count", "3"]], ids=["one-receive", "count"])
def test_receive_ack_into_a_closed_pipe_acks_what_got_out_and_nacks_the_rest_now(
    count: list[str],
    fake_consumer: type[FakeConsumer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(fake_consumer, "messages", _THREE)
    out = ClosingStdout(lines=1)
    monkeypatch.setattr(sys, "stdout", out)

    code = cli_main.main(["receive", "billing", "orders", "--ack", *count])

    assert code == cli_main.EXIT_BROKEN_PIPE == 141
    assert out.getvalue() == "id-rh-1 attempt=2 queue=1 offset=4 tag=TagA body=a\n"
    (consumer,) = fake_consumer.instances
    assert consumer.acked == _THREE[:1]
    assert consumer.nacked == [(_THREE[1], 0), (_THREE[2], 0)]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("count", [[], ["--count", "3"]], ids=["one-receive", "count"])
def test_receive_ack_json_acks_only_after_the_document_is_out(
    count: list[str],
    fake_consumer: type[FakeConsumer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(fake_consumer, "messages", _THREE)
    monkeypatch.setattr(sys, "stdout", ClosingStdout(lines=0))

    assert cli_main.main(["receive", "billing", "orders", "--ack", "--json", *count]) == 141
    (consumer,) = fake_consumer.instances
    assert consumer.acked == []
    assert consumer.nacked == [(m, 0) for m in _THREE]
    assert capsys.readouterr().err == ""


def test_receive_without_ack_into_a_closed_pipe_leaves_messages_to_their_invisible_time(
    fake_consumer: type[FakeConsumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fake_consumer, "messages", _THREE)
    monkeypatch.setattr(sys, "stdout", ClosingStdout(lines=1))

    assert cli_main.main(["receive", "billing", "orders"]) == 141
    (consumer,) = fake_consumer.instances
    assert (consumer.acked, consumer.nacked) == ([], [])


def test_receive_json_acks_after_printing(
    fake_consumer: type[FakeConsumer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(fake_consumer, "messages", _THREE)

    assert cli_main.main(["receive", "billing", "orders", "--ack", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["acked"] == 3
    assert [m["receipt_handle"] for m in document["received"]] == ["rh-1", "rh-2", "rh-3"]
    assert fake_consumer.instances[0].acked == _THREE


@pytest.mark.parametrize("messages", [_THREE, []], ids=["three", "none"])
def test_receive_count_json_streams_the_document_print_json_would_print(
    messages: list[sdk.ReceivedMessage],
    fake_consumer: type[FakeConsumer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(fake_consumer, "messages", messages)

    code = cli_main.main(["receive", "billing", "orders", "--count", "3", "--ack", "--json"])

    assert code == 0
    out = capsys.readouterr().out
    document = json.loads(out)
    assert out == json.dumps(document, indent=2) + "\n"  # byte for byte print_json's layout
    assert list(document) == ["received", "acked", "seconds"]
    assert [m["receipt_handle"] for m in document["received"]] == [
        m.receipt_handle for m in messages
    ]
    assert document["acked"] == len(messages)
    assert fake_consumer.instances[0].acked == messages


def _fake_run_server(monkeypatch: pytest.MonkeyPatch, code: int = 0) -> list[Any]:
    """Replace popmq.proxy.server.run_server (the real settings module stays) and record configs."""
    import popmq.proxy.server

    seen: list[Any] = []

    def run_server(config: Any) -> int:
        seen.append(config)
        return code

    monkeypatch.setattr(popmq.proxy.server, "run_server", run_server)
    return seen


def test_serve_runs_the_server_with_parsed_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake_run_server(monkeypatch, code=7)

    code = cli_main.main(
        ["serve", "--listen", "0.0.0.0:9000", "--data-dir", "d", "--flush", "async",
         "--metrics-listen", "127.0.0.1:9100", "--log-format", "json", "--set", "pop.max_batch=64"]
    )  # fmt: skip

    assert code == 7
    (config,) = seen
    assert config.listen == "0.0.0.0:9000"
    assert config.broker.store.data_dir == Path("d")
    assert config.broker.store.flush == "async"
    assert config.metrics.listen == "127.0.0.1:9100"
    assert config.log.format == "json"
    assert config.broker.pop.max_batch == 64


def test_serve_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake_run_server(monkeypatch)
    for name in [n for n in os.environ if n.startswith("POPMQ_")]:
        monkeypatch.delenv(name)

    assert cli_main.main(["serve"]) == 0
    (config,) = seen
    assert (config.listen, config.broker.store.data_dir, config.broker.store.flush) == (
        "127.0.0.1:8081",
        Path("data"),
        "sync",
    )
    assert config.metrics.listen == ""


def test_serve_print_config_prints_toml_and_does_not_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = _fake_run_server(monkeypatch)

    assert cli_main.main(["serve", "--print-config", "--listen", "0.0.0.0:1"]) == 0

    out = capsys.readouterr().out
    assert seen == []
    parsed = tomllib.loads(out)
    assert parsed["server"]["listen"] == "0.0.0.0:1"
    assert parsed["pop"]["max_batch"] == 32


def test_serve_with_an_unknown_setting_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = _fake_run_server(monkeypatch)

    assert cli_main.main(["serve", "--set", "pop.max_bach=3"]) == 2

    assert seen == []
    assert "did you mean pop.max_batch?" in capsys.readouterr().err


def test_serve_with_a_removed_broker_name_setting_names_the_one_to_use(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seen = _fake_run_server(monkeypatch)
    for name in [n for n in os.environ if n.startswith("POPMQ_")]:
        monkeypatch.delenv(name)
    config = tmp_path / "popmq.toml"
    config.write_text('[clients]\nbroker_name = "shard-7"\n')

    assert cli_main.main(["serve", "--set", "clients.broker_name=shard-7"]) == 2
    assert cli_main.main(["serve", "--config", str(config)]) == 2
    monkeypatch.setenv("POPMQ_CLIENTS_BROKER_NAME", "shard-7")
    assert cli_main.main(["serve"]) == 2

    assert seen == []
    errors = capsys.readouterr().err.splitlines()
    assert errors == [
        f"error: clients.broker_name ({where}) is no longer a setting: the broker has one "
        "name, broker.broker_name ([broker] broker_name, POPMQ_BROKER_BROKER_NAME), which "
        "routes, queue assignment and receipt handles all use"
        for where in ("--set", str(config), "environment POPMQ_CLIENTS_BROKER_NAME")
    ]


def test_send_to_unreachable_server_exits_1_with_error_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli_main.main(["send", "orders", "hi", "--endpoint", UNREACHABLE, "--key", "k1"])

    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert captured.err.startswith("error: ")


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("127.0.0.1:99999", "port '99999', not a number in 1..65535"),
        ("127.0.0.1:65536", "port '65536'"),
        ("127.0.0.1:0", "port '0'"),
        ("127.0.0.1:-1", "port '-1'"),
        ("127.0.0.1:http", "port 'http'"),
        ("127.0.0.1", "no HOST:PORT"),
        (":8081", "no HOST:PORT"),
        ("::1:8081", "IPv6 host without brackets"),
        ("[::1]", "no port after the IPv6 address"),
        ("[::1:8081", "unclosed"),
        ("ipv4:127.0.0.1:8081,127.0.0.1:99999", "port '99999'"),
        ("unix:", "names no path"),
        ("", "is empty"),
        ("127.0.0.1:8081,127.0.0.1:99999", "port '99999'"),
        ("127.0.0.1:8081,,127.0.0.1:8082", "empty or space-padded item at position 2"),
        ("127.0.0.1:8081,", "empty or space-padded item at position 2"),
        ("127.0.0.1:8081, 127.0.0.1:8082", "empty or space-padded item at position 2"),
        ("127.0.0.1:8081,127.0.0.1:8081", "names '127.0.0.1:8081' twice (positions 1 and 2)"),
        ("127.0.0.1:8081,unix:/run/popmq.sock", "lists the gRPC target 'unix:/run/popmq.sock'"),
    ],
)
def test_bad_endpoint_is_a_usage_error_naming_what_is_allowed(
    endpoint: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        cli_main.main(["topic", "list", "--endpoint", endpoint])

    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert f"endpoint {endpoint!r}" in err
    assert says in err
    assert "use HOST:PORT (IPv6 as [::1]:8081)" in err


def test_help_says_the_endpoint_takes_a_list_of_proxies() -> None:
    parser = cli_main.build_parser()
    assert "--endpoint HOST:PORT[,HOST:PORT...]" in " ".join(parser.format_help().split())
    topic_list = parser.parse_args(["topic", "list", "--endpoint", "h:1,h:2"])
    assert topic_list.endpoint == "h:1,h:2"


def test_bad_endpoint_from_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POPMQ_ENDPOINT", "localhost:123456")
    with pytest.raises(SystemExit) as raised:
        cli_main.main(["topic", "list"])

    assert raised.value.code == 2
    assert "port '123456'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "endpoint",
    [
        "127.0.0.1:8081",
        "localhost:1",
        "broker.example.com:65535",
        "[::1]:8081",
        "ipv4:10.0.0.1:8081,10.0.0.2:8082",
        "ipv6:[::1]:8081",
        "10.0.0.1:8081,10.0.0.2:8081",
        "[::1]:8081,localhost:8082,broker.example.com:8083",
        "dns:///broker.example.com:8081",
        "dns:///broker.example.com",
        UNREACHABLE,
    ],
)
def test_valid_endpoints_are_taken_unchanged(endpoint: str) -> None:
    args = cli_main.build_parser().parse_args(["topic", "list", "--endpoint", endpoint])
    assert args.endpoint == endpoint


def test_sdk_clients_refuse_an_endpoint_grpc_would_wrap_to_another_port() -> None:
    for make in (
        lambda: sdk.Producer("127.0.0.1:99999"),
        lambda: sdk.AsyncAdmin("127.0.0.1:99999"),
        lambda: sdk.SimpleConsumer("127.0.0.1:99999", group="g", topic="t"),
    ):
        with pytest.raises(
            sdk.InvalidArgumentError, match=r"port '99999', not a number in 1\.\.65535"
        ):
            make()


def test_malformed_property_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        cli_main.main(["send", "orders", "hi", "--property", "no-equals-sign"])

    assert raised.value.code == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_send_collects_repeated_keys_and_properties() -> None:
    args = cli_main.build_parser().parse_args(
        [
            "send",
            "orders",
            "hi",
            "--key",
            "a",
            "--key",
            "b",
            "--property",
            "x=1=2",
            "--property",
            "y=",
        ]
    )

    assert args.keys == ["a", "b"]
    assert dict(args.properties) == {"x": "1=2", "y": ""}


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (sdk.NotFoundError("x"), 3),
        (sdk.InvalidArgumentError("x"), 4),
        (sdk.FailedPreconditionError("x"), 4),
        (sdk.AlreadyExistsError("x"), 4),
        (sdk.UnavailableError("x"), 1),
        (sdk.ServerError("x"), 1),
        (sdk.DeadlineExceededError("x"), 1),
    ],
)
def test_errors_map_to_exit_codes(error: sdk.PopMQError, code: int) -> None:
    assert cli_main.exit_code_for(error) == code


def test_format_topic_and_group_name_their_settings() -> None:
    topic = sdk.Topic("orders", 4, "normal", "normal", EPOCH)
    group = sdk.Group("billing", 17, (1.0, 0.5), EPOCH, False)

    assert cli_main.format_topic(topic).startswith("topic orders queues=4 ")
    assert "retry_backoff=1s,0.5s" in cli_main.format_group(group)


def test_format_receipt_matches_the_documented_line() -> None:
    receipt = sdk.SendReceipt("m-1", "orders", 2, 9)

    assert cli_main.format_receipt(receipt) == "sent m-1 to orders queue 2 offset 9"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1.5", 1.5), ("500ms", 0.5), ("10s", 10.0), ("5m", 300.0), ("2h", 7200.0)],
)
def test_durations_take_units(text: str, seconds: float) -> None:
    args = cli_main.build_parser().parse_args(["group", "create", "g", "--backoff", text])
    assert args.backoff == [seconds]


def test_times_are_iso_or_epoch_seconds_and_naive_means_utc() -> None:
    parse = cli_main.build_parser().parse_args
    args = parse(["offsets", "reset", "g", "t", "--to", "2026-11-21T10:00:00"])
    assert args.to == datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert parse(["offsets", "reset", "g", "t", "--to", "0"]).to == EPOCH
    assert parse(["offsets", "reset", "g", "t", "--to", "latest"]).to == "latest"
    assert parse(["offsets", "reset", "g", "t", "--offset", "0=5", "--offset", "2=0"]).offset == [
        (0, 5),
        (2, 0),
    ]


def test_reset_needs_exactly_one_target(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        cli_main.main(["offsets", "reset", "g", "t"])
    assert raised.value.code == 2
    with pytest.raises(SystemExit):
        cli_main.main(["offsets", "reset", "g", "t", "--to", "latest", "--offset", "0=1"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_json_output_keeps_binary_bodies_as_base64(capsys: pytest.CaptureFixture[str]) -> None:
    from popmq.cli import render

    render.print_json([_message("rh", b"text"), _message("rh2", b"\xff\x00")])

    first, second = json.loads(capsys.readouterr().out)
    assert first["body"] == "text" and first["born_timestamp"] == "1970-01-01T00:00:00+00:00"
    assert "body" not in second and second["body_base64"] == "/wA="


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        cli_main.main(["--version"])

    assert raised.value.code == 0
    assert capsys.readouterr().out.startswith("popmq ")


def test_client_options_before_the_command_are_read_and_after_it_win() -> None:
    parse = cli_main.build_parser().parse_args
    hoist = cli_main.hoist_client_options

    args = parse(hoist(["--endpoint", "h:1", "--json", "--tls", "topic", "list"]))
    assert (args.endpoint, args.json, args.tls) == ("h:1", True, True)
    args = parse(
        hoist(["--endpoint=h:1", "--access-key", "ak", "topic", "list", "--endpoint", "h:2"])
    )
    assert (args.endpoint, args.access_key) == ("h:2", "ak")
    args = parse(hoist(["--endpoint", "h:1", "send", "t", "--", "--endpoint"]))
    assert (args.endpoint, args.text) == ("h:1", "--endpoint")


def test_a_client_option_before_serve_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        cli_main.main(["--endpoint", "h:1", "serve"])

    assert raised.value.code == 2
    assert "unrecognized arguments: --endpoint h:1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        (b"hello", "hello"),
        ("h\u00e9llo\tw\u00f6rld\n".encode(), "h\u00e9llo\tw\u00f6rld\n"),
        (b"", ""),
        (b"\xff\xfe" * 617, "<binary 1,234 bytes>"),
        (b"ok\x00nul", "<binary 6 bytes>"),
        (b"\x1b[31mred", "<binary 8 bytes>"),
    ],
)
def test_bodies_that_are_not_text_show_as_a_binary_marker(body: bytes, shown: str) -> None:
    assert cli_render.body_text(body) == shown


def test_print_config_keeps_whole_seconds_in_lists_integers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli_main.main(["serve", "--print-config", "--set", "groups.retry_backoff_s=1,5,2.5,60"])

    assert code == 0
    assert "retry_backoff_s = [1, 5, 2.5, 60]\n" in capsys.readouterr().out
