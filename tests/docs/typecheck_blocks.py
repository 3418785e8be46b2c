"""Type-check the README's and the tutorial's code with ``mypy --strict``, as a user would.

Run it with the Python of a virtual environment where agentturn is installed *not* editable and
mypy is installed (``.ci/run`` makes one): ``VENV/bin/python tests/docs/typecheck_blocks.py``.
Each page's blocks become one file (see ``code_blocks.py``) in a temporary folder outside the
clone, and mypy runs there, so it can only find agentturn the way a user's mypy does: installed,
with its ``py.typed`` marker. A ``match`` over ``at.TurnCommand`` that forgets a command fails
here (``assert_never``). Exit status: mypy's.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

from code_blocks import ROOT, TYPECHECKED, program


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="agentturn-typecheck-") as folder:
        where = pathlib.Path(folder)
        if where.resolve().is_relative_to(ROOT):
            raise SystemExit("the temporary folder must be outside the clone")
        files = []
        for page in TYPECHECKED:
            target = where / (pathlib.Path(page).stem.lower().replace("-", "_") + ".py")
            target.write_text(program(ROOT / page), encoding="utf-8")
            files.append(target.name)
        found = subprocess.run(
            [sys.executable, "-c", "import agentturn; print(agentturn.__file__)"],
            cwd=where, capture_output=True, text=True, check=True).stdout.strip()
        # the source tree's package (what an editable install finds) is refused; an installed
        # copy is fine wherever its environment lives (CI keeps it in the clone's build/)
        if pathlib.Path(found).resolve().is_relative_to((ROOT / "agentturn").resolve()):
            raise SystemExit(f"agentturn is imported from the clone ({found}): install it "
                             "non-editable for this check")
        print(f"mypy --strict {' '.join(files)} (agentturn from {found})", flush=True)
        return subprocess.run([sys.executable, "-m", "mypy", "--strict", *files],
                              cwd=where).returncode


if __name__ == "__main__":
    sys.exit(main())
