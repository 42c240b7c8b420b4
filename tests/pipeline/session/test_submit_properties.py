"""Attack 46: `--conf` settings reach spark-submit through a properties file, never the JVM's command
line (`ps`, the pid file), and the caller's `spark.driver.extraJavaOptions` is merged with the run's.
The end-to-end runs are in tests/test_attack46.py; these are the pieces' exact texts."""

from __future__ import annotations

from rebalancer.pipeline.session.build import java_properties, merged_java_options


def test_a_properties_file_escapes_what_java_would_read_otherwise():
    # Checked against java.util.Properties.load: each key and value reads back as written.
    text = java_properties(
        {
            "a.key": "plain",
            "b.key": " lead = : # ! \\ back",
            "c key=x": "v",
            "d": "tab\there\nnewline\x01",
            "e": "ünï 日本",
            "f": "https://u:p@h/m",
            "g": "",
        }
    )
    assert text == (
        "a.key=plain\n"
        "b.key=\\ lead \\= \\: \\# \\! \\\\ back\n"
        "c\\ key\\=x=v\n"
        "d=tab\\there\\nnewline\\u0001\n"
        "e=ünï 日本\n"
        "f=https\\://u\\:p@h/m\n"
        "g=\n"
    )


def test_the_callers_java_options_come_first_so_the_runs_hold():
    ours = "-Dlog4j2.configurationFile=file:///x.properties"
    assert merged_java_options("-Dfoo=bar -Dbaz=1", ours) == f"-Dfoo=bar -Dbaz=1 {ours}"
    assert merged_java_options(None, ours) == ours
    assert merged_java_options("  ", ours) == ours
