"""results/README.md's summary table is pbo-report's summary of the committed result folders, unedited."""

import os
import re

from pbo_tf.analysis import report, results

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_readme_results_table_is_the_report_summary_of_the_committed_results():
    with open(os.path.join(REPO, "scripts", "results_report.sh"), encoding="utf-8") as f:
        roots = re.findall(r"--root_dir=(\S+)", f.read())
    assert len(roots) == 1, "scripts/results_report.sh names its result folders in one --root_dir"
    folders = [os.path.join(REPO, root) for root in roots[0].split(",")]
    runs, failures = results.load_runs(folders), results.load_failures(folders)
    lines, begin, end = report.summary_block(os.path.join(REPO, "results", "README.md"))
    assert lines[begin + 1 : end] == report.summary_table(runs, failures=failures), (
        "results/README.md's summary table differs from the committed results: "
        "run `bash scripts/results_report.sh`"
    )
