"""Issue 33 follow-up: librdkafka-style config values are parsed strictly, and errors name the key and
the value (never a secret's value).

librdkafka reads an integer with C's strtol and a float with strtod: ASCII whitespace, an optional
sign, ASCII digits. Python's int()/float() also take `1_0`, `٣` (Arabic-Indic 3) and Unicode spaces,
and `str.isdigit()` is true for `'²'`, which int() then refuses without naming the key.
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rebalancer._numbers import ASCII_WHITESPACE
from rebalancer.produce import config, parsing, security
from rebalancer.produce.config import CollectorConfig, is_secret_key, parse_bool, parse_int, parse_ms

SETTINGS = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
LOOKALIKES = "0123456789+-._eE" + ASCII_WHITESPACE + "٣１²\u2003\xa0"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        # isdigit() is true for '²' and for '--5' once lstrip("-") has eaten both dashes: int() then
        # raised "invalid literal for int() with base 10" naming no key.
        ("max.request.size", "²", "max.request.size must be an integer in 1..2147483647, got '²'"),
        ("max.request.size", "--5", "max.request.size must be an integer in 1..2147483647, got '--5'"),
        ("broker.batch.max.bytes", "-²", "broker.batch.max.bytes must be an integer in 1..2147483647 (or <= 0: off), got '-²'"),
        # int("٣") == 3 and int(" 5\u2003") == 5 were taken as is.
        ("max.request.size", "٣", "max.request.size must be an integer in 1..2147483647, got '٣'"),
        (
            "max.in.flight.requests.per.connection",
            "\u20035",
            "max.in.flight.requests.per.connection must be an integer in 1..1000000, got '\\u20035'",
        ),
        ("max.request.size", "1_000", "max.request.size must be an integer in 1..2147483647, got '1_000'"),
        # float() took "1_5" as 15.0 and "١٥" as 15.0.
        ("broker.linger.ms", "1_5", "broker.linger.ms must be a number of milliseconds in 0..900000, got '1_5'"),
        ("broker.linger.ms", "١٥", "broker.linger.ms must be a number of milliseconds in 0..900000, got '١٥'"),
        ("linger.ms", "1\u20035", "linger.ms must be a number of milliseconds in 0..900000, got '1\\u20035'"),
        # Refused before too; the messages stay.
        ("broker.linger.ms", "nan", "broker.linger.ms must be a number of milliseconds in 0..900000, got 'nan'"),
        ("broker.linger.ms", "inf", "broker.linger.ms must be a number of milliseconds in 0..900000, got 'inf'"),
        ("broker.linger.ms", "1e400", "broker.linger.ms must be a number of milliseconds in 0..900000, got '1e400'"),
        ("broker.linger.ms", float("nan"), "broker.linger.ms must be a number of milliseconds in 0..900000, got nan"),
        ("max.request.size", "0x10", "max.request.size must be an integer in 1..2147483647, got '0x10'"),
        ("max.request.size", float("inf"), "max.request.size must be an integer in 1..2147483647, got inf"),
    ],
)
def test_a_malformed_number_is_refused_naming_the_key_and_value(
    key: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        CollectorConfig.from_dict({key: value})


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("max.request.size", " 2048\n", 2048),  # strtol skips leading space; trailing ASCII space is dropped
        ("max.request.size", "+2048", 2048),  # strtol's optional sign
        ("broker.batch.max.bytes", "-1", -1),
        ("broker.batch.max.bytes", "\t-1 ", -1),
        ("broker.batch.max.bytes", "0", -1),  # C6: <= 0 is off, as the seed's "if > 0"
        ("broker.batch.max.bytes", -7, -1),
        ("message.max.bytes", "2048", 2048),
        ("max.request.size", 2048.0, 2048),
    ],
)
def test_a_well_formed_int_is_taken(key: str, value: object, expected: int) -> None:
    field = {
        "max.request.size": "max_request_size",
        "message.max.bytes": "max_request_size",
        "broker.batch.max.bytes": "batch_max_bytes",
    }[key]
    assert getattr(CollectorConfig.from_dict({key: value}), field) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [(" 2.5 ", 2.5), ("1e1", 10.0), ("+.5", 0.5), ("7", 7.0), (3, 3.0)]
)
def test_a_well_formed_ms_is_taken(value: object, expected: float) -> None:
    assert CollectorConfig.from_dict({"broker.linger.ms": value}).broker_linger_ms == expected


@SETTINGS
@given(st.one_of(st.text(LOOKALIKES, max_size=10), st.from_regex(r"\A\s?[+-]?[0-9]{1,12}\s?\Z")))
@example("²")
@example("--5")
@example("٣")
def test_int_keys_follow_the_decimal_grammar(text: str) -> None:
    """Model: after dropping ASCII whitespace, `^[+-]?[0-9]+$`; then 1..2**31-1 as is, and <= 0 is off
    (-1): the seed applies its thresholds "if > 0"."""
    body = text.strip(ASCII_WHITESPACE)
    if re.fullmatch(r"[+-]?[0-9]+", body) and int(body) < 2**31:
        assert parse_int("k.k", text, minimum=1, allow_off=True) == (int(body) if int(body) >= 1 else -1)
    else:
        with pytest.raises(ValueError, match=r"^k\.k must be "):
            parse_int("k.k", text, minimum=1, allow_off=True)


@SETTINGS
@given(st.text(LOOKALIKES + "infaINFA", max_size=10))
@example("1_5")
@example("١٥")
def test_ms_keys_follow_the_float_grammar(text: str) -> None:
    """Model: Python's float() on ASCII text with no underscore once ASCII whitespace is dropped."""
    body = text.strip(ASCII_WHITESPACE)
    try:
        ok = body.isascii() and "_" not in body and body == body.strip()
        number = float(body) if ok else math.nan
    except ValueError:
        number = math.nan
    if math.isfinite(number) and number >= 0:
        assert parse_ms("k.ms", text) == number
    else:
        with pytest.raises(ValueError, match=r"^k\.ms must be a "):
            parse_ms("k.ms", text)


SECRET = "hunter2-do-not-print"


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "sasl.oauthbearer.client.secret",
        "sasl.jaas.config",
        "sasl.oauthbearer.token.endpoint.url",
        "SASL.PASSWORD",
    ],
)
def test_a_secret_key_never_shows_its_value(key: str) -> None:
    assert is_secret_key(key)
    for call in (
        lambda: parse_int(key, SECRET, minimum=1),
        lambda: parse_int(key, "-5", minimum=1),
        lambda: parse_int(key, [SECRET], minimum=1),
        lambda: parse_ms(key, SECRET),
        lambda: parse_ms(key, "-5"),
        lambda: parse_bool(key, SECRET),
    ):
        with pytest.raises(ValueError) as info:
            call()
        text = str(info.value)
        assert text.startswith(f"{key} must be ") and "hidden" in text
        assert SECRET not in text and "-5" not in text


def test_the_secret_keys_of_security_are_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key security.py calls secret (SECRET_KEYS, which it takes from parsing.py, where every
    error reads it) is hidden even when its name has none of the marker words: librdkafka's
    sensitive ones (issue 42 item 14), and any added to the list."""
    assert is_secret_key("ssl.key.pem") and is_secret_key("sasl.oauthbearer.config")
    with pytest.raises(ValueError) as info:
        parse_bool("ssl.key.pem", "-----BEGIN PRIVATE KEY-----")
    assert "BEGIN" not in str(info.value)
    assert not is_secret_key("ssl.engine.id")
    assert security.SECRET_KEYS is parsing.SECRET_KEYS
    monkeypatch.setattr(parsing, "SECRET_KEYS", security.SECRET_KEYS | {"ssl.engine.id"})
    assert is_secret_key("ssl.engine.id")


@pytest.mark.parametrize("key", ["max.request.size", "broker.linger.ms", "client.id", "enable.idempotence"])
def test_other_keys_show_their_value(key: str) -> None:
    assert not is_secret_key(key)
    with pytest.raises(ValueError, match="'nope'"):
        (parse_bool if key == "enable.idempotence" else parse_ms)(key, "nope")


def test_config_module_keeps_its_names() -> None:
    assert {"parse_int", "parse_ms", "parse_bool", "is_secret_key"} <= set(config.__all__)
