"""RocketMQ 5's request signature: vectors from the official clients' code, header parsing.

Where the vectors come from (each computed by running the client's own signing function):
- rocketmq-python-client 5.1.2, `rocketmq.v5.util.signature.Signature.sign` (lower-case hex,
  `hexlify`), and `Signature.metadata` for the whole header with and without credentials;
- rocketmq-client-nodejs (tools/node_modules), `dist/util/index.js` `sign` (upper-case hex,
  `digest('hex').toUpperCase()`); the Java client's `TLSHelper.sign` is upper-case too.
tests/compat/test_official_signatures.py recomputes them with the installed clients.
"""

from __future__ import annotations

import calendar
import time

import pytest

from popmq import Credentials, InvalidArgumentError
from popmq.broker_core import UnauthenticatedError
from popmq.security import signing

# (secret key, x-mq-date-time, Python client's Signature, Node client's Signature)
VECTORS = [
    (
        "secret-key",
        "20261127T101500Z",
        "cf98bf05076e4f045575f2bc32a5a10bee7bb95d",
        "CF98BF05076E4F045575F2BC32A5A10BEE7BB95D",
    ),
    (  # the Python client without credentials signs with an empty key
        "",
        "20261127T101500Z",
        "54d783cc7f0dcde40b6bb837cc9ac74e6d76585f",
        "54D783CC7F0DCDE40B6BB837CC9AC74E6D76585F",
    ),
    (  # the key is UTF-8
        "s\u00e9cret-\u043a\u043b\u044e\u0447",
        "20240101T000000Z",
        "e10005c3648c891bfb3d0d9a08e2dc1b23712589",
        "E10005C3648C891BFB3D0D9A08E2DC1B23712589",
    ),
]

PYTHON_CLIENT_HEADERS = {
    # Signature.metadata(ClientConfiguration(..., Credentials("ak-1", "secret-key")), ...)
    "authorization": "MQv2-HMAC-SHA1 Credential=ak-1, SignedHeaders=x-mq-date-time, "
    "Signature=e4e30142003c68041652ddfbe0a93723ae7ca133",
    "x-mq-date-time": "20261127T102242Z",
}
PYTHON_CLIENT_EMPTY = {
    # Signature.metadata(ClientConfiguration(..., Credentials()), ...): always sent
    "authorization": "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, "
    "Signature=8864ff5edcd9fb2fe45751f81fd153da58bc0618",
    "x-mq-date-time": "20261127T102242Z",
}


def header(access_key: str, signature: str, *, signed: str = "x-mq-date-time") -> str:
    return f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders={signed}, Signature={signature}"


@pytest.mark.parametrize(("secret", "date_time", "python", "node"), VECTORS)
def test_signature_is_the_official_clients_in_either_hex_case(
    secret: str, date_time: str, python: str, node: str
) -> None:
    assert signing.sign(secret, date_time) == node  # upper-case, as Java and Node
    for sent in (python, node):
        request = signing.parse(header("ak", sent), date_time)
        assert signing.matches(request, secret)
        assert not signing.matches(request, secret + "x")


def test_python_clients_whole_header_verifies() -> None:
    request = signing.parse(
        PYTHON_CLIENT_HEADERS["authorization"], PYTHON_CLIENT_HEADERS["x-mq-date-time"]
    )
    assert request.access_key == "ak-1"
    assert signing.matches(request, "secret-key")


def test_python_clients_header_without_credentials_parses_with_no_access_key() -> None:
    request = signing.parse(
        PYTHON_CLIENT_EMPTY["authorization"], PYTHON_CLIENT_EMPTY["x-mq-date-time"]
    )
    assert request.access_key == ""
    assert signing.matches(request, "")  # signed with the empty key, as the client does


def test_sdk_credentials_sign_as_the_server_signs() -> None:
    moment = calendar.timegm((2026, 11, 27, 10, 15, 0, 0, 0, 0))
    sdk = dict(Credentials("ak-1", "secret-key").metadata(moment))
    assert sdk == signing.headers("ak-1", "secret-key", moment)
    assert sdk["x-mq-date-time"] == "20261127T101500Z"  # UTC, as Node sends it
    request = signing.parse(sdk["authorization"], sdk["x-mq-date-time"])
    assert signing.matches(request, "secret-key")


def test_sdk_credentials_hide_the_secret_and_refuse_unsendable_keys() -> None:
    credentials = Credentials("ak-1", "very-secret")
    assert "very-secret" not in repr(credentials)
    for access_key in ("", "a b", "a,b", "a/b", "ключ"):
        with pytest.raises(InvalidArgumentError):
            Credentials(access_key, "s")
    with pytest.raises(InvalidArgumentError):
        Credentials("ak", "")


def test_extra_spaces_trailing_commas_and_unknown_items_are_accepted() -> None:
    sig = VECTORS[0][3]
    text = (
        f"  MQv2-HMAC-SHA1   Credential = ak-1 ,SignedHeaders=X-MQ-Date-Time,,"
        f"  Extra=ignored,  Signature={sig} , "
    )
    request = signing.parse(text, VECTORS[0][1])
    assert request.access_key == "ak-1"
    assert signing.matches(request, VECTORS[0][0])


def test_credential_scope_after_a_slash_is_not_part_of_the_access_key() -> None:
    # RocketMQ splits Credential on "/" and takes element 0 (the v1 ACL scope form).
    request = signing.parse(header("ak-1/20261127/cn", VECTORS[0][3]), VECTORS[0][1])
    assert request.access_key == "ak-1"


def test_signed_headers_may_be_absent_as_rocketmq_allows() -> None:
    text = f"MQv2-HMAC-SHA1 Credential=ak, Signature={VECTORS[0][3]}"
    assert signing.parse(text, VECTORS[0][1]).access_key == "ak"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("HMAC Credential=ak, Signature=" + "a" * 40, "scheme"),
        ("MQv2-HMAC-SHA1", "Credential is missing"),
        ("MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time, Signature=" + "a" * 40, "Credential"),
        ("MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time", "Signature is missing"),
        ("MQv2-HMAC-SHA1 Credential=ak, Credential=bk, Signature=" + "a" * 40, "twice"),
        ("MQv2-HMAC-SHA1 Credential=ak, oops, Signature=" + "a" * 40, "not Key=Value"),
        (header("ak", "a" * 40, signed="host;x-mq-date-time"), "only x-mq-date-time"),
        (header("ak", "a" * 39), "39 characters"),
        (header("ak", "g" * 40), "not hexadecimal"),
        (header("ak", ""), "0 characters"),
    ],
)
def test_malformed_headers_are_refused_saying_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(UnauthenticatedError, match="malformed") as caught:
        signing.parse(text, "20261127T101500Z")
    assert says in str(caught.value)
    assert "expected 'MQv2-HMAC-SHA1 Credential=<access key>" in str(caught.value)


def test_a_signature_without_its_date_time_header_is_refused() -> None:
    with pytest.raises(UnauthenticatedError, match="x-mq-date-time header is missing"):
        signing.parse(header("ak", VECTORS[0][3]), "")


def test_date_time_round_trips_as_utc() -> None:
    moment = calendar.timegm((2026, 11, 27, 10, 15, 0, 0, 0, 0))
    assert signing.format_date_time(moment) == "20261127T101500Z"
    assert signing.parse_date_time("20261127T101500Z") == moment
    assert abs(signing.parse_date_time(signing.format_date_time(time.time())) - time.time()) < 2
    with pytest.raises(UnauthenticatedError, match="not yyyyMMdd'T'HHmmss'Z'"):
        signing.parse_date_time("2026-11-27T10:15:00Z")
