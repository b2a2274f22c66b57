"""``pcqr distill``: the student of a public log as a released model file (post-processing, no budget)."""
from __future__ import annotations

from typing import Any

import click

from pcqr.jobs.common import CLI_REPORTER, cluster_option, emit_summary, json_option, overwrite_option
from pcqr.pipeline.data.outputs import Output, check_outputs


@click.command("distill")
@click.option("--log", "log_dir", required=True, type=click.Path(file_okay=False),
              help="Public: the session's answered-query log (verified before it is read).")
@click.option("--learner", default=None, help="The student's learner: stump, threshold or a scikit-learn classifier's "
              "dotted path (e.g. sklearn.linear_model.LogisticRegression, "
              "sklearn.ensemble.HistGradientBoostingClassifier). Default: the session's student learner.")
@click.option("--learner-param", multiple=True, help="key=value parameter of --learner (repeatable).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Public: where to write the model (JSON).")
@click.option("--state", default=None, type=click.Path(file_okay=False),
              help="Private: the session's state directory, read only for its last batch hash: the log must end "
              "at that batch (without it, an altered last batch or lost later batches cannot be seen, and a note "
              "says so, as pcqr replay's).")
@overwrite_option
@cluster_option
@json_option
def command(log_dir: str, learner: str | None, learner_param: tuple[str, ...], out: str, state: str | None,
            overwrite: bool, cluster: str | None, as_json: bool) -> None:
    """Fit a student on the answers a session released (log sources sparse_vector, guess and
    flipped) and write it as a model file `pcqr predict` serves. Reads only the public log (and
    --state's record of its last batch): the
    student is post-processing of the session's output, covered by the session's (eps, delta) and
    costing nothing more. --cluster: only its allowed learner modules are used (fitting runs here)."""
    from pcqr.pipeline.data.cluster import learner_modules
    from pcqr.pipeline.models.learners import parse_learner_params
    from pcqr.pipeline.session.distillation import distill_log

    check_outputs([Output("--out", out)], [("--log", log_dir), ("--cluster", cluster), ("--state", state)], overwrite)
    params: dict[str, Any] = parse_learner_params(learner_param)
    if params and learner is None:
        from pcqr.pipeline.errors import PcqrError

        raise PcqrError("--learner-param needs --learner")
    emit_summary(distill_log(log_dir, out, learner, params, learner_modules(cluster), CLI_REPORTER, state), as_json)
