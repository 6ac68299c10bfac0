"""Static HTML reports of runs and batches: ``xlarun report``.

    from xlarun.report import build_run_report
    built = build_run_report(LocalStore.open(), run_id, "report/")
    print(built.index_html)

The site works from ``file://`` with no server and no network; ``index.json`` beside
``index.html`` holds the same facts for scripts.
"""

from xlarun.report.build import BuiltReport, ReportOptions, build_batch_report, build_run_report

__all__ = ["BuiltReport", "ReportOptions", "build_batch_report", "build_run_report"]
