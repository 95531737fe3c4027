"""`grade` and `inspect` hold bounded memory whatever a file holds (issue 16, finding 7).

A gzip bomb (a few MiB to a 2 GiB line), a file of blank lines before the traces, a line or
a single document over ``--max-line-bytes``: exit 2 with one line naming the file, the line
and the limit, never a traceback, and the peak RSS of the ``grade`` process stays far below
what the input decompresses to. The bombs are written member by member (one
``gzip.compress`` of a 32 MiB run of one byte, repeated), so the test itself holds 32 MiB at
most; a file of many gzip members is read whole, as gzip(1) reads it.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_tooleval.cli import main

ROOT = Path(__file__).resolve().parents[2]
JSONL = ROOT / "tests/data/files/traces.otlp.jsonl"
CONFIG = "graders:\n  - {name: order, type: tool-call-order, threshold: 0.0, " \
         "tool_calls_order: [search]}\n"
MIB = 1 << 20
DEFAULT_LIMIT = 64 * MIB
RSS_BOUND_MIB = 200
# The grade process's own peak RSS (VmHWM: ru_maxrss would include the parent's RSS at fork,
# kept across exec), printed on stderr last.
CHILD = """
import atexit, sys
def peak():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    sys.stderr.write(f"\\nmaxrss_kib {kib}\\n")
atexit.register(peak)
from otel_tooleval.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _clean_lines() -> list[bytes]:
    """The lines of the golden JSON-lines file that carry no deliberate problem."""
    out = []
    for line in JSONL.read_bytes().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if "resourceSpans" in doc and b"not-a-trace-id" not in line:
            out.append(line + b"\n")
    return out


def _bomb(path: Path, byte: bytes, size: int, *, after: bytes = b"") -> Path:
    """``size`` bytes of ``byte`` (then ``after``), gzip-compressed member by member."""
    member = gzip.compress(byte * (32 * MIB))
    with path.open("wb") as out:
        for _ in range(size // (32 * MIB)):
            out.write(member)
        if after:
            out.write(gzip.compress(after))
    return path


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "graders.yaml"
    path.write_text(CONFIG)
    return path


def _grade(tmp_path: Path, *args: str) -> tuple[int, list[str], int]:
    """Exit status, stderr lines (the RSS line taken off) and peak RSS in MiB of a child."""
    done = subprocess.run([sys.executable, "-c", CHILD, *args], check=False,
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("maxrss_kib "), done.stderr[-2000:]
    return done.returncode, lines[:-1], int(lines[-1].split()[1]) // 1024


def test_a_gzip_bomb_is_one_line_over_the_limit_in_bounded_memory(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.jsonl.gz", b"x", 2048 * MIB)
    assert bomb.stat().st_size < 8 * MIB
    status, err, rss = _grade(tmp_path, "grade", str(bomb), "-c", str(_config(tmp_path)))
    assert status == 2
    assert err == [(f"otel-tooleval: {bomb}:1: a line longer than {DEFAULT_LIMIT} bytes, the "
                   "limit (--max-line-bytes N raises it)")]
    assert rss < RSS_BOUND_MIB, f"peak RSS {rss} MiB reading a 2 GiB line"
    print(f"gzip bomb (2 GiB line): peak RSS {rss} MiB")


def test_blank_lines_before_the_traces_are_not_held(tmp_path: Path) -> None:
    # 1 GiB of blank lines in gzip members, then the traces in one more member: every member
    # is read, the blank lines are not held during format detection, and line numbers count
    # them (the problem reported is on the right line).
    lines = _clean_lines()
    traces = b"".join(lines) + b"{not json\n"
    bomb = _bomb(tmp_path / "blank.jsonl.gz", b"\n", 1024 * MIB, after=traces)
    report = tmp_path / "report.json"
    status, err, rss = _grade(tmp_path, "grade", str(bomb), "-c", str(_config(tmp_path)),
                              "-f", "json", "-o", str(report))
    assert status == 2  # the malformed last line is an input problem
    bad_line = 1024 * MIB + len(lines) + 1
    assert err[0].startswith(f"otel-tooleval: {bomb}:{bad_line}: invalid JSON"), err
    assert len(json.loads(report.read_text())["runs"]) == 4
    assert rss < RSS_BOUND_MIB, f"peak RSS {rss} MiB reading 1 GiB of blank lines"
    print(f"1 GiB of blank lines: peak RSS {rss} MiB")


def test_only_blank_lines_is_an_empty_input(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "blank.jsonl.gz", b"\n", 512 * MIB)
    status, err, rss = _grade(tmp_path, "inspect", str(bomb), "-f", "json")
    assert status == 0 and not err
    assert rss < RSS_BOUND_MIB, f"peak RSS {rss} MiB reading 512 MiB of blank lines"


def test_max_line_bytes_bounds_a_line_and_raises_the_limit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _clean_lines()
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines))
    longest = max(len(line) for line in lines)
    at = 1 + max(range(len(lines)), key=lambda i: len(lines[i]))
    config = str(_config(tmp_path))
    first_over = 1 + next(i for i, line in enumerate(lines) if len(line) > longest - 1)
    assert main(["grade", str(path), "-c", config, "--max-line-bytes", str(longest - 1)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"otel-tooleval: {path}:{first_over}: a line longer than {longest - 1} "
                   "bytes, the limit (--max-line-bytes N raises it)")]
    assert first_over == at
    assert main(["grade", str(path), "-c", config, "--max-line-bytes", str(longest)]) in (0, 1)
    assert main(["inspect", str(path), "--max-line-bytes", "100"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"otel-tooleval: {path}:1: a line longer than 100 bytes, the limit "
        "(--max-line-bytes N raises it)")


def test_max_line_bytes_bounds_a_single_document(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = ROOT / "tests/data/files/traces.otlp.json"
    size = doc.stat().st_size
    config = str(_config(tmp_path))
    assert main(["grade", str(doc), "-c", config, "--max-line-bytes", str(size // 2)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        (f"otel-tooleval: {doc}: a JSON document longer than {size // 2} bytes, the limit "
        "(--max-line-bytes N raises it)")]
    assert main(["grade", str(doc), "-c", config, "--max-line-bytes", str(size)]) in (0, 1)


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_max_line_bytes_must_be_positive(value: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["grade", str(JSONL), "-c", str(_config(tmp_path)), "--max-line-bytes", value])
    assert exit_.value.code == 2
    assert "argument --max-line-bytes: " in capsys.readouterr().err


def test_gzip_members_are_read_whole_and_a_cut_stream_is_an_input_problem(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _clean_lines()
    config = str(_config(tmp_path))
    members = tmp_path / "members.jsonl.gz"
    members.write_bytes(b"".join(gzip.compress(line) for line in lines))
    report = tmp_path / "r.json"
    assert main(["grade", str(members), "-c", config, "-f", "json", "-o", str(report)]) == 0
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(b"".join(lines))
    again = tmp_path / "again.json"
    assert main(["grade", str(whole), "-c", config, "-f", "json", "-o", str(again)]) == 0
    assert json.loads(report.read_text()) == json.loads(again.read_text())
    capsys.readouterr()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(members.read_bytes()[:-10])  # the last member's end is missing
    assert main(["grade", str(cut), "-c", config, "-f", "json", "-o", str(report)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"otel-tooleval: {cut}:{len(lines)}: cannot read further: ")
    assert "input problem(s)" in err[-1]


def test_max_line_bytes_bounds_a_protobuf_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proto = ROOT / "tests/data/files/traces.otlp.pb"   # messages of 1100, 1128, 3, ... bytes
    config = str(_config(tmp_path))
    assert main(["grade", str(proto), "-c", config, "--max-line-bytes", "1110"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        (f"otel-tooleval: {proto}: message 2 at byte 1104: longer than 1110 bytes (1128), the "
        "limit (--max-line-bytes N raises it)")]
    assert main(["grade", str(proto), "-c", config, "--max-line-bytes", "1000"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "or its first message is longer than 1000 bytes, the limit (--max-line-bytes N "
        "raises it)")
    assert main(["grade", str(proto), "-c", config, "--max-line-bytes", "1155",
                 "--allow-input-problems"]) in (0, 1)


def test_zeros_where_protobuf_messages_belong_end_the_input_quickly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Zeros read as empty messages 4 bytes at a time: 64 MiB of them took 45 s; a gzip bomb of
    # zeros would hang a CI job for most of an hour. A run of 1024 is taken for zeros.
    proto = (ROOT / "tests/data/files/traces.otlp.pb").read_bytes()
    zeros = tmp_path / "zeros.pb.gz"
    with zeros.open("wb") as out:
        out.write(gzip.compress(proto))
        out.write(gzip.compress(bytes(64 * MIB)))
    started = time.monotonic()
    assert main(["grade", str(zeros), "-c", str(_config(tmp_path))]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert err[1] == (f"otel-tooleval: {zeros}: message 9 at byte {len(proto)}: 1024 empty "
                      "messages in a row (zero bytes, not messages); the rest of the input "
                      "is skipped")
    # A few empty messages between real ones are read past, as before.
    few = tmp_path / "few.pb"
    few.write_bytes(proto[:1104] + bytes(12) + proto[1104:])
    again = tmp_path / "again.json"
    report = tmp_path / "report.json"
    assert main(["grade", str(few), "-c", str(_config(tmp_path)), "-f", "json", "-o",
                 str(again), "--allow-input-problems"]) in (0, 1)
    plain = tmp_path / "plain.pb"
    plain.write_bytes(proto)
    assert main(["grade", str(plain), "-c", str(_config(tmp_path)), "-f", "json", "-o",
                 str(report), "--allow-input-problems"]) in (0, 1)
    assert json.loads(again.read_text()) == json.loads(report.read_text())
