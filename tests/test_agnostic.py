"""A_AgPrivCl end to end: the private relabelling hypothesis, a full agnostic session, bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pcqr.jobs.cli import main
from pcqr.pipeline.hypotheses import make_class
from pcqr.pipeline.mechanisms.relabel import relabel_and_resample
from pcqr.pipeline.privacy.agnostic_parameters import AgnosticParameters
from pcqr.pipeline.privacy.noise import session_key
from pcqr.pipeline.privacy.noise import SeededNoise
from tests.conftest import write_thread_cluster

GAMMA, CUT = 0.15, 0.3


def _noisy_threshold(rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(rows, 1))
    y = (x[:, 0] > CUT).astype(np.int8) ^ (rng.random(rows) < GAMMA).astype(np.int8)
    return x, y


def test_relabelling_hypothesis_is_near_the_best_threshold(client) -> None:
    """n = 200,000, gamma = 0.15, eps = 1, delta = 1e-6: h_hat's excess error <= 0.02 in >= 19 of 20 runs."""
    n = 200_000
    params = AgnosticParameters.algorithm3(1.0, 1e-6, 0.1, 0.05, 1000, n, subsamples=10)
    hclass = make_class("threshold", 1)
    fresh_x, fresh_y = _noisy_threshold(1_000_000, np.random.default_rng(10_000))
    best_error = np.mean((fresh_x[:, 0] > CUT).astype(np.int8) != fresh_y)
    good = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        data = client.scatter(_noisy_threshold(n, rng))
        noise = SeededNoise(seed)
        h_hat, resampled = relabel_and_resample(client, [data], [n], params, hclass, noise, session_key(noise))
        excess = np.mean(h_hat.predict(fresh_x) != fresh_y) - best_error
        good += int(excess <= 0.02)
        X_hat, y_hat = resampled.result()
        assert X_hat.shape[0] == params.sample_rows  # S_hat: n' rows, labelled by h_hat
        assert (y_hat == h_hat.predict(X_hat)).all()
    assert good >= 19


@pytest.fixture(scope="module")
def agnostic_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("agnostic")
    out = folder / "data"
    assert main(["generate", "--kind", "agnostic", "--noise", "0.15", "--rows", "200000", "--features", "5",
                 "--queries", "2000", "--seed", "4", "--out", str(out),
                 "--cluster", write_thread_cluster(folder)]) == 0
    return out


def _answer(data, tmp_path, cluster, *extra: str) -> list[str]:
    return ["answer", "--mode", "agnostic", "--private", str(data / "private"), "--queries", str(data / "queries"),
            "--state", str(tmp_path / "state"), "--log", str(tmp_path / "log"), "--epsilon", "1",
            "--delta", "1e-6", "--alpha", "0.1", "--queries-max", "2000", "--subsamples", "50",
            "--cluster", cluster, "--json", *extra]


def test_agnostic_session_accounts_for_every_query(agnostic_data, tmp_path, capsys, thread_cluster_yaml) -> None:
    """eps_hat = min(1, eps')/log(2/delta) is about 0.07, so the smallest certifiable w is in the tens of
    thousands and 50 models answer nothing: this checks the mechanics and the privacy chain, not answers."""
    code = main(_answer(agnostic_data, tmp_path, thread_cluster_yaml, "--hypothesis", "threshold",
                        "--features", "x0", "--truth", str(agnostic_data / "truth")))
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["mode"] == "agnostic" and summary["hypothesis"] == "threshold"
    assert summary["answered"] + summary["abstained"] + summary["refused"] == 2000
    derived = AgnosticParameters.algorithm3(1.0, 1e-6, 0.1, 0.05, 2000, 200_000, subsamples=50)
    assert summary["agnostic"]["sample_rows"] == derived.sample_rows
    assert summary["cutoff"] == derived.subsamp.cutoff and summary["lambda"] == pytest.approx(derived.subsamp.lam)
    assert summary["threshold"] == derived.subsamp.threshold  # the smallest certifiable w at eps_hat
    assert summary["threshold_source"] == "smallest_certifiable"
    assert summary["proven_epsilon"] <= 1.0 and summary["proven_delta"] <= 1e-6
    assert len(summary["agnostic"]["privacy_chain"]) == 4
    state = json.loads((tmp_path / "state" / "session.json").read_text())
    assert state["relabeller"]["class"] == "threshold"  # h_hat: private state only
    log_text = b"".join(p.read_bytes() for p in (tmp_path / "log").iterdir())
    assert b"relabeller" not in log_text


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--hypothesis", "rectangle"], "--hypothesis rectangle needs exactly 2 features"),
        (["--hypothesis", "threshold", "--features", "x0", "--epsilon", "0.0002"], "needs at least"),
        (["--hypothesis", "nonsense"], "--hypothesis 'nonsense' is unknown"),
        ([], "--mode agnostic needs --hypothesis"),
    ],
)
def test_agnostic_bad_input(agnostic_data, tmp_path, capsys, thread_cluster_yaml, extra, needle) -> None:
    args = _answer(agnostic_data, tmp_path, thread_cluster_yaml)
    if "--epsilon" in extra:
        i = extra.index("--epsilon")
        args[args.index("--epsilon") + 1] = extra[i + 1]
        extra = extra[:i] + extra[i + 2:]
    code = main([*args, *extra])
    _, err = capsys.readouterr()
    assert code != 0 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "log").exists() and not (tmp_path / "state").exists()
