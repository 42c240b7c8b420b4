"""A broker list takes no user info: `u:PW@h:9092` is refused, naming the key, its login masked.

It was taken by ProducerConfig (whose repr then showed the password), by the pipeline's reader
option bootstrap.servers, and by `rebalancer pipeline produce --bootstrap`, whose connect error
echoed it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rebalancer._secrets import masked_servers
from rebalancer.pipeline.kafka._options import parse_options
from rebalancer.produce.config import ProducerConfig, check_servers

EXE = str(Path(sys.executable).with_name("rebalancer"))
SECRET = "Zq9Secret"
WHY = "takes no user info (a login goes in sasl.username and sasl.password), got"


@pytest.mark.parametrize(
    ("servers", "shown"),
    [
        (f"u:{SECRET}@h:9092", "***@h:9092"),
        (f"a:1,u:{SECRET}@b:2", "***@b:2"),  # the '@' in a later entry: the whole list before it
        (f"u:p,{SECRET}@h:9092", "***@h:9092"),  # a password holding ','
        (f"u:{SECRET}@x@h:9092,c:3", "***@h:9092,c:3"),  # and '@': up to the last one
        (f"{SECRET}@h", "***@h"),
    ],
)
def test_producer_config_refuses_user_info_masked(servers: str, shown: str) -> None:
    with pytest.raises(ValueError) as raised:
        ProducerConfig.from_dict({"bootstrap.servers": servers})
    assert str(raised.value) == f"bootstrap.servers {WHY} {shown!r}"
    with pytest.raises(ValueError) as raised:
        check_servers(servers, field="bootstrap")
    assert str(raised.value) == f"bootstrap {WHY} {shown!r}"
    with pytest.raises(ValueError) as raised:
        parse_options({"bootstrap.servers": servers, "topic": "t"})
    assert str(raised.value) == f"option bootstrap.servers {WHY} {shown!r}"
    assert masked_servers(servers) == shown


def test_a_list_without_at_is_shown_as_it_is() -> None:
    assert masked_servers("h:9092,[::1]:9093") == "h:9092,[::1]:9093"
    assert ProducerConfig.from_dict({"bootstrap.servers": "h:9092"}).bootstrap_servers == "h:9092"


def test_pipeline_produce_refuses_bootstrap_with_user_info_in_one_line() -> None:
    done = subprocess.run(
        [EXE, "pipeline", "produce", "--bootstrap", f"u:{SECRET}@127.0.0.1:43995", "--topic", "t1", "--events", "1"],
        capture_output=True, text=True, timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [f"rebalancer: error: bootstrap {WHY} '***@127.0.0.1:43995'"]
