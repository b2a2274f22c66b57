"""``pcqr submit SPEC.yaml --cluster CLUSTER.yaml``: ``pcqr run`` on a cluster that runs elsewhere.

The same job spec as ``pcqr run`` (``job:`` plus the command's options; ``--set KEY=VALUE``
overrides a key), but the cluster is required and must be one pcqr does not start on this
machine: ``backend: address`` (``tcp://`` or ``tls://`` with certificates),
``scheduler-file`` or ``spec``. Before anything is read or started, the scheduler is
contacted once (with the cluster.yaml's certificates and its connect timeout); an
unreachable scheduler is a one-line error naming its address (exit status 2).

The workers read the datasets themselves: every path in the spec must name the same data on
the workers as on this machine (a shared file system, or a URI such as ``s3://...``).
"""
from __future__ import annotations

import asyncio
from typing import Any

import click
import dask.config
from dask.utils import parse_timedelta

from pcqr.jobs import run
from pcqr.jobs.common import json_option, note
from pcqr.pipeline.data.cluster import ClusterConfig, load_cluster_config
from pcqr.pipeline.data.scheduler_file import scheduler_address as scheduler_address_in
from pcqr.pipeline.errors import PcqrError

REMOTE_BACKENDS = ("address", "scheduler-file", "spec")


def _error(config: ClusterConfig, key: str, message: str) -> PcqrError:
    return PcqrError(f"{config.source}: pcqr.cluster.{key}: {message}")


def _security(config: ClusterConfig) -> Any:
    """The Security the client will use: the cluster.yaml's certificates, else dask's own TLS config."""
    from distributed.security import Security

    tls = {k: v for k, v in (config.options.get("tls") or {}).items() if v}
    if not tls:
        return Security()  # distributed.comm.tls.* from the dask config, as Client(security=None) does
    return Security(tls_ca_file=tls.get("ca-file"), tls_client_cert=tls.get("cert"),
                    tls_client_key=tls.get("key"), require_encryption=True)


def scheduler_address(config: ClusterConfig, timeout: float) -> str | None:
    """The scheduler a remote cluster config points at (None for ``spec``: its class starts one).

    A scheduler file is waited for up to ``timeout`` seconds (the scheduler writes it once
    it listens), as the client would.
    """
    if config.backend == "address":
        return str(config.options["address"])
    if config.backend != "scheduler-file":
        return None
    return scheduler_address_in(config.options["scheduler-file"],
                                lambda message: _error(config, "scheduler-file", message), timeout)


async def _identity(address: str, timeout: float, connection_args: dict[str, Any]) -> dict[str, Any]:
    from distributed.comm import connect

    comm = await connect(address, timeout=timeout, **connection_args)
    try:
        await comm.write({"op": "identity", "reply": True})
        return dict(await comm.read())
    finally:
        await comm.close()


def check_scheduler(config: ClusterConfig) -> tuple[str, int] | None:
    """Contact the scheduler of a remote cluster config once: (its address, its worker count).

    Uses the config's certificates and ``distributed.comm.timeouts.connect``; call it with
    the config's dask overlay in effect. ``None`` for the ``spec`` backend, whose cluster
    class starts its own scheduler.

    Raises
    ------
    PcqrError
        One line naming the cluster file, the key and the scheduler's address.
    """
    timeout_text = dask.config.get("distributed.comm.timeouts.connect")
    timeout = float(parse_timedelta(timeout_text))
    address = scheduler_address(config, timeout)
    if address is None:
        return None
    key = "address" if config.backend == "address" else "scheduler-file"
    args = _security(config).get_connection_args("client")
    if address.startswith("tls://") and args.get("ssl_context") is None:
        raise _error(config, key, f"the scheduler at {address} uses TLS but no client certificate is configured "
                                  "(dask's distributed.comm.tls.ca-file and client.cert/key)")
    try:
        reply = asyncio.run(asyncio.wait_for(_identity(address, timeout, args), 2 * timeout))
    except (OSError, TimeoutError, ValueError, TypeError) as exc:  # refused, TLS handshake, bad address
        reason = " ".join((str(exc) or type(exc).__name__).split())
        message = f"cannot reach the scheduler at {address} (timeout {timeout_text}): {reason}"
        raise _error(config, key, message) from None
    if reply.get("type") != "Scheduler":
        raise _error(config, key, f"{address} answered but is not a Dask scheduler ({reply.get('type')!r})")
    return address, len(reply.get("workers") or {})


@click.command("submit")
@click.argument("spec_path", metavar="SPEC.yaml", type=click.Path(dir_okay=False))
@click.option("--cluster", required=True, type=click.Path(dir_okay=False), metavar="CLUSTER.yaml",
              help="cluster.yaml of the cluster to run on: backend address, scheduler-file or spec (required).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a key of the spec.")
@json_option
def command(spec_path: str, cluster: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Run a job spec (as `pcqr run`) on an existing or external Dask cluster.

    \b
    SPEC.yaml: a `pcqr run` spec, `job:` plus the command's options
    (jobs/examples/answer.yaml; its files are public or private as that
    command's --help says). CLUSTER.yaml must choose a cluster that is not
    started on this machine by pcqr:
      backend: address          a running scheduler, tcp://HOST:PORT, or tls://HOST:PORT
                                with tls: {ca-file, cert, key} (client certificate)
      backend: scheduler-file   the file `dask scheduler --scheduler-file F` writes
      backend: spec             a Cluster class (e.g. dask_jobqueue.SLURMCluster)
    For address and scheduler-file the scheduler is contacted first, with the
    certificates and the connect timeout of CLUSTER.yaml: if it cannot be reached
    the command stops with one line naming its address, before reading any data.
    The workers read the datasets themselves, so every path in the spec must reach
    the same data from the workers (a shared folder or a URI). For a local cluster
    use `pcqr run`.
    """
    job, args = run.job_arguments(spec_path, overrides, cluster, as_json)  # the spec is checked first
    config = load_cluster_config(cluster)
    if config.backend not in REMOTE_BACKENDS:
        raise _error(config, "backend", "pcqr submit runs on an existing or external cluster: choose address, "
                     f"scheduler-file or spec, got {config.backend!r} (use pcqr run for a local cluster)")
    with dask.config.set(config.dask_config):
        reached = check_scheduler(config)
    if reached is not None:
        address, workers = reached
        note(f"scheduler {address}: reachable, {workers} worker{'s' if workers != 1 else ''}"
             + ("" if workers else " (tasks wait until one joins)"))
    job.main(args=args, prog_name=f"pcqr {job.name}", standalone_mode=False)
