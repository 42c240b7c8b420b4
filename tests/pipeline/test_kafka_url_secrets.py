"""Issue 33 follow-up: a secret in an input URL never reaches an error, a repr or a summary.

`kafka://h:9092/t?kafka.sasl.password=S3CRET` carries a consumer password as a reader option; the
errors quoting the URL, `repr(KafkaInput)` and the input name the summaries print show `***` in its
place, chosen by the key's name (the rule `produce` hides its own secret keys by), never by looking
for the value. No Spark: every case fails while the URL is read.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rebalancer.pipeline.ingest import InputSpec, input_name
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
    assert input_name(spec) == "ftp://bob:***@h/data"
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
    assert str(info.value) == "ftp://bob:***@h/data: IOException: Login failed on ftp://bob:***@h/data"
