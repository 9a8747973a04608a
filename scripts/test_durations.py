"""Where the test suite's time went: the last whole-suite run's record (tests/conftest.py writes it), split by
folder and file, its wall time against the 20-minute budget of `make test`, and the slowest tests.

    make test-durations        # or: python scripts/test_durations.py [--top N]
"""
import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / ".pytest_cache" / "ssm_plugins" / "durations.json"
BUDGET_S = 20 * 60


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="how many of the slowest tests to list")
    args = parser.parse_args(argv)
    if not RECORD.exists():
        sys.exit(f"no record at {RECORD.relative_to(ROOT)}: run `make test` (or `make test-all`) first")
    run = json.loads(RECORD.read_text())
    tests = run["tests"]
    total = sum(tests.values())
    by_file = collections.Counter()
    by_folder = collections.Counter()
    for nodeid, seconds in tests.items():
        path = nodeid.split("::")[0]
        by_file[path] += seconds
        by_folder[str(Path(path).parent)] += seconds
    selection = f"-m {run['markers']!r}" if run["markers"] else "every test"
    print(f"last whole-suite run: {run['when']}, {selection}, {run['workers'] or 1} worker(s), exit {run['exit']}")
    print(f"wall {run['wall_s'] / 60:.1f} min against the {BUDGET_S // 60}-minute budget of `make test` "
          f"({'within' if run['wall_s'] <= BUDGET_S else 'OVER'}); {len(tests)} tests, "
          f"{total / 60:.1f} min of test time in all")
    print(f"\n{'folder':<40} {'min':>6} {'share':>6}")
    for folder, seconds in by_folder.most_common():
        print(f"{folder:<40} {seconds / 60:6.1f} {seconds / total:6.0%}")
    print(f"\n{'file':<60} {'min':>6} {'tests':>6}")
    counts = collections.Counter(nodeid.split("::")[0] for nodeid in tests)
    for path, seconds in by_file.most_common(20):
        print(f"{path:<60} {seconds / 60:6.1f} {counts[path]:6d}")
    print(f"\n{'slowest tests':<100} {'s':>7}")
    for nodeid, seconds in sorted(tests.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{nodeid[:100]:<100} {seconds:7.1f}")
    return 0 if run["wall_s"] <= BUDGET_S or run["markers"] == "" else 1


if __name__ == "__main__":
    sys.exit(main())
