"""Every fenced block of README.md and docs/*.md runs as written (issue 46), in the order a reader
meets them: one test per block, in one working directory per document, with the venv on PATH.

The conventions a doc follows (CONTRIBUTING.md, "Docs that run", says the same for authors):
- ```python blocks run as a script (`python -`, in the document's directory); ```bash and ```sh
  blocks run with `bash -e -o pipefail`; ```console blocks run their `$ ` lines the same way and
  show the rest as the output, stdout and stderr together. Every other fence names its language
  (`text`, `json`, ...) and is not run; a fence without one is refused, so no command hides in it.
- Each block is self-contained: it never uses an earlier block's variables (a new process runs
  it), only the files earlier blocks of its document wrote. A python block also pastes into the
  REPL: no blank line inside a compound statement, and one after it.
- A ```text block right after a runnable block (nothing but blank lines between) is its output:
  stdout must match it as a doctest does, `...` standing for any text.
- A block passes when it exits 0 with no traceback, no librdkafka line (`%3|...`) and nothing on
  stderr, on either stream, and prints what its output block shows.
- An HTML comment right before a block holds its markers, one `key: value` a line:
  `needs: kafka` (real brokers, `KafkaCluster`), `needs: mock-kafka` (`MockKafkaCluster`): the
  address in KAFKA_BOOTSTRAP; `needs: postgres`: a server's URL in SINK_URL; `needs: pulsar` (a
  `pulsar_cluster` fixture): PULSAR_ADMIN_URL and PULSAR_SERVICE_URL; `needs: kafka-jars` and
  `needs: postgres-binaries`: a block that starts its own brokers or server. An indented line goes
  on with the marker above it. A block reads them with a
  default a reader's machine would have (`${KAFKA_BOOTSTRAP:-localhost:9092}`,
  `os.environ.get("KAFKA_BOOTSTRAP", "localhost:9092")`). `skip: reason` for a block that cannot
  run here (a YARN cluster, `make test` itself), with `stand-in: command` for one whose files later
  blocks need; `exit: N` for a block that shows a failure; `cleanup: command` to stop what a
  block starts if the block fails before it stops it itself.
"""

from __future__ import annotations

import codeop
import doctest
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python": "python", "bash": "bash", "sh": "bash", "console": "console"}
MARKER_KEYS = ("needs", "skip", "stand-in", "exit", "cleanup")
# A Spark block takes 20 to 150 s on 2 busy cores; a stuck one fails with its output, before
# pytest-timeout's own limit (the test's mark) would end it without.
BLOCK_TIMEOUT_S = 840
# Each service: the fixture that provides it, the pytest mark its blocks carry, the variables it sets.
SERVICES: dict[str, tuple[str | None, str]] = {
    "kafka": ("kafka_real_cluster", "kafka_real"),
    "kafka-jars": (None, "kafka_real"),  # Kafka's jars (`make kafka`): the block starts its own brokers
    "postgres-binaries": (None, "postgres"),  # `make postgres`: the block starts its own server
    "mock-kafka": ("kafka_mock_cluster", "kafka"),
    "postgres": ("postgres", "postgres"),
    "pulsar": ("pulsar_cluster", "pulsar"),
}
SERVICE_VARIABLES = ("KAFKA_BOOTSTRAP", "SINK_URL", "PULSAR_ADMIN_URL", "PULSAR_SERVICE_URL")
LIBRDKAFKA_LINE = re.compile(r"^%\d+\|\d+\.\d+\|", re.M)  # librdkafka's own stderr logger's format
WIDTH = 100  # README lines; a table row is one line whatever its width


@dataclass(frozen=True)
class Block:
    """One fenced block a reader would run, with what its document says about it."""

    doc: Path
    line: int  # of the opening fence, 1-based
    language: str  # python, bash or console
    code: str
    markers: dict[str, str] = field(default_factory=dict)
    output: str | None = None  # the ```text block right after it

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def needs(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.markers.get("needs", "").split(",") if name.strip())


def markers(comment: str, where: str) -> dict[str, str]:
    """The `key: value` lines of an HTML comment; a comment of other words holds none."""
    body = comment.strip().removeprefix("<!--").removesuffix("-->").strip()
    found: dict[str, str] = {}
    key = None
    for line in body.splitlines():
        if line[:1].isspace() and key is not None:  # an indented line goes on with the value above
            found[key] += " " + line.strip()
            continue
        match = re.fullmatch(r"([a-z][a-z-]*):\s*(.*?)\s*", line)
        if match is None:
            return {}
        key, value = match.groups()
        if key not in MARKER_KEYS:
            raise ValueError(f"{where}: unknown marker {key!r}; known: {', '.join(MARKER_KEYS)}")
        found[key] = value
    return found


def parse(doc: Path) -> tuple[list[Block], list[str]]:
    """The document's runnable blocks in reading order, and the fences that name no language."""
    text = doc.read_text()
    lines = text.splitlines()
    tokens = MarkdownIt("commonmark").parse(text)
    blocks: list[Block] = []
    unnamed: list[str] = []
    for index, token in enumerate(tokens):
        if token.type != "fence":
            continue
        start, _ = token.map
        language = token.info.split()[0] if token.info.strip() else ""
        if not language:
            unnamed.append(f"{doc.name}:{start + 1}")
        previous = tokens[index - 1] if index else None
        if language == "text" and previous is not None and previous.type == "fence" and blocks \
                and blocks[-1].line == previous.map[0] + 1 \
                and not "".join(lines[previous.map[1] : start]).strip():  # fmt: skip
            blocks[-1] = replace(blocks[-1], output=token.content)
        elif language in RUNNABLE:
            comments = []
            for before in reversed(tokens[:index]):
                if before.type != "html_block":
                    break
                comments.insert(0, before)
            found: dict[str, str] = {}
            for comment in comments:
                found.update(markers(comment.content, f"{doc.name}:{comment.map[0] + 1}"))
            blocks.append(Block(doc, start + 1, RUNNABLE[language], token.content, found))
    return blocks, unnamed


def collect() -> list[object]:
    params = []
    for doc in DOCUMENTS:
        blocks, _ = parse(doc)
        for block in blocks:
            marks = [getattr(pytest.mark, SERVICES[name][1]) for name in block.needs if name in SERVICES]
            params.append(pytest.param(block, marks=[pytest.mark.docs, *marks], id=block.where))
    return params


# -- the directory a document's blocks run in ------------------------------------------------------
@dataclass
class Reader:
    """A reader's working directory for one document, and what the blocks left to clean up."""

    directory: Path
    cleanup: list[str] = field(default_factory=list)


@pytest.fixture(scope="session")
def readers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Path, Reader]]:
    """One directory per document, made on its first block. It stands for a clone of the repository
    after `make`, where the docs are read: `.venv` is the venv running this test, and `examples/` is
    there (a Python example does not lean on it: it writes what it reads)."""
    made: dict[Path, Reader] = {}
    yield made
    for reader in made.values():
        for command in reader.cleanup:
            subprocess.run(["bash", "-c", command], cwd=reader.directory, env=block_env({}), check=False,
                           capture_output=True, timeout=120)  # fmt: skip


def reader_for(doc: Path, readers: dict[Path, Reader], tmp_path_factory: pytest.TempPathFactory) -> Reader:
    if doc not in readers:
        directory = tmp_path_factory.mktemp(doc.stem.lower())
        (directory / ".venv").symlink_to(sys.prefix)
        shutil.copytree(ROOT / "examples", directory / "examples")
        readers[doc] = Reader(directory)
    return readers[doc]


def block_env(services: dict[str, str]) -> dict[str, str]:
    """A reader's shell with the venv active: its bin first on PATH. Nothing the test session set
    for itself (PYSPARK_PYTHON) or a service's variable the block did not ask for."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", *SERVICE_VARIABLES)}  # fmt: skip
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, **services}


def provide(block: Block, request: pytest.FixtureRequest) -> dict[str, str]:
    """The services the block needs, from the session's fixtures, as environment variables."""
    variables: dict[str, str] = {}
    for name in block.needs:
        if name not in SERVICES:
            pytest.fail(f"{block.where}: needs {name!r}; known: {', '.join(SERVICES)}")
        fixture = SERVICES[name][0]
        if fixture is None:
            continue
        try:
            service = request.getfixturevalue(fixture)
        except pytest.FixtureLookupError:
            pytest.skip(f"{block.where}: needs {name}, and no {fixture} fixture provides it here")
        if name in ("kafka", "mock-kafka"):
            variables["KAFKA_BOOTSTRAP"] = service.bootstrap_servers
        elif name == "postgres":
            variables["SINK_URL"] = service.url
        else:
            variables["PULSAR_ADMIN_URL"] = service.admin_url
            variables["PULSAR_SERVICE_URL"] = service.service_url
    return variables


# -- running one block -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Ran:
    exit_code: int
    stdout: str
    stderr: str


def run(command: list[str], cwd: Path, env: dict[str, str], stdin: str | None, where: str) -> Ran:
    """In its own process group, which is killed after: nothing a block started outlives it, but
    what it detached on purpose (a server it stops itself, in its own session)."""
    process = subprocess.Popen(command, cwd=cwd, env=env, text=True, start_new_session=True,
                               stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        stdout, stderr = process.communicate(stdin, timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{where}: still running after {BLOCK_TIMEOUT_S} s\n{tail('stdout', stdout)}{tail('stderr', stderr)}")
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return Ran(process.returncode, stdout, stderr)


def run_block(block: Block, directory: Path, env: dict[str, str], scripts: Path) -> Ran:
    if block.language == "python":
        return run([sys.executable, "-"], directory, env, block.code, block.where)
    script = scripts / f"{block.doc.stem}-{block.line}.sh"
    if block.language == "console":
        commands = [line[2:] for line in block.code.splitlines() if line.startswith("$ ")]
        script.write_text("exec 2>&1\n" + "\n".join(commands) + "\n")
    else:
        script.write_text(block.code)
    return run(["bash", "-e", "-o", "pipefail", str(script)], directory, env, None, block.where)


def tail(name: str, text: str, lines: int = 40) -> str:
    shown = text.splitlines()[-lines:]
    return f"--- {name} (last {len(shown)} lines) ---\n" + "\n".join(shown) + "\n" if shown else ""


def repl_problems(code: str) -> list[str]:
    """Where pasting `code` into Python's REPL fails: the REPL ends a compound statement at a blank
    line and wants one before the next statement, as `code.InteractiveConsole` feeds it."""
    problems, buffer = [], []
    for number, line in enumerate([*code.splitlines(), ""], start=1):
        buffer.append(line)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compiled = codeop.compile_command("\n".join(buffer), "<doc>", "single")
        except SyntaxError as exc:
            problems.append(f"line {number} of the block: {exc.msg}")
            buffer = []
            continue
        if compiled is not None:
            buffer = []
    return problems


def shown_output(block: Block) -> str | None:
    if block.language == "console":
        return "".join(line + "\n" for line in block.code.splitlines() if not line.startswith("$ "))
    return block.output


def problems_of(block: Block, ran: Ran) -> list[str]:
    problems = []
    expected_exit = int(block.markers.get("exit", "0"))
    if ran.exit_code != expected_exit:
        problems.append(f"exit code {ran.exit_code}, expected {expected_exit}")
    for name, text in (("stdout", ran.stdout), ("stderr", ran.stderr)):
        if "Traceback (most recent call last)" in text:
            problems.append(f"a traceback on {name}")
        found = LIBRDKAFKA_LINE.findall(text)
        if found:
            problems.append(f"{len(found)} librdkafka lines on {name} (a client outlived its cluster?)")
    if ran.stderr.strip() and expected_exit == 0:
        problems.append("output on stderr, which the doc does not show")
    want = shown_output(block)
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    if want is not None and not checker.check_output(want, ran.stdout, flags):
        problems.append("stdout is not what the doc shows:\n" + checker.output_difference(
            doctest.Example("", want), ran.stdout, flags))  # fmt: skip
    return problems


@pytest.mark.timeout(BLOCK_TIMEOUT_S + 60)
@pytest.mark.parametrize("block", collect())
def test_block_runs_as_written(
    block: Block,
    request: pytest.FixtureRequest,
    readers: dict[Path, Reader],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    reader = reader_for(block.doc, readers, tmp_path_factory)
    if "cleanup" in block.markers:
        reader.cleanup.append(block.markers["cleanup"])
    scripts = tmp_path_factory.getbasetemp() / "doc-scripts"
    scripts.mkdir(exist_ok=True)
    if "skip" in block.markers:
        if "stand-in" in block.markers:
            stand_in = Block(block.doc, block.line, "bash", block.markers["stand-in"] + "\n")
            ran = run_block(stand_in, reader.directory, block_env({}), scripts)
            assert ran.exit_code == 0, f"{block.where}: its stand-in failed\n{tail('stderr', ran.stderr)}"
        pytest.skip(f"{block.where}: {block.markers['skip']}")
    if block.language == "python":
        pasted = repl_problems(block.code)
        assert not pasted, f"{block.where}: does not paste into the REPL: {'; '.join(pasted)}"
    ran = run_block(block, reader.directory, block_env(provide(block, request)), scripts)
    problems = problems_of(block, ran)
    assert not problems, (
        f"{block.where} ({block.language}) does not run as written: " + "; ".join(problems) + "\n"
        + tail("stdout", ran.stdout) + tail("stderr", ran.stderr)
    )


# -- what every document must hold to be run ---------------------------------------------------------
@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda doc: doc.name)
def test_every_fence_names_its_language(doc: Path) -> None:
    """A fence without a language is never run: a command in it would escape the test."""
    _, unnamed = parse(doc)
    assert unnamed == [], f"fences without a language (say `text` if it is no command): {unnamed}"


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda doc: doc.name)
def test_skips_say_why(doc: Path) -> None:
    blocks, _ = parse(doc)
    for block in blocks:
        assert block.markers.get("skip", "x").strip(), f"{block.where}: a skip without a reason"
        assert "stand-in" not in block.markers or "skip" in block.markers, f"{block.where}: a stand-in for a block that runs"


def test_readme_lines_fit_100_columns() -> None:
    """Prose and code alike; a table row is one line however wide."""
    long = [f"README.md:{number}: {len(line)}" for number, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1)
            if len(line) > WIDTH and not line.startswith("|")]  # fmt: skip
    assert long == []
