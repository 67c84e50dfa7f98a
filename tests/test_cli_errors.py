"""The command line fails clearly (issue 12): every bad argument is one argparse error naming
its option (exit 2, no traceback); a log tool pointed at nothing says so instead of "OK"; an
unreachable cluster is named as host:port with the reason, quickly when it refuses and
within --timeout-ms when it is silent; a reader closing the pipe ends the output quietly;
logging options work on every command, before or after its name; every help shows defaults."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import raftcore
from raftcore.cli import build_parser, main
from raftcore.cli.args import every_parser
from raftcore.cli.logging_options import JsonFormatter
from raftcore.client.cluster import ClusterClient, NoLeaderError, UnreachableError
from raftcore.log import SegmentedLog
from raftcore.node.local_cluster import free_ports

pytestmark = pytest.mark.slow

SOURCE = str(Path(raftcore.__file__).parent.parent)


def cli(*args: str, cwd: Path, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SOURCE}
    return subprocess.run(
        [sys.executable, "-m", "raftcore", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def make_log(path: Path, records: int = 30) -> None:
    with SegmentedLog.open(path, segment_bytes=1 << 20) as log:
        for i in range(0, records, 100):
            batch = [(b"k%d" % n, b"value-%06d" % n) for n in range(i, min(records, i + 100))]
            log.append_as_leader(batch, 1)


# ---- every bad argument: one argparse error naming the option, exit 2 ---------------------------


def node(*extra: str, node_id: str = "1", voters: str = "1@h:1") -> list[str]:
    return [
        "node",
        f"--id={node_id}",
        f"--voters={voters}",
        "--data-dir=d",
        "--cluster-id=c",
        *extra,
    ]


BAD_ARGUMENTS = [
    (["consume", "--bootstrap", "localhost"], "--bootstrap", "no port"),
    (["consume", "--bootstrap", ":9092"], "--bootstrap", "(no host)"),
    (["consume", "--bootstrap", "h:0"], "--bootstrap", "1..65535"),
    (["consume", "--bootstrap", "h:70000"], "--bootstrap", "1..65535"),
    (["consume", "--bootstrap", "h:9091,h:x"], "--bootstrap", "not a number"),
    (["consume", "--bootstrap", ","], "--bootstrap", "got nothing"),
    (["consume", "--bootstrap", "h:1", "--from", "abc"], "--from", "'abc'"),
    (["consume", "--bootstrap", "h:1", "--from", "-5"], "--from", "-5"),
    (["consume", "--bootstrap", "h:1", "--max", "0"], "--max", ">= 1"),
    (["consume", "--bootstrap", "h:1", "--idle-timeout-ms", "x"], "--idle-timeout-ms", "'x'"),
    (["produce", "--bootstrap", "h:1", "--batch", "0"], "--batch", ">= 1"),
    (["produce", "--bootstrap", "h:1", "--size", "-3"], "--size", ">= 1"),
    (["produce", "--bootstrap", "h:1", "--generate", "many"], "--generate", "'many'"),
    (["produce", "--bootstrap", "h:1", "--timeout-ms", "0"], "--timeout-ms", ">= 1"),
    (["describe-quorum", "--bootstrap", "h:1", "--timeout-ms", "1s"], "--timeout-ms", "'1s'"),
    (["describe-quorum", "--bootstrap", "h:1", "--interval", "0"], "--interval", "> 0"),
    (node("--metrics-port=70000"), "--metrics-port", "1 to 65535"),
    (node(node_id="-1"), "--id", "-1"),
    (node(node_id="x"), "--id", "'x'"),
    (node(voters="1@h"), "--voters", "no port"),
    (node(voters="1@:9091"), "--voters", "(no host)"),
    (node(voters="one@h:1"), "--voters", "id@host:port"),
    (node(voters="1@h:1,1@h:2"), "--voters", "twice"),
    (node("--listen=h"), "--listen", "no port"),
    (node("--election-timeout-ms=0"), "--election-timeout-ms", ">= 1"),
    (node("--segment-bytes=1G"), "--segment-bytes", "'1G'"),
    (node("--snapshot-min-records=-1"), "--snapshot-min-records", ">= 0"),
    (node("--state-machine=lmdb", "--state-map-size=1"), "--state-map-size", ">= 1048576"),
    (["dump-log", ".", "--segment", "-1"], "--segment", ">= 0"),
    (["storage-demo", "--records", "0"], "--records", ">= 1"),
    (["demo", "--batch", "x"], "--batch", "'x'"),
    (["snapshot", "dump", ".", "1-1", "--max-bytes", "0"], "--max-bytes", ">= 1"),
    (["spark", "export", "--bootstrap", "localhost", "--out", "x"], "--bootstrap", "no port"),
    (["verify-log", ".", "--log-level", "loud"], "--log-level", "'loud'"),
]


@pytest.mark.parametrize(("argv", "option", "why"), BAD_ARGUMENTS, ids=str)
def test_a_bad_argument_is_one_error_line_naming_the_option_and_exits_2(
    argv: list[str], option: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24: one line, no usage before it (argparse printed 25 lines of it for `node`),
    and where to read the rest."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    command = " ".join(argv[:2]) if argv[0] in ("snapshot", "spark") else argv[0]
    assert lines[0].startswith(f"raftcore {command}: error: {option}: "), lines[0]
    assert lines[0].endswith(f"(see raftcore {command} --help)"), lines[0]
    assert why in lines[0], lines[0]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["node", "--id=1"],
            "raftcore node: error: the following arguments are required: --data-dir, "
            "--cluster-id (see raftcore node --help)",
        ),
        (
            ["consume", "--bootstrap", "h:1", "--bogus", "x"],
            "raftcore consume: error: unrecognized arguments: --bogus x "
            "(see raftcore consume --help)",
        ),
        (
            ["snapshot", "list", ".", "--bogus"],
            "raftcore snapshot list: error: unrecognized arguments: --bogus "
            "(see raftcore snapshot list --help)",
        ),
        (
            [],
            "raftcore: error: the following arguments are required: COMMAND (see raftcore --help)",
        ),
    ],
    ids=["missing", "unknown", "unknown-nested", "no-command"],
)
def test_a_missing_or_unknown_argument_is_one_line_naming_the_command(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown option was reported by the top parser as `raftcore: error: unrecognized
    arguments`, after the top-level usage: which command's option was it?"""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [line]


def test_version_prints_raftcore_and_the_package_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"raftcore {raftcore.__version__}\n"


def test_an_unexpected_error_is_one_line_and_the_traceback_only_with_verbose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import raftcore.cli.app

    def broken(*args: object, **kw: object) -> None:
        raise ZeroDivisionError("a bug")

    make_log(tmp_path)
    monkeypatch.setattr(raftcore.cli.app, "verify_log", broken)
    assert main(["verify-log", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "raftcore: error: ZeroDivisionError: a bug (-v shows the traceback)"
    ]
    assert main(["verify-log", str(tmp_path), "-v"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("raftcore: error:")


# ---- the log tools never say OK for nothing ----------------------------------------------------


@pytest.mark.parametrize("tool", ["verify-log", "dump-log"])
@pytest.mark.parametrize("what", ["missing", "file", "empty", "data-dir-with-empty-log"])
def test_a_log_tool_with_nothing_to_check_fails_with_one_line(
    tool: str, what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "target"
    if what == "file":
        target.write_text("not a log\n")
    elif what == "empty":
        target.mkdir()
    elif what == "data-dir-with-empty-log":
        (target / "log").mkdir(parents=True)
    assert main([tool, str(target)]) == 1
    captured = capsys.readouterr()
    assert "OK" not in captured.out and "Segment" not in captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"raftcore {tool}: {target}: "), lines


def test_a_directory_of_node_data_directories_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's directory holds node-1/ ... and node-1.log: it is not a log."""
    for n in (1, 2):
        make_log(tmp_path / f"node-{n}" / "log")
        (tmp_path / f"node-{n}.log").write_text("node output\n")
    assert main(["verify-log", str(tmp_path)]) == 1
    assert "(node-1, node-2), not a log: give one of them" in capsys.readouterr().err


def test_the_log_tools_read_a_data_directory_through_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_log(tmp_path / "log", records=250)
    assert main(["verify-log", str(tmp_path)]) == 0
    assert "OK: 1 segments, 3 batches, 250 records" in capsys.readouterr().out
    assert main(["dump-log", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("baseOffset:") == 3


def test_dump_log_of_a_segment_that_is_not_there_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_log(tmp_path)
    assert main(["dump-log", str(tmp_path), "--segment", "7"]) == 1
    assert "no segment with base offset 7 (its segments start at 0)" in capsys.readouterr().err


# ---- unreachable clusters ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["consume", "produce", "describe-quorum"])
def test_a_refused_connection_fails_fast_naming_the_address(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (port,) = free_ports(1)
    argv = [command, "--bootstrap", f"127.0.0.1:{port}"] + (["x"] if command == "produce" else [])
    started = time.monotonic()
    assert main(argv) == 1
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"raftcore {command}: cannot reach 127.0.0.1:{port} (connection refused)"
    ]
    assert elapsed < 2.0, f"{elapsed:.2f} s"


@pytest.mark.parametrize("command", ["consume", "produce", "describe-quorum"])
def test_a_silent_address_fails_within_the_timeout_naming_it(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A listening socket nobody accepts from: connections open (the kernel's backlog) and
    requests are never answered."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        argv = [command, "--bootstrap", f"127.0.0.1:{port}", "--timeout-ms", "800"]
        started = time.monotonic()
        assert main([*argv, *(["x"] if command == "produce" else [])]) == 1
        elapsed = time.monotonic() - started
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"127.0.0.1:{port} (timed out)" in err[0], err
    assert "Endpoint(" not in err[0]
    assert 0.7 < elapsed < 2.5, f"{elapsed:.2f} s"


def test_a_node_that_closes_every_connection_is_named_with_a_hint_not_timed_out(
    closing_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a plaintext client sees at a TLS listener (or without the client certificate it
    requires): the node closes the connection unanswered. The message says so and points at
    --command-config; it said "(timed out)", as if nothing listened."""
    port = closing_port
    argv = ["describe-quorum", "--bootstrap", f"127.0.0.1:{port}", "--timeout-ms", "800"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"127.0.0.1:{port} (the node closed the connection: does its listener" in err[0], err
    assert "--command-config" in err[0]


def test_a_missing_command_config_is_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --command-config file that is missing is a bad argument: one line naming it, exit 2
    (it exited 1, as a failure of the cluster would; test_certs_cli has the bad property)."""
    path = tmp_path / "client.properties"
    argv = ["describe-quorum", "--bootstrap", "127.0.0.1:1", "--command-config", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--command-config" in err[0] and str(path) in err[0], err


def test_a_client_that_was_answered_before_retries_refusals_until_its_deadline() -> None:
    """A leader change or a restart refuses for a while: a client that reached the cluster
    once must keep trying (until its timeout), not give up after the short grace."""
    import asyncio

    (port,) = free_ports(1)

    async def refresh() -> tuple[type[BaseException], float]:
        client = ClusterClient([f"127.0.0.1:{port}"], request_timeout_ms=1500)
        client.answered = True
        started = time.monotonic()
        try:
            await client.refresh_metadata()
        except NoLeaderError as exc:
            return type(exc), time.monotonic() - started
        finally:
            await client.close()
        raise AssertionError("no error")

    kind, elapsed = asyncio.run(refresh())
    assert kind is NoLeaderError and not issubclass(kind, UnreachableError)
    assert elapsed >= 1.4, f"gave up after {elapsed:.2f} s"


# ---- broken pipes ------------------------------------------------------------------------------


def _read_one_line_and_close(argv: list[str], cwd: Path) -> tuple[int, str, bytes]:
    env = {**os.environ, "PYTHONPATH": SOURCE}
    proc = subprocess.Popen(
        [sys.executable, "-m", "raftcore", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # the reader goes away, as `| head -1` does
        code = proc.wait(timeout=30)
        return code, proc.stderr.read().decode(errors="replace"), first
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_dump_log_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    make_log(tmp_path / "log", records=20_000)  # ~2 MB of --records lines, past any pipe buffer
    code, err, first = _read_one_line_and_close(["dump-log", "log", "--records"], tmp_path)
    assert first.startswith(b"Segment ")
    assert code in (0, 141) and err == "", err


def test_consume_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    import asyncio

    from raftcore.client import Producer
    from raftcore.node.local_cluster import LocalCluster

    async def fill(bootstrap: list[str]) -> None:
        async with Producer(bootstrap) as producer:
            await producer.send([(None, b"v" * 200) for _ in range(5000)])

    with LocalCluster(tmp_path / "cluster", 1) as cluster:
        cluster.start()
        asyncio.run(asyncio.wait_for(fill(cluster.bootstrap), 30))
        argv = ["consume", "--bootstrap", cluster.endpoint(1)]
        code, err, first = _read_one_line_and_close(argv, tmp_path)
    assert first == b"v" * 200 + b"\n"
    assert code in (0, 141) and "Broken pipe" not in err and "Traceback" not in err, err


# ---- logging options on every command; JSON lines -----------------------------------------------


def test_every_command_accepts_the_logging_options() -> None:
    parsers = every_parser(build_parser())
    assert len(parsers) > 12  # the commands, snapshot's and spark's included
    for p in parsers:
        for option in ("-v", "--verbose", "--log-level", "--log-format"):
            assert option in p._option_string_actions, (p.prog, option)


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "info", "verify-log", "d"],
        ["verify-log", "d", "--log-level", "info"],
        ["--log-level", "info", "snapshot", "list", "d"],
        ["snapshot", "list", "d", "--log-level", "info"],
        ["snapshot", "--log-level", "info", "list", "d"],
    ],
)
def test_a_logging_option_counts_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.log_level == "info"
    assert args.verbose is False and args.log_format == "text"  # the top level's defaults


def test_verbose_before_the_command_is_not_reset_by_the_command(tmp_path: Path) -> None:
    parser = build_parser()
    assert parser.parse_args(["-v", "dump-log", "d"]).verbose is True
    assert parser.parse_args(["dump-log", "d", "-v"]).verbose is True
    assert (
        parser.parse_args(["--log-format", "json", "spark", "export", "--out", "x"]).log_format
        == "json"
    )


def test_json_log_lines_are_one_object_each(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    done = cli(
        "consume",
        "--bootstrap",
        f"127.0.0.1:{port}",
        "--log-format",
        "json",
        "--log-level",
        "debug",
        cwd=tmp_path,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and lines[-1].startswith("raftcore consume: cannot reach")
    logged = [json.loads(line) for line in lines[:-1]]
    assert any(e["logger"] == "raftcore.client.cluster" for e in logged), lines
    for entry in logged:
        assert {"time", "level", "logger", "message"} <= set(entry)
        assert entry["time"].endswith("Z")


def test_a_json_log_line_carries_the_traceback() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "failed %s", ("it",), sys.exc_info()
        )
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "failed it" and entry["level"] == "ERROR"
    assert "ValueError: bad" in entry["exc_info"]


# ---- help shows defaults -----------------------------------------------------------------------


def test_node_help_shows_the_election_timeout_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["node", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    option = text[text.rindex("--election-timeout-ms ELECTION_TIMEOUT_MS") :]
    assert option[: option.index("--fetch-timeout-ms")].endswith("(default: 1000) ")


def test_every_option_with_a_default_shows_it_in_its_help() -> None:
    for p in every_parser(build_parser()):
        text = " ".join(p.format_help().split())
        for action in p._actions:
            default = action.default
            if not action.option_strings or default in (None, False, argparse.SUPPRESS):
                continue
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{p.prog} {action.option_strings[0]} has no help"
            shown = f"(default: {default})" in text or "default" in action.help
            assert shown, f"{p.prog} {action.option_strings[0]}: no default in its help"


def test_the_spark_jobs_name_a_refused_cluster_at_once() -> None:
    """``raftcore spark export|snapshot --bootstrap`` plan through the same client."""
    from raftcore.spark.job_source import JobSource
    from raftcore.spark.options import SparkSourceError

    (port,) = free_ports(1)
    started = time.monotonic()
    with pytest.raises(SparkSourceError) as raised:
        JobSource.of(f"127.0.0.1:{port}", None).committed_range()
    assert (
        str(raised.value) == f"raftcore cluster: cannot reach 127.0.0.1:{port} (connection refused)"
    )
    assert time.monotonic() - started < 2.0


def test_the_spark_jobs_wait_for_a_silent_cluster_only_their_timeout() -> None:
    from raftcore.spark.job_source import JobSource
    from raftcore.spark.options import SparkSourceError

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(SparkSourceError, match=f"127.0.0.1:{port} \\(timed out\\)"):
            JobSource.of(f"127.0.0.1:{port}", None, request_timeout_ms=800).committed_range()
        assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("command", ["export", "snapshot"])
def test_the_spark_commands_pass_their_timeout_on(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    import raftcore.cli.spark

    export_module = importlib.import_module("raftcore.spark.export")  # raftcore.spark.export
    snapshot_module = importlib.import_module("raftcore.spark.snapshot_job")  # is a function

    seen: dict[str, object] = {}

    class Done:
        def line(self) -> str:
            return "done"

    def job(spark: object, **kw: object) -> Done:
        seen.update(kw)
        return Done()

    monkeypatch.setattr(raftcore.cli.spark, "local_session", lambda master: (None, False))
    monkeypatch.setattr(export_module, "export", job)
    monkeypatch.setattr(snapshot_module, "build_snapshot", job)
    where = ["--out", str(tmp_path / "x")] if command == "export" else ["--out-dir", str(tmp_path)]
    argv = ["spark", command, "--bootstrap", "h:1", "--timeout-ms", "1234", *where]
    assert main(argv) == 0
    assert seen["request_timeout_ms"] == 1234 and seen["bootstrap"] == "h:1"
