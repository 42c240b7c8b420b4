"""Issue 42 item 16: Py4J's DEBUG line per JVM call carried every argument (`option
skafka.sasl.password sS3CRET`) and the gateway's token; it now shows only the call's shape."""

from __future__ import annotations

import logging

import pytest

from rebalancer.pipeline.session.py4j_log import PY4J_LOGGERS, shape

SECRET = "S3CRET-py4j"


@pytest.mark.parametrize(
    ("sent", "shown"),
    [
        # DataFrameReader.option(key, value): both strings hidden, the call kept
        (f"c\no123\noption\nskafka.sasl.password\ns{SECRET}\ne\n", "c o123 option s*** s*** e"),
        # new Path(uri): the URI (and its password) hidden
        (f"i\norg.apache.hadoop.fs.Path\nsftp://u:{SECRET}@h/o\ne\n", "i org.apache.hadoop.fs.Path s*** e"),
        # references, numbers, booleans, null: no text, shown
        ("c\no5\nrange\nL0\nL10\ni2\nbtrue\nn\nro7\nd1.5\ne\n", "c o5 range L0 L10 i2 btrue n ro7 d1.5 e"),
        # a pickled function's bytes (a PostgreSQL URL may be in them)
        (f"c\no9\nrun\nj{SECRET}\ne\n", "c o9 run j*** e"),
        # Py4J's authentication: the gateway token is the whole second line
        (f"A\n{SECRET}\n", "A (1 line hidden)"),
        ("m\nd\no12\ne\n", "m (3 lines hidden)"),
        # answers: a string (a conf value) hidden, a reference or void shown
        (f"!ys{SECRET}", "!ys***"),
        ("!yro44", "!yro44"),
        ("!yv", "!yv"),
        (f"!xs{SECRET}", "!xs***"),
    ],
)
def test_shape_keeps_the_call_and_hides_every_text_value(sent, shown):
    assert shape(sent) == shown


def test_py4js_own_records_are_rewritten(caplog):
    caplog.set_level(logging.DEBUG, logger="py4j")
    import rebalancer.pipeline.session.build  # noqa: F401  (installs the filter, as any run does)

    for name in PY4J_LOGGERS:
        logging.getLogger(name).debug("Command to send: %s", f"c\no1\nset\nsa.password\ns{SECRET}\ne\n")
        logging.getLogger(name).debug("Answer received: %s", f"!ys{SECRET}")
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        (name, message)
        for name in PY4J_LOGGERS
        for message in ("Command to send: c o1 set s*** s*** e", "Answer received: !ys***")
    ]


@pytest.mark.spark
def test_a_real_jvm_call_logs_no_value(spark, caplog):
    caplog.set_level(logging.DEBUG, logger="py4j")
    spark.conf.set("rebalancer.test.password", SECRET)
    assert spark.conf.get("rebalancer.test.password") == SECRET
    spark.conf.unset("rebalancer.test.password")
    py4j = [r.getMessage() for r in caplog.records if r.name.startswith("py4j")]
    assert any(m.startswith("Command to send: c o") and " set s*** s*** e" in m for m in py4j), py4j
    assert any(m == "Answer received: !ys***" for m in py4j), py4j
    assert SECRET not in caplog.text
