"""Expected errors raised on a worker reach the user as pcqr's one line, nothing more.

A :class:`~pcqr.pipeline.errors.PcqrError` raised inside a Dask task (a bad value found while a
worker reads its part) travels back to the driver, where ``pcqr`` prints it as one line. On the
way, ``distributed.worker`` logs every failed task as a multi-line "Compute Failed ... Traceback"
block on the worker's stderr, which is the user's terminal for a local cluster. That block says
nothing the one line does not, so :class:`QuietExpectedErrors` drops it for PcqrError and its
subclasses, and only for them: any other exception is a bug and keeps its block and traceback.

The filter sits on the ``distributed.worker`` logger of every process that runs tasks: the
driver's (thread workers) and each worker process's, through a worker plugin that the scheduler
also gives to workers that join later.
"""
from __future__ import annotations

import logging
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from pcqr.pipeline.errors import PcqrError

WORKER_LOGGER = "distributed.worker"


def _expected_names() -> tuple[str, ...]:
    """``PcqrError(`` and the same for every subclass defined so far (how a worker's log shows them)."""
    names, pending = [], [PcqrError]
    while pending:
        cls = pending.pop()
        names.append(f"{cls.__name__}(")
        pending.extend(cls.__subclasses__())
    return tuple(names)


class QuietExpectedErrors(logging.Filter):
    """Drops ``distributed.worker``'s "Compute Failed" record of a task that raised a PcqrError.

    distributed logs ``"Compute Failed\\nKey: %s\\nState: %s\\nTask: %s\\nException: %r\\n..."``
    with the exception's repr as the fourth argument; any other record passes.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not str(record.msg).startswith("Compute Failed") or not isinstance(args, tuple) or len(args) < 4:
            return True
        return not str(args[3]).startswith(_expected_names())


def install_filter(kind: type[logging.Filter] = QuietExpectedErrors) -> None:
    """Put one filter of ``kind`` on this process's ``distributed.worker`` logger (never two)."""
    logger = logging.getLogger(WORKER_LOGGER)
    if not any(isinstance(f, kind) for f in logger.filters):
        logger.addFilter(kind())


class QuietExpectedErrorsPlugin(WorkerPlugin):
    """Installs :class:`QuietExpectedErrors` in every worker process, present and future."""

    name = "pcqr-quiet-expected-errors"
    idempotent = True  # registered again by every pcqr command on a long-lived cluster: kept once

    def setup(self, worker: Any) -> None:
        install_filter(QuietExpectedErrors)


class QuietLocalShutdown(logging.Filter):
    """Drops ``distributed.worker``'s "Failed to communicate with scheduler during heartbeat." record.

    Installed only in the worker processes of a local cluster that a pcqr command started and owns:
    when the command ends it closes the scheduler and its workers together, and a heartbeat already
    on its way finds the scheduler gone. distributed logs that OSError with a traceback on the
    user's terminal after a run that succeeded (about one command in a hundred in the README's
    session). A scheduler lost while the job runs fails the job in the driver with its own error.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to communicate with scheduler during heartbeat")


class QuietLocalShutdownPlugin(WorkerPlugin):
    """Installs :class:`QuietLocalShutdown` in a local cluster's worker processes."""

    name = "pcqr-quiet-local-shutdown"
    idempotent = True

    def setup(self, worker: Any) -> None:
        install_filter(QuietLocalShutdown)


def quiet_expected_errors(client: Any, local: bool = False) -> None:
    """Silence the "Compute Failed" block of PcqrErrors in this process and on ``client``'s workers
    (and, on a ``local`` cluster pcqr started, the heartbeat failures of its shutdown).

    Best effort: a cluster that refuses the plugin (say, workers that cannot import pcqr) runs the
    job as before, and such a worker fails the job's first task with its own error anyway.
    """
    install_filter(QuietExpectedErrors)
    try:
        client.register_plugin(QuietExpectedErrorsPlugin())
        if local:  # pcqr owns this cluster and closes it: its shutdown's heartbeat failures are not news
            client.register_plugin(QuietLocalShutdownPlugin())
    except Exception:  # noqa: BLE001 -- cosmetic: never fail a job over its log's tidiness
        logging.getLogger(__name__).debug("worker log filter not installed", exc_info=True)
