"""Screenshots of the web console for docs/usage.md: `python -m bench.console_screenshots`.

Runs the console's end-to-end tests (tests/e2e/test_console.py and test_console_people.py: headless Chromium against a real
server with a small organization) with ORGMEM_CONSOLE_SCREENSHOTS set, so each page is captured
at 1280x800 as the test reaches it, then writes them to docs/img/console-*.png as 256-colour
PNGs (a quarter of the size; the pages use a few flat colours).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shrink(source: Path, target: Path) -> None:
    from PIL import Image

    with Image.open(source) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="orgmem-console-") as shots:
        env = {**os.environ, "ORGMEM_CONSOLE_SCREENSHOTS": shots}
        tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/e2e/test_console.py",
                 "tests/e2e/test_console_people.py"]
        if subprocess.run(tests, cwd=ROOT, env=env).returncode != 0:
            print("console_screenshots: the console tests failed; no screenshots written", file=sys.stderr)
            return 1
        args.out.mkdir(parents=True, exist_ok=True)
        for source in sorted(Path(shots).glob("console-*.png")):
            target = args.out / source.name
            shrink(source, target)
            print(f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}: "
                  f"{source.stat().st_size // 1024} -> {target.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
