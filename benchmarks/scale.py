"""Scale benchmark: how each cost grows with its work (issue 23).

For each cost, its figure at several sizes and the fitted growth exponent (the slope of
log time on log size: 0 is flat, 1 is linear), against its target:

- index: ``alchemist jobs``, ``%alchemist_jobs``, ``GET /jobs`` and the panel's poll at
  1e2 .. 1e5 jobs of one user (target: p95 <= 100 ms at 1e5, exponent ~ 0);
- metrics: attaching a monitor to, and ``GET /jobs/<id>/metrics`` of, a job with 1e4 ..
  1e7 events (target: first curve <= 1 s at 1e7);
- logs: tail and follow of a rank log up to 1 GB (constant time);
- users: accounts of the embedded hub submitting, listing and polling at once (REST
  p95 and errors);
- soak: jobs through one warm pool and one Jupyter server (file descriptors, memory and
  processes flat; 0 failures).

Each part runs in its own temporary ALCHEMIST_HOME. A part that fails is counted and
reported, and the others still run.

Run: ``.venv/bin/python benchmarks/scale.py [--only index,metrics,...]``; ``--smoke``
runs tiny sizes (the test suite does, so the benchmark cannot silently break).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_parts.common import Series, print_series, print_table, restore_env

PARTS = ("index", "metrics", "logs", "users", "soak")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the test suite)")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated parts ({', '.join(PARTS)})"
    )
    args = parser.parse_args()
    chosen = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        parser.error(f"unknown part {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    table: list[Series] = []
    failed: list[str] = []
    for name in chosen:
        print(f"\n== {name}", flush=True)
        home = tempfile.mkdtemp(prefix=f"alchemist-scale-{name}-")
        saved = {k: os.environ.get(k) for k in ("ALCHEMIST_HOME", "ALCHEMIST_ADMISSION_DIR")}
        os.environ["ALCHEMIST_HOME"] = home
        os.environ["ALCHEMIST_ADMISSION_DIR"] = str(Path(home) / "admission")
        try:
            part = importlib.import_module(f"scale_parts.{name}")
            for series in part.run(smoke=args.smoke):
                print_series(series)
                table.append(series)
        except Exception:
            failed.append(name)
            print(f"part {name} FAILED:\n{traceback.format_exc()}", flush=True)
        finally:
            restore_env(saved)
    print_table(table)
    missed = [s.cost for s in table if s.met is False]
    print(
        f"\nparts failed: {len(failed)} of {len(chosen)}{(' (' + ', '.join(failed) + ')') if failed else ''}"
    )
    print(f"targets not met: {len(missed)}{(' (' + '; '.join(missed) + ')') if missed else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
