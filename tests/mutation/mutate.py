"""Mutation testing over the files a change touched, with the tests that cover them (mutmut 3).

    python tests/mutation/mutate.py otel_tooleval/values.py --tests tests/test_conventions.py
    python tests/mutation/mutate.py --changed main              # files changed since main; their tests
    python tests/mutation/mutate.py otel_tooleval/graders/tool_trajectory.py \\
        --tests tests/test_tool_trajectory.py tests/test_tool_trajectory_oracle.py --sample 200

The worktree is copied to a scratch folder (mutmut writes ``mutants/`` beside the sources) and
mutmut runs there on the files named, with only the tests named (``--tests``; by default
``tests/test_<module>*.py`` of each file, which ``--changed`` relies on). It prints the mutation
score per file and per package and every surviving mutant with its diff, and writes it all to
``mutation-report.json`` in the scratch folder. mutmut is not a dependency: install it where
you like (``pip install --target /tmp/mutdeps mutmut==3.8.1``) and pass ``--mutmut-path``, or
have it importable. The CI does not run this; docs/development.md says when to.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KILLED = {1: "killed", 3: "killed", 36: "timeout", 24: "timeout", -24: "timeout",
          152: "timeout", 255: "timeout", 37: "killed"}


def _status(code: int | None) -> str:
    if code is None:
        return "not checked"
    if code == 0:
        return "survived"
    if code in (5, 33):
        return "no tests"
    if code == 34:
        return "skipped"
    return KILLED.get(code, "suspicious")


def _changed(rev: str) -> list[str]:
    out = subprocess.run(["git", "diff", "--name-only", rev, "--", "otel_tooleval"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.split() if p.endswith(".py") and (ROOT / p).exists()]


def _default_tests(files: list[str]) -> list[str]:
    tests: set[str] = set()
    for f in files:
        stem = Path(f).stem
        tests.update(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob(f"test_{stem}*.py"))
    return sorted(tests)


def _copy_tree(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for rel in listed:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _lines(values: list[str]) -> str:
    return "".join(f"\n    {v}" for v in values)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="source files to mutate (otel_tooleval/...)")
    ap.add_argument("--tests", nargs="+", default=None, help="test files or node ids to run")
    ap.add_argument("--changed", metavar="REV", help="mutate the files changed since REV")
    ap.add_argument("--jobs", type=int, default=2, help="mutants tested at once (default 2)")
    ap.add_argument("--sample", type=int, default=0,
                    help="test this many mutants, drawn at random (0: all)")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--mutmut-path", help="a folder mutmut was installed into (pip --target)")
    ap.add_argument("--workdir", help="the scratch folder (default: a new temporary one)")
    ap.add_argument("--reuse", action="store_true",
                    help="keep --workdir's copy and mutmut's state: another --sample of the "
                         "same files and tests; it does not see tests written since (its copy "
                         "of tests/ and mutmut's results are the old ones): after new tests, "
                         "run into a fresh --workdir")
    args = ap.parse_args(argv)

    files = list(args.files) + (_changed(args.changed) if args.changed else [])
    files = sorted({f for f in files if not f.endswith("__init__.py")})
    if not files:
        ap.error("no files to mutate")
    tests = args.tests or _default_tests(files)
    if not tests:
        ap.error("no tests: name them with --tests")

    work = Path(args.workdir or tempfile.mkdtemp(prefix="tooleval-mutate-"))
    if args.reuse and (work / "mutants").is_dir():
        pass        # mutmut's mutants, coverage and results of the last run there are kept
    else:
        if work.exists() and any(work.iterdir()):
            shutil.rmtree(work)
        work.mkdir(parents=True, exist_ok=True)
        _copy_tree(work)
    (work / "setup.cfg").write_text(
        "[mutmut]\nsource_paths = otel_tooleval\n"
        f"only_mutate ={_lines(files)}\n"
        f"pytest_add_cli_args_test_selection ={_lines(tests)}\n"
        "pytest_add_cli_args =\n    -x\n    -q\n    -p\n    no:cacheprovider\n"
        "also_copy =\n    tests\n    examples\n    docs\n    collector-config\n")
    env = dict(os.environ)
    paths = [p for p in (args.mutmut_path, env.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    mutmut = [sys.executable, "-m", "mutmut"]

    names: list[str] = []
    if args.sample:
        # mutmut lists its mutants once it has generated them (and has its per-test
        # coverage): a first run filtered to no mutant does that and stops; then the sample
        # is run by name.
        subprocess.run([*mutmut, "run", "--max-children", str(args.jobs), "none-of-them"], cwd=work,
                       env=env, capture_output=True, text=True, check=False)
        listed = subprocess.run([*mutmut, "results", "--all", "true"], cwd=work, env=env,
                                capture_output=True, text=True, check=False).stdout
        every = [line.split(":")[0].strip() for line in listed.splitlines() if "__mutmut_" in line]
        names = sorted(random.Random(args.seed).sample(every, min(args.sample, len(every))))
    subprocess.run([*mutmut, "run", "--max-children", str(args.jobs), *names], cwd=work, env=env,
                   check=False)

    report = _report(work, files, set(names) if names else None)
    (work / "mutation-report.json").write_text(json.dumps(report, indent=1))
    for survivor in report["survived"]:
        diff = subprocess.run([*mutmut, "show", survivor], cwd=work, env=env,
                              capture_output=True, text=True, check=False).stdout
        print(f"\n-- survived: {survivor}\n{diff.strip()}")
    print("\nfile / package                                   killed  survived  other  score")
    for key, row in [*report["files"].items(), *report["packages"].items()]:
        print(f"{key:48} {row['killed']:6} {row['survived']:9} {row['other']:6}  "
              f"{row['score']}")
    print(f"\nreport: {work / 'mutation-report.json'}")
    return 0


def _report(work: Path, files: list[str], only: set[str] | None) -> dict[str, Any]:
    per_file: dict[str, Counter[str]] = {}
    survived: list[str] = []
    for f in files:
        meta = work / "mutants" / (f + ".meta")
        counts: Counter[str] = Counter()
        if meta.exists():
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            for name, code in codes.items():
                if only is not None and name not in only:
                    continue
                status = _status(code)
                counts[status] += 1
                if status == "survived":
                    survived.append(name)
        per_file[f] = counts
    packages: dict[str, Counter[str]] = {}
    for f, counts in per_file.items():
        parts = Path(f).parts
        package = "/".join(parts[:2]) + "/" if len(parts) > 2 else f
        packages.setdefault(package, Counter()).update(counts)

    def row(c: Counter[str]) -> dict[str, object]:
        killed = c["killed"] + c["timeout"]
        tested = killed + c["survived"]
        return {"killed": killed, "survived": c["survived"],
                "other": sum(c.values()) - tested,
                "score": f"{100 * killed / tested:.1f}%" if tested else "-", "counts": dict(c)}

    return {"files": {f: row(c) for f, c in per_file.items()},
            "packages": {p: row(c) for p, c in packages.items() if p not in per_file},
            "survived": sorted(survived)}


if __name__ == "__main__":
    sys.exit(main())
