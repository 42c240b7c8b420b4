"""Issue 33 (items 7, 10, 17): settings parsed as Pulsar parses them, scenarios checked when built,
and malformed snapshot files named by file and field, in the library and on the command line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rebalancer.balance.checks import is_real
from rebalancer.shedding import BrokerLoad, ClusterLoad, ShedderConfig, java, model
from rebalancer.shedding.model import PROPERTY_NAMES
from rebalancer.shedding.reports import Snapshot, load_report, replay
from rebalancer.shedding.sim import (
    BrokerSpec,
    BundleSpec,
    Combination,
    Scenario,
    SimConfig,
    combination,
    scenario,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "shedding-reports"
SETTINGS = settings(
    max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

# --- item 7: a small model of Java's parsers, written after the JDK's own algorithms ------------------


def java_trim(s: str) -> str:
    """String.trim(): drops every char <= U+0020 at both ends."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def java_digit(c: str) -> int:
    """Character.digit(char, 10). A char above U+FFFF is two UTF-16 surrogates in Java: never a digit."""
    if ord(c) > 0xFFFF or unicodedata.category(c) != "Nd":
        return -1
    return unicodedata.digit(c)


def model_parse_int(s: str, bits: int) -> int | None:
    """Integer.parseInt / Long.parseLong (radix 10) after FieldParser's trim; None where Java throws."""
    s = java_trim(s)
    if not s:
        return None
    i, negative = 0, False
    if s[0] < "0":
        if s[0] == "-":
            negative = True
        elif s[0] != "+":
            return None
        if len(s) == 1:
            return None
        i = 1
    result = 0
    for c in s[i:]:
        d = java_digit(c)
        if d < 0:
            return None
        result = result * 10 + d
    value = -result if negative else result
    if not -(2 ** (bits - 1)) <= value <= 2 ** (bits - 1) - 1:
        return None
    return value


def model_parse_double(s: str) -> float | None:
    """Double.valueOf (FloatingDecimal.readJavaFormatString's structure); None where Java throws."""
    s = java_trim(s)
    n = len(s)
    if n == 0:
        return None
    i = 1 if s[0] in "+-" else 0
    if i >= n:
        return None
    if s[i] == "N":
        return math.nan if s[i:] == "NaN" else None
    if s[i] == "I":
        return (-math.inf if s[0] == "-" else math.inf) if s[i:] == "Infinity" else None
    if s[i] == "0" and i + 1 < n and s[i + 1] in "xX":
        return model_hex(s)
    ascii_digits = "0123456789"
    seen = False
    while i < n and s[i] in ascii_digits:
        i, seen = i + 1, True
    if i < n and s[i] == ".":
        i += 1
        while i < n and s[i] in ascii_digits:
            i, seen = i + 1, True
    if not seen:
        return None
    if i < n and s[i] in "eE":
        i += 1
        if i < n and s[i] in "+-":
            i += 1
        exp_at = i
        while i < n and s[i] in ascii_digits:
            i += 1
        if i == exp_at:
            return None
    if i < n and (i != n - 1 or s[i] not in "fFdD"):
        return None
    return float(s[:i])


def model_hex(s: str) -> float | None:
    """Java's hex pattern: [+-]0x(H+.?|H*.H+)p[+-]?D+[fFdD]? with ASCII hex digits; value by fromhex."""
    hexdigits, digits = "0123456789abcdefABCDEF", "0123456789"
    i = 1 if s[0] in "+-" else 0
    i += 2  # "0x"
    before = after = 0
    while i < len(s) and s[i] in hexdigits:
        i, before = i + 1, before + 1
    if i < len(s) and s[i] == ".":
        i += 1
        while i < len(s) and s[i] in hexdigits:
            i, after = i + 1, after + 1
    if before == 0 and after == 0:
        return None
    if i >= len(s) or s[i] not in "pP":
        return None
    i += 1
    if i < len(s) and s[i] in "+-":
        i += 1
    exp_at = i
    while i < len(s) and s[i] in digits:
        i += 1
    if i == exp_at:
        return None
    body = s[:i]
    if i < len(s) and (i != len(s) - 1 or s[i] not in "fFdD"):
        return None
    try:
        return float.fromhex(body)
    except OverflowError:
        return -math.inf if s[0] == "-" else math.inf


# Characters a property value can plausibly hold, and the ones Python reads differently from Java.
ALPHABET = [
    *"0123456789+-._ eEdDfFxXpPaAbBN I", "NaN", "Infinity", "inf", "nan", "0x", "\t", "\x00", "\x1f", "\xa0", "\u2003", "\u0663", "\uff17",
    "\U0001d7d6", "\u0966",
]  # fmt: skip
texts = st.lists(st.sampled_from(ALPHABET), max_size=12).map("".join)
huge = st.integers(min_value=-(2**70), max_value=2**70).map(str)


@SETTINGS
@given(st.one_of(texts, huge, huge.map(lambda s: f" {s}\t")))
@example("1_0")
@example("8.5")
@example("2147483647")
@example("2147483648")
@example("-2147483648")
@example("-2147483649")
@example("9223372036854775807")
@example("9223372036854775808")
@example("+")
@example("\u0663\u0663")  # Arabic-Indic 33: Character.digit reads it
@example("\U0001d7d6")  # MATHEMATICAL BOLD DIGIT 8: two surrogates in Java, no digit
@example("0" * 5000 + "7")
def test_int_and_long_properties_follow_javas_parse_int(text):
    for bits in (32, 64):
        expected = model_parse_int(text, bits)
        if expected is None:
            with pytest.raises(ValueError):
                java.parse_java_int(text, bits)
        else:
            assert java.parse_java_int(text, bits) == expected


@SETTINGS
@given(st.one_of(texts, st.floats(allow_nan=True).map(repr), st.floats().map(float.hex)))
@example("1_5")
@example("inf")
@example("Infinity")
@example("-NaN")
@example("NaNd")
@example("0x1p-1")
@example("0x1.8p1f")
@example("0x1.8")
@example("1e")
@example("5.d")
@example(".")
@example("\u0661.\u0665")  # Python's float() reads Arabic-Indic digits; Java's does not
@example(" 0.5 ")
@example("0.5\xa0")
@example("1e400")
@example("0x1p99999999999999999999")
def test_double_properties_follow_javas_double_value_of(text):
    expected = model_parse_double(text)
    if expected is None:
        with pytest.raises(ValueError):
            java.parse_java_double(text)
    elif math.isnan(expected):
        assert math.isnan(java.parse_java_double(text))
    else:
        assert java.parse_java_double(text) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), (" TRUE\t", True), ("False", False), ("false", False)],
)
def test_boolean_properties_read_true_and_false_in_any_case(text, value):
    assert java.parse_java_boolean(text) is value


@pytest.mark.parametrize("text", ["yes", "1", "t", "", "tru e", "\u0442rue"])
def test_boolean_properties_refuse_what_pulsar_would_silently_read_as_false(text):
    with pytest.raises(ValueError):
        java.parse_java_boolean(text)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"loadBalancerAvgShedderHitCountLowThreshold": 8.5}, "loadBalancerAvgShedderHitCountLowThreshold must be an integer, got 8.5"),
        ({"loadBalancerAvgShedderHitCountLowThreshold": 8.0}, "loadBalancerAvgShedderHitCountLowThreshold must be an integer, got 8.0"),
        ({"loadBalancerAvgShedderHitCountLowThreshold": True}, "loadBalancerAvgShedderHitCountLowThreshold must be an integer, got True"),
        ({"loadBalancerAvgShedderHitCountLowThreshold": "1_0"}, "loadBalancerAvgShedderHitCountLowThreshold must be an integer, got '1_0'"),
        ({"loadBalancerAvgShedderLowThreshold": "20.5"}, "loadBalancerAvgShedderLowThreshold must be an integer, got '20.5'"),
        ({"loadBalancerMsgRateDifferenceShedderThreshold": "1_5"}, "loadBalancerMsgRateDifferenceShedderThreshold must be a number, got '1_5'"),
        ({"loadBalancerMsgRateDifferenceShedderThreshold": "inf"}, "loadBalancerMsgRateDifferenceShedderThreshold must be a number, got 'inf'"),
        ({"loadBalancerMsgRateDifferenceShedderThreshold": "Infinity"}, "loadBalancerMsgRateDifferenceShedderThreshold must be finite, got 'Infinity'"),
        ({"loadBalancerMsgRateDifferenceShedderThreshold": "1e400"}, "loadBalancerMsgRateDifferenceShedderThreshold must be finite, got '1e400'"),
        ({"loadBalancerMsgRateDifferenceShedderThreshold": 10**400}, "loadBalancerMsgRateDifferenceShedderThreshold must be finite, got 1" + "0" * 400),
        ({"loadBalancerMsgRateDifferenceShedderThreshold": "\u0661\u0665"}, "loadBalancerMsgRateDifferenceShedderThreshold must be a number, got '١٥'"),
        ({"minUnloadMessage": "3000000000"}, "minUnloadMessage must be an integer within Java's int range -2147483648..2147483647, got '3000000000'"),
        ({"loadBalanceSheddingDelayInSeconds": "9223372036854775808"}, "loadBalanceSheddingDelayInSeconds must be an integer within Java's long range -9223372036854775808..9223372036854775807, got '9223372036854775808'"),
        ({"loadBalancerSheddingIntervalMinutes": "\xa0"}, "loadBalancerSheddingIntervalMinutes must be an integer, got '\\xa0'"),
        ({"loadBalancerLoadSheddingStrategy": 5}, "loadBalancerLoadSheddingStrategy must be a class name, got 5"),
        ({"loadBalancerTransferEnabled": 1}, "loadBalancerTransferEnabled must be true or false, got 1"),
    ],
)  # fmt: skip
def test_from_properties_parses_as_pulsar_does_and_names_the_key(props, message):
    with pytest.raises(ValueError) as err:
        ShedderConfig.from_properties(props)
    assert str(err.value) == message


def test_from_properties_accepts_what_java_accepts():
    conf = ShedderConfig.from_properties(
        {
            "loadBalancerAvgShedderHitCountLowThreshold": "+\u0663",  # Arabic-Indic 3: Java's parseInt reads it
            "loadBalancerAvgShedderLowThreshold": "\x0020\x00",  # String.trim drops every char <= U+0020
            "loadBalancerMsgRateDifferenceShedderThreshold": "0x1.8p5d",  # hex float with a suffix: 48.0
            "maxUnloadPercentage": " .5F ",
            "loadBalanceSheddingDelayInSeconds": "3000000000",  # a Java long
            "loadBalancerSheddingIntervalMinutes": "\u2003",  # blank (Character.isWhitespace): not set
            "loadBalancerTransferEnabled": " FALSE ",
            "minUnloadMessage": 2500,
        }
    )
    assert conf.avg_shedder_hit_count_low_threshold == 3
    assert conf.avg_shedder_low_threshold == 20.0 and isinstance(conf.avg_shedder_low_threshold, float)
    assert conf.msg_rate_difference_shedder_threshold == 48.0
    assert conf.max_unload_percentage == 0.5
    assert conf.shedding_delay_in_seconds == 3e9
    assert conf.shedding_interval_minutes == 1
    assert conf.transfer_enabled is False
    assert conf.min_unload_message == 2500


def test_every_property_has_its_java_type():
    types = model.PROPERTY_TYPES
    assert set(types) == set(PROPERTY_NAMES) | {"loadBalancerMemoryResourceWeight"}
    assert set(types.values()) <= {"int", "long", "double", "boolean", "String"}
    # a few that differ from our field types: Pulsar keeps these thresholds as Java ints
    assert types["loadBalancerAvgShedderLowThreshold"] == "int"
    assert types["loadBalancerSheddingGracePeriodMinutes"] == "long"


def test_is_real_refuses_an_int_too_large_for_a_float():
    assert not is_real(10**400)
    assert is_real(10**300)


# --- item 10: scenarios and the simulator's other settings are checked when built -------------------


def _scenario(**kwargs: object) -> Scenario:
    fields: dict[str, object] = {
        "name": "s",
        "title": "t",
        "brokers": (BrokerSpec("b1"), BrokerSpec("b2")),
        "bundles": (BundleSpec("x", 100.0),),
    }
    fields.update(kwargs)
    return Scenario(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"noise": math.nan}, "scenario 's': noise must be a finite number >= 0, got nan"),
        ({"noise": math.inf}, "scenario 's': noise must be a finite number >= 0, got inf"),
        ({"noise": -0.01}, "scenario 's': noise must be a finite number >= 0, got -0.01"),
        ({"noise": "0.02"}, "scenario 's': noise must be a finite number >= 0, got '0.02'"),
        ({"noise": True}, "scenario 's': noise must be a finite number >= 0, got True"),
        ({"noise": None}, "scenario 's': noise must be a finite number >= 0, got None"),
        ({"noise": 10**400}, "scenario 's': noise must be a finite number >= 0, got 1" + "0" * 400),
        ({"converge_target": math.nan}, "scenario 's': converge_target must be a finite number > 0, got nan"),
        ({"converge_target": 0}, "scenario 's': converge_target must be a finite number > 0, got 0"),
        ({"minutes": 1}, "scenario 's': minutes must be >= 2, got 1"),
        ({"minutes": 90.0}, "scenario 's': minutes must be an int, got 90.0"),
        ({"converge_from": -1}, "scenario 's': converge_from must be a minute >= 0, got -1"),
        ({"converge_from": True}, "scenario 's': converge_from must be an int, got True"),
        ({"brokers": ("b1",)}, "scenario 's': brokers[0] must be a BrokerSpec, got 'b1'"),
        ({"bundles": (None,)}, "scenario 's': bundles[0] must be a BundleSpec, got None"),
        ({"brokers": (BrokerSpec("b1"), BrokerSpec("b1"))}, "scenario 's': duplicate broker names"),
        ({"initial": {"x": "nope"}}, "scenario 's': initial placement names unknown broker 'nope'"),
        ({"initial": ["x"]}, "scenario 's': initial must map bundle names to broker names, got ['x']"),
        ({"name": None}, "scenario None: name must be a str, got None"),
    ],
)  # fmt: skip
def test_a_bad_scenario_is_refused_when_built(kwargs, message):
    with pytest.raises(ValueError) as err:
        _scenario(**kwargs)
    assert str(err.value) == message


def test_a_valid_scenario_still_runs_and_noise_zero_means_none():
    from rebalancer.shedding.sim import Simulator

    quiet = _scenario(noise=0, minutes=3)
    result = Simulator(quiet, combination("AvgShedder")).run()
    assert len(result.spread) == 3
    assert isinstance(_scenario(brokers=[BrokerSpec("b1")]).brokers, tuple)  # a list is kept as a tuple
    assert scenario("jitter").noise == 0.02


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"interval": 1.5}, "interval must be an int, got 1.5"),
        ({"report_delay": math.nan}, "report_delay must be an int, got nan"),
        ({"oscillation_window": True}, "oscillation_window must be an int, got True"),
        ({"over_unload_margin": math.nan}, "over_unload_margin must be a finite number >= 0, got nan"),
        ({"grace_period_minutes": math.inf}, "grace_period_minutes must be None or a finite number >= 0, got inf"),
        ({"grace_period_minutes": -1}, "grace_period_minutes must be None or a finite number >= 0, got -1"),
    ],
)  # fmt: skip
def test_a_bad_sim_config_is_refused_when_built(kwargs, message):
    with pytest.raises(ValueError) as err:
        SimConfig(**kwargs)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_a_bad_combination_is_refused_when_built():
    with pytest.raises(ValueError) as err:
        Combination("x", combination("AvgShedder").make, conf=None)  # type: ignore[arg-type]
    assert str(err.value) == "combination 'x': conf must be a ShedderConfig, got None"
    with pytest.raises(ValueError) as err:
        Combination("x", None)  # type: ignore[arg-type]
    assert str(err.value) == "combination 'x': make must be callable, got None"


def test_bad_broker_and_bundle_spec_names_are_refused():
    with pytest.raises(ValueError) as err:
        BrokerSpec(None)  # type: ignore[arg-type]
    assert str(err.value) == "broker None: name must be a str, got None"
    with pytest.raises(ValueError) as err:
        BundleSpec(3, 1.0)  # type: ignore[arg-type]
    assert str(err.value) == "bundle 3: name must be a str, got 3"
    with pytest.raises(ValueError) as err:
        BundleSpec("x", 10**400)
    assert str(err.value) == "bundle 'x': rate must be a finite number, got 1" + "0" * 400


# --- item 17: malformed snapshot files name the file and the field ---------------------------------


def _base() -> dict:
    return json.loads((EXAMPLES / "snapshot-0000.json").read_text())


def _broker1(d: dict) -> dict:
    return d["brokers"]["broker-1"]


def _write(path: Path, mutate=None, raw: bytes | None = None) -> Path:
    if raw is not None:
        path.write_bytes(raw)
    else:
        data = _base()
        mutate(data)
        path.write_text(json.dumps(data))
    return path


BAD_SNAPSHOTS = [
    ("nonutf8", None, b'{"brokers": {}}\xff', "not UTF-8 text (byte 0xff at offset 15)"),
    ("empty-brokers", lambda d: d.update(brokers={}), None, '"brokers" is empty; a snapshot needs at least one broker'),
    ("brokers-list", lambda d: d.update(brokers=[]), None, '"brokers" must map broker names to LocalBrokerData, got list'),
    ("no-brokers", lambda d: d.pop("brokers"), None, "expected an object with 'brokers' (and 'bundles')"),
    ("top-list", None, b"[1, 2]", "expected an object with 'brokers' (and 'bundles'), got '[1, 2]'"),
    ("missing-cpu", lambda d: _broker1(d).pop("cpu"), None, "brokers['broker-1'].cpu is missing"),
    ("missing-rate", lambda d: _broker1(d).pop("msgRateOut"), None, "brokers['broker-1'].msgRateOut is missing"),
    ("missing-usage", lambda d: _broker1(d)["cpu"].pop("usage"), None, "brokers['broker-1'].cpu.usage is missing"),
    ("huge-int", lambda d: _broker1(d).update(msgRateIn=10**400), None, "brokers['broker-1'].msgRateIn must be a finite number, got 1" + "0" * 400),
    ("long-bad", lambda d: d["bundles"]["broker-1-b0"].update(longTermData=5), None, "bundles['broker-1-b0'].longTermData must be an object of rates, got 5"),
    ("short-missing-rate", lambda d: d["bundles"]["broker-1-b0"]["shortTermData"].pop("msgRateIn"), None, "bundles['broker-1-b0'].shortTermData.msgRateIn is missing"),
    ("deep", None, b"[" * 100_000 + b"]" * 100_000, "not JSON: nested too deeply"),
    ("bignum", None, b'{"timestamp": 1' + b"0" * 5000 + b"}", "not JSON: "),
    ("dup-broker", None, b'{"timestamp": 1, "brokers": {"b": {}, "b": {}}}', "brokers: the key 'b' appears twice"),
    ("neg-rate", lambda d: _broker1(d).update(msgRateIn=-1), None, "brokers['broker-1'].msgRateIn must be >= 0, got -1.0"),
    ("nan-rate", lambda d: _broker1(d).update(msgRateIn=math.nan), None, "brokers['broker-1'].msgRateIn must be a finite number, got nan"),
    ("str-rate", lambda d: _broker1(d).update(msgRateIn="12"), None, "brokers['broker-1'].msgRateIn must be a finite number, got '12'"),
    ("broker-not-dict", lambda d: d["brokers"].update({"broker-1": 5}), None, "brokers['broker-1'] must be a LocalBrokerData object, got int"),
    # Issue 42: the percentage overflowed, and the refusal named an inf the file does not hold.
    ("tiny-limit", lambda d: _broker1(d).update(cpu={"usage": 50, "limit": 5e-324}), None, "brokers['broker-1'].cpu: usage 50.0 of limit 5e-324 is beyond any percentage"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "mutate", "raw", "field"), BAD_SNAPSHOTS, ids=[c[0] for c in BAD_SNAPSHOTS])
def test_a_malformed_snapshot_names_the_file_and_the_field(tmp_path, name, mutate, raw, field):
    path = _write(tmp_path / f"{name}.json", mutate, raw)
    with pytest.raises(ValueError) as err:
        load_report(path)
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    assert field in message, message
    assert "\n" not in message


def test_a_directory_named_like_a_snapshot_is_named(tmp_path):
    (tmp_path / "d.json").mkdir()
    with pytest.raises(ValueError) as err:
        load_report(tmp_path / "d.json")
    assert str(err.value).startswith(f"{tmp_path / 'd.json'}: cannot read: ")


def test_replay_refuses_a_snapshot_without_brokers():
    good = load_report(EXAMPLES / "snapshot-0000.json")
    empty = Snapshot(good.timestamp + 60, {}, {}, {})
    with pytest.raises(ValueError) as err:
        replay([good, empty], combination("AvgShedder"))
    assert (
        str(err.value)
        == "snapshot 1 (timestamp 1700000060.0): brokers is empty; a snapshot needs at least one broker"
    )


def _cli_replay(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", "shedding", "replay", "--reports", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("mutate", "raw", "field"),
    [
        (None, b"\xff\xfe{}", "not UTF-8 text (byte 0xff at offset 0)"),
        (lambda d: d.update(brokers={}), None, '"brokers" is empty; a snapshot needs at least one broker'),
        (
            lambda d: _broker1(d).update(msgRateIn=10**400),
            None,
            "brokers['broker-1'].msgRateIn must be a finite number",
        ),
        (None, b"[" * 100_000 + b"]" * 100_000, "not JSON: nested too deeply"),
    ],
    ids=["nonutf8", "empty-brokers", "huge-int", "deep"],
)
def test_cli_replay_of_a_malformed_snapshot_exits_2_with_one_line(tmp_path, mutate, raw, field):
    (tmp_path / "snapshot-0000.json").write_bytes((EXAMPLES / "snapshot-0000.json").read_bytes())
    bad = _write(tmp_path / "snapshot-0001.json", mutate, raw)
    done = _cli_replay(tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"rebalancer: error: {bad}: "), lines[0]
    assert field in lines[0], lines[0]


def test_broker_conf_is_read_as_latin_1_like_pulsars_properties_load(tmp_path):
    conf_file = tmp_path / "broker.conf"
    # a Latin-1 comment (byte 0xe9 is not UTF-8) and a \u escape, as Java's Properties.load reads them
    conf_file.write_bytes(b"# caf\xe9\nloadBalancerAvgShedderLowThreshold = 2\\u0663\n")
    assert ShedderConfig.from_broker_conf(conf_file).avg_shedder_low_threshold == 23.0
    conf_file.write_bytes(b"loadBalancerAvgShedderLowThreshold = 2\xe9\n")
    with pytest.raises(ValueError) as err:
        ShedderConfig.from_broker_conf(conf_file)
    assert str(err.value) == "loadBalancerAvgShedderLowThreshold must be an integer, got '2é'"


# --- the same pattern in the load model: the container is checked, not only the numbers in it -----


def _report(**kwargs: object) -> BrokerLoad:
    return BrokerLoad(10, 0, 0, 0, 0, 1, 1, 1, 1, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ClusterLoad(None), "brokers must map broker names to BrokerLoad, got None"),  # type: ignore[arg-type]
        (lambda: ClusterLoad({"a": _report()}, None), "bundles must map bundle names to BundleLoad, got None"),  # type: ignore[arg-type]
        (lambda: ClusterLoad({"a": _report()}, recently_unloaded=[1]), "recently_unloaded must map bundle names to times, got [1]"),  # type: ignore[arg-type]
        (lambda: ClusterLoad({1: _report()}), "broker names must be str, got 1"),  # type: ignore[dict-item]
        (lambda: _report(bundles=None), "BrokerLoad.bundles must be a sequence of bundle names, got None"),
        (lambda: _report(bundles="xy"), "BrokerLoad.bundles must be a sequence of bundle names, got 'xy'"),
        (lambda: ClusterLoad({"a": _report(bundles=[["x"]])}), "broker 'a': bundles[0] must be a bundle name (str), got ['x']"),
        (lambda: ClusterLoad({"a": _report(bundles=[1])}), "broker 'a': bundles[0] must be a bundle name (str), got 1"),
    ],
)  # fmt: skip
def test_bad_load_containers_are_named(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == message
