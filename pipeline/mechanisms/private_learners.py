"""``pcqr learn``'s private learners: A_SSPP with public unlabelled data
(:func:`.with_public_data.learn_with_public_data`), or one of Beimel-Nissim-Stemmer's learners from
the private rows alone (:func:`.without_public_data.learn_without_public_data`).

:func:`learn_private_classifier` refuses, in one line and before anything is read, an option that
belongs to another algorithm than the one asked for (or a missing one), then runs that algorithm's
job. Each job makes its own checks, charges the ledger and writes the released model file.
"""
from __future__ import annotations

from typing import Any, Callable

from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.mechanisms.with_public_data import learn_with_public_data
from pcqr.pipeline.mechanisms.without_public_data import LEARNERS, learn_without_public_data
from pcqr.pipeline.privacy.limits import check_delta

#: ``pcqr learn --algorithm``: the semi-private learner, or Beimel-Nissim-Stemmer's learners (issue 14).
ALGORITHMS = ("sspp", *LEARNERS)


def learn_private_classifier(
    algorithm: str, private: str, out: str, *, public: str | None = None, hypothesis: str | None = None,
    domain: str | None = None, direction: str | None = None, first_rows: int | None = None,
    features_are_public: bool = False, features: str | None = None, label: str = "label", epsilon: float = 1.0,
    delta: float = 1e-6, alpha: float = 0.1, beta: float = 0.05, allow_private_overlap: bool = False,
    cluster: str | None = None, ledger: str | None = None, seed: int | None = None, insecure_seed: bool = False,
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run ``algorithm`` (one of :data:`ALGORITHMS`) on the private labelled dataset and write the
    released model at ``out``; the options are ``pcqr learn``'s. Returns the job's summary."""
    run: dict[str, Any] = {"cluster": cluster, "ledger": ledger, "seed": seed, "insecure_seed": insecure_seed,
                           "note": note}
    check_delta(delta)  # whichever algorithm: 0.01 or more is a mistake (sspp and label-private spend none)
    if direction is not None and algorithm != "learn-thresholds":
        raise PcqrError("--direction is for --algorithm learn-thresholds")
    if algorithm != "sspp":
        if algorithm == "label-private" and public is not None:
            raise PcqrError("--public: label-private reads no public dataset: S1 is the first rows of --private "
                            "(--first-rows); for a separate public sample use --algorithm sspp")
        for option, value in (("--public", public), ("--hypothesis", hypothesis)):
            if value is not None and algorithm != "label-private":
                raise PcqrError(f"{option} is for --algorithm sspp; --algorithm {algorithm} reads no public data")
        return learn_without_public_data(
            private, out, algorithm=algorithm, domain=domain, features=features, label=label, epsilon=epsilon,
            delta=delta, alpha=alpha, beta=beta, direction=direction or "up", hypothesis=hypothesis,
            first_rows=first_rows, features_are_public=features_are_public, **run)
    for label_private_option, given in (("--first-rows", first_rows), ("--features-are-public", features_are_public)):
        if given not in (None, False):
            raise PcqrError(f"{label_private_option} is for --algorithm label-private")
    if public is None or hypothesis is None:
        missing = "--public" if public is None else "--hypothesis"
        raise PcqrError(f"Missing option '{missing}' (--algorithm sspp, the default, needs it)")
    if domain is not None:
        raise PcqrError("--domain is for --algorithm point, learn-thresholds or rectangle; A_SSPP's candidates come "
                        "from --public")
    return learn_with_public_data(private, public, out, hypothesis=hypothesis, features=features, label=label,
                                  epsilon=epsilon, beta=beta, allow_private_overlap=allow_private_overlap, **run)
