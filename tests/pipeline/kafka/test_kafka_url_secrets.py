"""Issue 33 follow-up and issue 42 (items 12-15): a secret in an input URL never reaches an error,
a repr or a summary.

`kafka://h:9092/t?kafka.sasl.password=S3CRET` carries a consumer password as a reader option; the
errors quoting the URL, `repr(KafkaInput)` and the input name the summaries print show `***` in its
place, chosen by the key's name (the rule `produce` hides its own secret keys by), never by looking
for the value. No Spark: every case fails while the URL is read.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from rebalancer.pipeline.ingest.files import InputSpec, input_name
from rebalancer.pipeline.kafka.telemetry import parse_kafka_url

SECRET = "S3CRET"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # no topic: the "expected kafka://HOST:PORT/TOPIC" error quotes the URL
        (f"kafka://h:9092?kafka.sasl.password={SECRET}&events=5", "kafka://h:9092?kafka.sasl.password=***&events=5"),
        # an embedded-only key on a real cluster: that error quotes the URL too
        (f"kafka://h:9092/t?kafka.sasl.password={SECRET}&events=5", "kafka://h:9092/t?kafka.sasl.password=***&events=5"),
        # the key percent-encoded is the same key to parse_qsl, so it is masked all the same
        (f"kafka://h:9092/t?kafka.sasl.%70assword={SECRET}&events=5", "kafka://h:9092/t?kafka.sasl.%70assword=***&events=5"),
        (f"kafka://h:9092/t?kafka.ssl.key.password={SECRET}&kafka.sasl.jaas.config=x{SECRET}&events=5",
         "kafka://h:9092/t?kafka.ssl.key.password=***&kafka.sasl.jaas.config=***&events=5"),
    ],
)
def test_an_error_quoting_a_kafka_url_masks_its_secret_options(url, shown):
    with pytest.raises(ValueError) as info:
        parse_kafka_url(url)
    text = str(info.value)
    assert SECRET not in text and repr(shown) in text, text


def test_credentials_in_the_host_part_are_refused_without_being_shown():
    """librdkafka has no user info in bootstrap.servers: it would fail later, with the password in
    KafkaInput.url and in every summary. Refused here, naming the options to use instead."""
    with pytest.raises(ValueError) as info:
        parse_kafka_url(f"kafka://alice:{SECRET}@h:9092/t")
    text = str(info.value)
    assert SECRET not in text and "kafka.sasl.username" in text and "kafka.sasl.password" in text, text
    assert text.startswith("input: "), text


def test_the_repr_of_a_kafka_input_masks_secret_options_and_keeps_the_others():
    spec = parse_kafka_url(f"kafka://h:9092/t?kafka.sasl.password={SECRET}&maxOffsetsPerTrigger=9")
    assert spec.options["kafka.sasl.password"] == SECRET  # still handed to the consumers
    assert SECRET not in repr(spec) and SECRET not in str(spec)
    assert "'kafka.sasl.password': '***'" in repr(spec) and "'maxOffsetsPerTrigger': '9'" in repr(spec)
    assert input_name(spec) == "kafka://h:9092/t"


def test_the_input_name_of_a_uri_with_a_password_masks_it():
    """What summary.json's "input", the report and the run's errors show (Hadoop's FTP filesystem
    takes ftp://USER:PASSWORD@HOST/PATH)."""
    spec = InputSpec(path=Path("/data"), format="csv", files=(Path("/data/a.csv"),), uri=f"ftp://bob:{SECRET}@h/data")
    assert input_name(spec) == "ftp://***@h/data"
    plain = InputSpec(path=Path("/data"), format="csv", files=(Path("/data/a.csv"),), uri="hdfs://nn/data/x@y")
    assert input_name(plain) == "hdfs://nn/data/x@y"  # an '@' in a path is no user info


def test_the_cli_error_for_a_bad_kafka_url_hides_the_password(tmp_path):
    url = f"kafka://h:9092/t?kafka.sasl.password={SECRET}&events=5"
    done = subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", "pipeline", "run", "--input", url, "--output", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "rebalancer: error: input: events is for kafka://embedded/... only, got it in "
        "'kafka://h:9092/t?kafka.sasl.password=***&events=5'"
    ], done.stderr


def test_an_option_the_kafka_client_refuses_is_named_not_taken_for_brokers_not_reached(tmp_path):
    """The third attack: librdkafka's names are case-sensitive, and `kafka.SASL.PASSWORD` was
    reported as `cannot reach Kafka at … within 2 s`, pointing at the network."""
    url = f"kafka://127.0.0.1:9/t?kafka.SASL.PASSWORD={SECRET}"
    done = subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", "pipeline", "run", "--input", url, "--output", str(tmp_path / "o"),
         "--kafka-timeout", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (done.returncode, done.stderr.splitlines()) == (2, [
        "rebalancer: error: cannot read input kafka://127.0.0.1:9/t: a kafka.* option is refused by the Kafka "
        'client: No such configuration property: "SASL.PASSWORD"'
    ]), done.stderr  # fmt: skip
    assert not (tmp_path / "o").exists()


class _JavaError:
    """What `HadoopFS.errors` reads of a Py4J error's Java exception."""

    def __init__(self, message: str) -> None:
        self.message = message

    def getClass(self) -> _JavaError:
        return self

    def getSimpleName(self) -> str:
        return "IOException"

    def getMessage(self) -> str:
        return self.message


def test_a_hadoop_error_on_a_uri_with_a_password_masks_it_in_the_prefix_and_the_message():
    from py4j.protocol import Py4JJavaError

    from rebalancer.pipeline.paths import HadoopFS

    uri = f"ftp://bob:{SECRET}@h/data"
    error = Py4JJavaError.__new__(Py4JJavaError)
    error.java_exception = _JavaError(f"Login failed on {uri}\nat ...")
    fs = HadoopFS.__new__(HadoopFS)  # errors() needs no JVM
    with pytest.raises(ValueError) as info, fs.errors(uri):
        raise error
    assert str(info.value) == "ftp://***@h/data: IOException: Login failed on ftp://***@h/data"


# Issue 42 item 12: a user or password holding any character unencoded (see tests/test_secrets.py).
SPECIAL = "?#/@&=:;%+ ,[]!$'()*~"
USERS = ["bob", "b@b", "b?b", "b#b", "b/b", "b&b", "b=b", "b%40b", "b;b", "b b", "b/b?b", "b/b?x=1", "b?x=1&y=2"]
PASSWORDS = [f"pa{c}Adv3Pw{c}{c}x{c}" for c in SPECIAL] + [f"{c}Adv3Pw" for c in SPECIAL]


@pytest.mark.parametrize("tail", ["", "?maxOffsetsPerTrigger=5", "?kafka.sasl.password=Adv3Pw&events=5"])
def test_every_error_for_a_url_with_user_info_hides_the_password(tail):
    """Each URL is refused (bootstrap.servers takes no user info), and the error quotes it with the
    user info masked, whichever check refuses it: never a piece of the password (or of the user:
    `b/b?x=1` read as a query named an unknown option `x`) as a topic, a key or an option's value."""
    shown_tail = tail.replace("=Adv3Pw&", "=***&")
    for user, password in itertools.product(USERS, PASSWORDS):
        with pytest.raises(ValueError) as info:
            parse_kafka_url(f"kafka://{user}:{password}@127.0.0.1:9/t{tail}")
        text = str(info.value)
        assert "Adv3Pw" not in text and f"'kafka://***@127.0.0.1:9/t{shown_tail}'" in text, text


def test_the_issue_url_with_a_question_mark_in_the_password_is_refused_as_user_info():
    with pytest.raises(ValueError) as info:
        parse_kafka_url("kafka://bob:pa?Adv3Secret@127.0.0.1:9/t")
    assert str(info.value) == (
        "input: a kafka:// URL takes no user or password (give the options kafka.sasl.username and "
        "kafka.sasl.password; an '@' in an option's value: write it as %40), got 'kafka://***@127.0.0.1:9/t'"
    )


USER_INFO_REFUSED = (
    "input: a kafka:// URL takes no user or password (give the options kafka.sasl.username and "
    "kafka.sasl.password; an '@' in an option's value: write it as %40), got 'kafka://***@127.0.0.1:9/t'"
)


@pytest.mark.parametrize(
    "url",
    [
        f"kafka://b/b?maxOffsetsPerTrigger=1:{SECRET}@127.0.0.1:9/t",  # was: "...got '1:S3CRET@127.0.0.1:9/t'"
        f"kafka://Us3r/b?x=1:{SECRET}@127.0.0.1:9/t",  # was: "unknown option 'x'", a piece of the user
        f"kafka://Us3r?x=1:{SECRET}@127.0.0.1:9/t",
        f"kafka://Us3r/{SECRET}?x=1@127.0.0.1:9/t",  # a user alone: no ':' tells it from a path, but a
        f"kafka://Us3r/{SECRET}@127.0.0.1:9/t",  # topic holds no '@' (nor '/')
    ],
)
def test_a_user_holding_a_slash_and_a_query_is_refused_as_user_info_before_any_option(url):
    """The attack's sequel to item 12: a user name with an unencoded '/' and '?' read as a path and a
    query put pieces of the user info into an option's error. A host followed by a path after the
    '@' makes it user info whatever precedes it."""
    with pytest.raises(ValueError) as info:
        parse_kafka_url(url)
    assert str(info.value) == USER_INFO_REFUSED
    assert SECRET not in str(info.value) and "Us3r" not in str(info.value)


def test_an_encoded_at_in_an_option_value_followed_by_a_slash_is_no_user_info():
    spec = parse_kafka_url("kafka://h:9092/t?kafka.sasl.username=bob%40corp.com/x")
    assert spec.options == {"kafka.sasl.username": "bob@corp.com/x"}


# Finding F7b: a user name alone (librdkafka flags sasl.username sensitive) was shown.
def test_a_user_name_alone_is_masked_in_errors_and_reprs():
    from rebalancer.pipeline.resolved import RunRequest

    with pytest.raises(ValueError) as info:
        parse_kafka_url(f"kafka://{SECRET}@127.0.0.1:9/t")
    assert str(info.value) == USER_INFO_REFUSED
    shown = repr(RunRequest(input=f"ftp://{SECRET}@h/i", output=f"hdfs://{SECRET}@nn/o"))
    assert SECRET not in shown and shown.startswith("RunRequest(input='ftp://***@h/i', output='hdfs://***@nn/o', ")


def test_the_cli_masks_a_user_name_alone_and_a_user_holding_a_slash_and_a_query(tmp_path):
    for url in (f"kafka://{SECRET}@127.0.0.1:9/t", f"kafka://b/b?maxOffsetsPerTrigger=1:{SECRET}@127.0.0.1:9/t"):
        done = subprocess.run(
            [sys.executable, "-m", "rebalancer.cli", "pipeline", "run", "--input", url, "--output", str(tmp_path / "o")],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )
        assert done.returncode == 2, done.stderr
        assert SECRET not in done.stdout + done.stderr, done.stdout + done.stderr
        assert done.stdout == "" and done.stderr.splitlines() == [f"rebalancer: error: {USER_INFO_REFUSED}"]


def test_an_email_user_name_in_the_query_is_no_user_info():
    spec = parse_kafka_url("kafka://h:9092/t?kafka.sasl.username=bob@corp.com&kafka.sasl.password=x")
    assert (spec.bootstrap_servers, spec.topic) == ("h:9092", "t")
    assert spec.options == {"kafka.sasl.username": "bob@corp.com", "kafka.sasl.password": "x"}


# A topic Kafka would refuse, with a secret pasted into it or not: tests/pipeline/test_kafka_topic_names.py.


# Issue 42 item 14: librdkafka's sensitive keys, not a hand list.
def test_librdkafkas_sensitive_options_are_masked_in_repr_str_and_describe():
    url = (f"kafka://h:9092/t?kafka.ssl.key.pem={SECRET}1&kafka.sasl.oauthbearer.config={SECRET}2"
           f"&kafka.ssl.ca.pem={SECRET}3&kafka.sasl.username={SECRET}4&kafka.client.id=etl")
    spec = parse_kafka_url(url)
    assert spec.options["kafka.ssl.key.pem"] == f"{SECRET}1"  # still handed to the consumers
    options = ("options={'kafka.ssl.key.pem': '***', 'kafka.sasl.oauthbearer.config': '***', "
               "'kafka.ssl.ca.pem': '***', 'kafka.sasl.username': '***', 'kafka.client.id': 'etl'}")
    for shown in (repr(spec), str(spec)):
        assert SECRET not in shown and options in shown, shown
    assert spec.describe() == "kafka://h:9092/t"
    with pytest.raises(ValueError) as info:  # and in an error quoting the URL
        parse_kafka_url(url + "&events=5")
    assert str(info.value) == (
        "input: events is for kafka://embedded/... only, got it in 'kafka://h:9092/t?kafka.ssl.key.pem=***"
        "&kafka.sasl.oauthbearer.config=***&kafka.ssl.ca.pem=***&kafka.sasl.username=***&kafka.client.id=etl"
        "&events=5'"
    )


# Issue 42 item 13: `file://u:Secret@/data/x` showed the password as the URI's host.
@pytest.mark.parametrize("uri", [f"file://u:{SECRET}@/data/x", f"file://u:pa/{SECRET}@/data/x"])
def test_a_file_uri_with_a_password_is_refused_without_it(uri):
    from rebalancer.pipeline.paths import local_path

    with pytest.raises(ValueError) as info:
        local_path(uri)
    assert str(info.value) == "a file: URI names a local path, got the host '***@' in file://***@/data/x"


def test_the_cli_refuses_a_file_uri_with_a_password_in_one_line_without_it(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.csv").write_text("ts,type,entity,value\n2024-01-01T00:00:00Z,cpu,h1,1.0\n")
    for flag, other in (("--output", data), ("--input", tmp_path / "out")):
        done = subprocess.run(
            [sys.executable, "-m", "rebalancer.cli", "pipeline", "run", flag, f"file://u:{SECRET}@/data/x",
             "--input" if flag == "--output" else "--output", str(other)],
            capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"rebalancer: error: {flag.removeprefix('--')}: a file: URI names a local path, got the host '***@' in "
            "file://***@/data/x"
        ], done.stderr


# Issue 42 item 15: RunRequest's repr showed the input's secret options and an output's password.
def test_the_repr_of_a_run_request_masks_every_location():
    from rebalancer.pipeline.resolved import RunRequest

    request = RunRequest(
        input=f"kafka://h:9092/t?kafka.sasl.password={SECRET}1&kafka.ssl.key.pem={SECRET}2&group=g",
        output=f"ftp://u:{SECRET}3@h/o",
    )
    shown = repr(request)
    assert SECRET not in shown and SECRET not in str(request), shown
    assert shown.startswith(
        "RunRequest(input='kafka://h:9092/t?kafka.sasl.password=***&kafka.ssl.key.pem=***&group=g', "
        "output='ftp://***@h/o', partitions=None, "
    ), shown
    stream = RunRequest(input=f"hdfs://u:{SECRET}4@nn/in", output="o", stream=True,
                        checkpoint=f"ftp://u:{SECRET}5@h/c", report_dir=f"ftp://u:{SECRET}6@h/r")
    shown = repr(stream)
    assert SECRET not in shown, shown
    for part in ("input='hdfs://***@nn/in'", "checkpoint='ftp://***@h/c'", "report_dir='ftp://***@h/r'"):
        assert part in shown, shown


def test_the_repr_of_a_run_request_masks_an_inspected_input():
    from rebalancer.pipeline.resolved import RunRequest

    spec = InputSpec(path=Path("/data"), format="csv", files=(Path("/data/a.csv"),), uri=f"ftp://bob:{SECRET}@h/data")
    assert repr(spec) == (
        "InputSpec(path=PosixPath('/data'), format='csv', files=(PosixPath('/data/a.csv'),), "
        "columns={'ts': 'ts', 'type': 'type', 'entity': 'entity', 'value': 'value'}, headers={}, "
        "uri='ftp://***@h/data')"
    )
    kafka = parse_kafka_url(f"kafka://h:9092/t?kafka.sasl.password={SECRET}")
    for given in (spec, kafka):
        shown = repr(RunRequest(input=given, output="o"))
        assert SECRET not in shown and shown.startswith(f"RunRequest(input={given!r}, output='o', "), shown


@pytest.mark.parametrize("fields", [{"checkpoint": f"ftp://u:{SECRET}@h/c"},
                                    {"plan_from": f"ftp://u:{SECRET}@h/p", "stream": True}])
def test_a_run_request_refusing_a_location_hides_its_password(fields):
    from rebalancer.pipeline.resolved import RunRequest

    with pytest.raises(ValueError) as info:
        RunRequest(input="in", output="o", **fields)
    assert SECRET not in str(info.value) and "ftp://***@h/" in str(info.value)


def test_a_group_runs_output_that_is_no_location_is_refused_naming_it(tmp_path):
    """A `?group=` run takes its output's claim first; an output that is no location (a file: URI
    naming a user) is the run's check to refuse, naming the field, not the claim's."""
    done = subprocess.run(
        [sys.executable, "-m", "rebalancer.cli", "pipeline", "run", "--input", "kafka://embedded/t?group=g",
         "--output", f"file://u:{SECRET}@/data/x"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "rebalancer: error: output: a file: URI names a local path, got the host '***@' in file://***@/data/x"
    ], done.stderr
    assert list(tmp_path.iterdir()) == []
