"""``pcqr report``: look at a session: its budget over the query stream, what it answered, how well.

Reads the public log (and a truth file, and the state's summary, only when given); writes one
self-contained HTML page and the PNG figures beside it. The work is the library's
(pcqr.pipeline.report.contents for the data, pcqr.pipeline.report.render for the drawing).
"""
from __future__ import annotations

import os
import posixpath

import click

from pcqr.pipeline.data.object_store import is_uri
from pcqr.jobs.common import TRUTH_HELP, emit_summary, json_option, note, overwrite_option
from pcqr.pipeline.data.outputs import Output, check_outputs
from pcqr.pipeline.errors import PcqrError


@click.command("report")
@click.option("--log", "log_dir", required=True, type=click.Path(file_okay=False),
              help="Public: the session's answered-query log directory.")
@click.option("--state", default=None, type=click.Path(file_okay=False),
              help="Private: also read the session's state directory, for its public summary only (certificate "
              "and counts) and its last batch hash: the log must end at that batch. Without it the report reads "
              "public files only, and notes, as pcqr replay does, that the log's last batch is vouched for by nothing.")
@click.option("--truth", default=None, help=TRUTH_HELP.format(what="the answers' accuracy over the stream"))
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="Public: the HTML report to write (public files and the state's public summary only); the "
              "figures go beside it as OUT-STEM-<figure>.png.")
@overwrite_option
@json_option
def command(log_dir: str, state: str | None, truth: str | None, out: str, overwrite: bool, as_json: bool) -> None:
    """Write a session report, every figure against the position in the query stream (binned):
    the budget odometer (c of T, or answers of m under gnmax; eps certified), what each query got
    (answered by source, abstained, refused), the gate's figure, the answer rate (and with --truth
    accuracy, per bin and by source) and the labels released. Matplotlib is needed: pip install
    'pcqr[report]'."""
    from pcqr.pipeline.report.render import pyplot, report_files, write_report
    from pcqr.pipeline.report.contents import session_report
    from pcqr.pipeline.session.planning import read_state_summary

    check_outputs([Output("--out", path) for path in report_files(out)],  # the page and the figures beside it
                  [("--log", log_dir), ("--state", state), ("--truth", truth)], overwrite)
    if not out.lower().endswith((".html", ".htm")):
        raise PcqrError(f"--out {out}: give an .html file name")
    pyplot()  # refuse before reading anything when matplotlib is missing
    report = session_report(log_dir, state=read_state_summary(state) if state is not None else None, truth=truth)
    written = write_report(report, out)
    for remark in report.log_notes:  # after the page is written: a refused command prints its error alone
        note(remark)
    emit_summary({"report": out, "figures": written[1:], "files_read": report.files_read,
                  "queries": report.total_queries, "budget_used": report.budget_used,
                  "cutoff": report.certificate.get("cutoff"), "read_state": state is not None,
                  "last_batch_vouched": report.last_vouched,
                  "out_dir": posixpath.dirname(out) if is_uri(out) else os.path.dirname(os.path.abspath(out))}, as_json)
