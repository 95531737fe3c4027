"""The HTML report opened in a real browser: headless Chromium (Debian's ``chromium``).

The page must load without a console message (script errors and Content-Security-Policy
violations both land there), its script must run to the end, and the DOM must show every run.
The screenshot is kept as ``test-artifacts/report.png``; with ``TOOLEVAL_UPDATE_DOCS_IMAGE=1``
``docs/images/report.png`` (shown in docs/grade.md) is redrawn too.

Without Chromium the test is skipped, except under CI (``CI`` set), where it fails: CI installs
it with ``apt-get install -y --no-install-recommends chromium``. The marks of extra calls are
checked on the generated HTML, without a browser.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from otel_tooleval import load_config
from otel_tooleval.aggregate import aggregate
from otel_tooleval.model import RunReport
from otel_tooleval.outputs import render_html
from otel_tooleval.outputs.marks import BROKE, EXTRA, call_marks
from tests.support.runs import call
from tests.test_reports import (
    CONFIG,
    PROBLEMS,
    TRACES,
    check_html,
    graded,
    marks_in,
    rows_of,
    sample_reports,
)

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
DOCS_IMAGE = ROOT / "docs" / "images" / "report.png"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")
CONSOLE = re.compile(r":CONSOLE[:(]")


def chromium() -> str:
    found = shutil.which(os.environ.get("CHROMIUM", "chromium"))
    if found is None:
        message = ("headless Chromium is needed to check the HTML report: "
                   "apt-get install -y --no-install-recommends chromium")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def browse(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reports = sample_reports()
    html = render_html(reports, aggregate(reports, load_config(CONFIG)), problems=PROBLEMS)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "report.html").write_text(html, encoding="utf-8")
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(html, encoding="utf-8")
    return path


def test_report_runs_its_script_without_console_messages(report_file: Path,
                                                         tmp_path: Path) -> None:
    binary = chromium()
    done = browse(binary, tmp_path / "profile", "--enable-logging=stderr", "--v=0",
                  "--dump-dom", report_file.as_uri())
    console = [line for line in done.stderr.splitlines() if CONSOLE.search(line)]
    assert console == [], "\n".join(console)
    dom = done.stdout
    html_tag = re.search(r"<html[^>]*>", dom)
    assert html_tag is not None
    assert 'class="js"' in html_tag.group() and 'data-report-ready="3"' in html_tag.group()
    for i, trace in enumerate(TRACES):
        section = re.search(rf'<details class="run r-(pass|fail)" id="run-{i + 1}"[^>]*>', dom)
        assert section is not None, f"run {i + 1} missing from the DOM"
        assert f"{trace:032x}" in dom
    assert dom.count('<div class="tl-row" role="row"') == 3 + 5 + 2


def test_report_screenshot(report_file: Path, tmp_path: Path) -> None:
    binary = chromium()
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    browse(binary, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2000",
           report_file.as_uri())
    assert png_size(shot) == (1280, 2000)
    # A blank or unstyled page compresses to a few kilobytes; this one has colour and text.
    assert shot.stat().st_size > 50_000
    if os.environ.get("TOOLEVAL_UPDATE_DOCS_IMAGE"):
        # docs/grade.md shows the failing run with its marks first, at three quarters scale.
        reports = sample_reports()
        reports = [reports[1], reports[0], reports[2]]
        page = tmp_path / "docs.html"
        page.write_text(render_html(reports, aggregate(reports, load_config(CONFIG)),
                                    problems=PROBLEMS[:1]), encoding="utf-8")
        DOCS_IMAGE.parent.mkdir(parents=True, exist_ok=True)
        browse(binary, tmp_path / "profile-docs", f"--screenshot={DOCS_IMAGE}",
               "--window-size=1280,1320", "--force-device-scale-factor=0.75", page.as_uri())
        assert png_size(DOCS_IMAGE) == (960, 990)


# -- extra calls: neutral in a grader that passed, red in one that failed (no browser) ---------

EXACT = {"name": "trajectory", "type": "tool_trajectory", "mode": "exact",
         "expected": [{"tool": "search"}, {"tool": "report"}]}
SETS = {"name": "selection", "type": "equal_function_sets",
        "classes": [{"name": "search", "members": ["search"]},
                    {"name": "report", "members": ["report"]}]}
CALLS = [call("search"), call("report"), call("browse")]       # browse: not expected


def html_rows(report: RunReport) -> tuple[str, list[str]]:
    text = render_html([report], {"runs": 1})
    check_html(text)
    return text, rows_of(text, 1)


@pytest.mark.parametrize("passing,failing", [
    ({**EXACT, "threshold": 0.6}, {**EXACT, "threshold": 1.0}),     # score 2/3
    ({**SETS, "expect": [{"tool_selection.f1": {">=": 50}}]},        # F1 80
     {**SETS, "expect": [{"tool_selection.f1": {">=": 90}}]}),
])
def test_an_allowed_extra_call_is_drawn_neutral_and_a_failing_one_red(
        passing: dict[str, object], failing: dict[str, object]) -> None:
    good = graded(CALLS, {"graders": [passing]})
    assert good.passed and good.results[0].passed
    assert call_marks(good.results[0], 3)[2].verdict == EXTRA
    _, rows = html_rows(good)
    assert marks_in(rows[2]) == ["m-extra"]
    assert 'class="bar bar-extra"' in rows[2]
    assert "extra, allowed (the grader passed)" in rows[2]
    assert "m-broke" not in "".join(rows) and "bar-broke" not in "".join(rows)
    assert marks_in(rows[0]) == marks_in(rows[1]) == ["m-satisfied"]

    bad = graded(CALLS, {"graders": [failing]})
    assert not bad.passed
    assert call_marks(bad.results[0], 3)[2].verdict == BROKE
    _, rows = html_rows(bad)
    assert marks_in(rows[2]) == ["m-broke"]
    assert 'class="bar bar-broke"' in rows[2]


def test_an_extra_call_another_grader_forbids_stays_red() -> None:
    config = {"graders": [{**EXACT, "threshold": 0.6},
                          {"name": "no-browse", "type": "tool-calls",
                           "config": {"disallowed": [{"name": "^browse$"}]}}]}
    report = graded(CALLS, config)
    assert [r.passed for r in report.results] == [True, False]
    _, rows = html_rows(report)
    assert marks_in(rows[2]) == ["m-extra", "m-broke"]
    assert 'class="bar bar-broke"' in rows[2]


def test_the_extra_mark_is_grey_and_in_the_legend() -> None:
    text, _ = html_rows(graded(CALLS, {"graders": [{**EXACT, "threshold": 0.6}]}))
    rules = dict(re.findall(r"\.(m-extra|bar-extra|m-broke) \{([^}]*)\}", text))
    assert "--bad" not in rules["m-extra"] and "--muted" in rules["m-extra"]
    assert "--bad" not in rules["bar-extra"] and "--plain" in rules["bar-extra"]
    assert "--bad" in rules["m-broke"]
    assert '<span class="m m-extra">+</span> extra, allowed by a passing grader' in text


# -- grouped by eval case (docs/cases.md) -----------------------------------------------------

FRAMEWORKS = Path(__file__).parent / "data" / "frameworks"
# The pydantic_ai recording's root carries this conversation id; the crewai one does not.
CONVERSATION = "01a214de-e8a5-71ed-831b-2bf9f46e51a8"
CASES_CONFIG = """\
graders:
  - {name: trajectory, type: tool_trajectory, mode: in_order, expected: [{tool: never_called}]}
cases:
  - id: weather
    match: {attribute: {key: gen_ai.conversation.id, value: CONVERSATION}}
    expect: {trajectory: {expected: [{tool: get_weather}]}}
  - {id: booking, match: {first_user_message: Book Lisbon for 2 nights}}
""".replace("CONVERSATION", CONVERSATION)


def _case_page(tmp_path: Path, config: str) -> str:
    from otel_tooleval.cli import main

    (tmp_path / "config.yaml").write_text(config)
    out = tmp_path / "report.html"
    main(["grade", str(FRAMEWORKS / "pydantic_ai" / "traces.jsonl"),
          str(FRAMEWORKS / "crewai" / "traces.jsonl"), "-c", str(tmp_path / "config.yaml"),
          "-f", "html", "-o", str(out)])
    return out.read_text(encoding="utf-8")


def test_with_cases_the_page_has_a_section_per_case_and_one_for_runs_with_none(
        tmp_path: Path) -> None:
    text = _case_page(tmp_path, CASES_CONFIG)
    check_html(text)
    sections = text.split('<section class="case ')[1:]
    assert [s[:s.index('"')] for s in sections] == ["c-pass", "c-missing", "c-none"]
    weather, booking, loose = sections
    assert "<h2>" in weather and "Case weather</h2>" in weather
    assert 'class="badge b-pass">PASS</span> Case weather' in weather
    assert weather.count('<details class="run') == 1        # its run, in its section
    assert "trajectory" in weather and "1.00" in weather     # its grader's worst result
    assert "MISSING</span> Case booking" in booking and "No run matched this case." in booking
    assert '<details class="run' not in booking
    assert "Runs with no case" in loose and loose.count('<details class="run') == 1
    # the case table before the runs: one row per case and one for the runs with no case
    table = text[text.index('<table class="index cases">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr class=") == 3
    assert '<a href="#case-1">weather</a>' in table and 'href="#case-none"' in table


def test_without_cases_the_page_has_no_case_section(tmp_path: Path) -> None:
    text = _case_page(tmp_path, CASES_CONFIG[:CASES_CONFIG.index("cases:")])
    check_html(text)
    assert '<section class="case' not in text and 'class="index cases"' not in text
    assert text.count('<details class="run') == 2
