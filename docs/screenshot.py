"""Make docs/report-vision.png: the top of the vision sample's HTML report, in headless Chromium.

    python3 docs/screenshot.py [--width 1280] [--height 2000] [--scheme light]

Analyses samples/data/vision against the NVIDIA L4 roofline, recommends a plan, renders the
report and photographs it with the same browser set-up as the report's tests
(tests/support/report_browser.py: Debian's chromium driven by Playwright).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import loadprobe  # noqa: E402
from loadprobe.pipeline.files import dump  # noqa: E402
from loadprobe.plan.files import plan_dict  # noqa: E402
from loadprobe.reports.html import render_report, write_html  # noqa: E402
from tests import report_browser as browser  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2000)
    parser.add_argument("--scheme", choices=["light", "dark"], default="light")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "report-vision.png")
    args = parser.parse_args()
    if browser.skip_reason():
        raise SystemExit(browser.skip_reason())
    portrait = loadprobe.analyze([str(REPO / "samples" / "data" / "vision")], device="nvidia-l4")
    plan = loadprobe.recommend(portrait)
    work = Path(tempfile.mkdtemp(prefix="loadprobe-shot-"))
    page_path = work / "portrait.html"
    write_html(page_path, render_report(portrait, plans=plan_dict(plan), pipeline_yaml=dump(plan.to_pipeline())))
    with browser.launch(work / "profile") as context:
        visit = browser.open_report(context, page_path, width=args.width, scheme=args.scheme)
        if visit.errors or visit.page.evaluate("document.documentElement.dataset.charts") != "ready":
            raise SystemExit(f"the report did not draw cleanly: {visit.errors}")
        visit.page.screenshot(path=str(args.out), full_page=True,
                              clip={"x": 0, "y": 0, "width": args.width, "height": args.height})
    print(args.out)


if __name__ == "__main__":
    main()
