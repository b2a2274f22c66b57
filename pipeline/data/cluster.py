"""cluster.yaml -> a Dask Client.

``cluster.yaml`` is an ordinary dask config file: dask's own keys (e.g.
``distributed: {comm: {timeouts: {connect: 10s}}}``) are applied through
:mod:`dask.config` while the client is open. pcqr's keys live under ``pcqr: cluster:``;
``backend`` picks one of four ways to get a cluster, each with its own keys::

    pcqr:
      cluster:
        backend: local        # default: LocalCluster on 127.0.0.1 only; n-workers,
        n-workers: 2          # threads-per-worker, memory-limit, processes and
        memory-limit: 4GiB    # dashboard-address (null: none; ":0": a free port on 127.0.0.1)
    # backend: address          address: tls://host:8786, tls: {ca-file, cert, key}
    # backend: scheduler-file   scheduler-file: scheduler.json
    # backend: spec             class: dask_jobqueue.SLURMCluster, kwargs: {...},
    #                           scale: 4  or  adapt: {minimum: 0, maximum: 20}

Every key and its default is in ``cluster-defaults.yaml`` beside this module.
Precedence, lowest first: those defaults, dask's own config files, the cluster.yaml,
``DASK_*`` environment variables (``DASK_PCQR__CLUSTER__BACKEND=address``). Relative
paths (tls files, scheduler-file) resolve against the cluster.yaml's folder. Which
file: ``--cluster PATH``; else ``./cluster.yaml`` if present; else only the defaults.

The same file says which modules ``--learner`` may name beyond scikit-learn and pcqr's own
(``pcqr: learners: allow: [xgboost.]``, read by :func:`learner_modules`).
"""
from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, Protocol

import dask.config
from dask.utils import parse_bytes, parse_timedelta
from distributed import Client, LocalCluster
from distributed.deploy.cluster import Cluster
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.security import Security

from pcqr.pipeline.data import object_store
from pcqr.pipeline.data.private_folder import PrivateFolder
from pcqr.pipeline.data.scheduler_file import scheduler_address
from pcqr.pipeline.data.user_files import CONFIG_LIMIT, read_yaml
from pcqr.pipeline.errors import PcqrError
from pcqr.pipeline.data.worker_errors import quiet_expected_errors

BACKENDS = ("local", "address", "scheduler-file", "spec")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\.?")
_DEFAULTS = read_yaml(Path(__file__).with_name("cluster-defaults.yaml"), "pcqr's cluster defaults", CONFIG_LIMIT)
dask.config.update_defaults(_DEFAULTS)
_BACKEND_KEYS = {
    "local": ("n-workers", "threads-per-worker", "memory-limit", "dashboard-address", "processes"),
    "address": ("address", "tls"),
    "scheduler-file": ("scheduler-file",),
    "spec": ("class", "kwargs", "scale", "adapt"),
}
_NONE, _WHOLE, _SIZE = type(None), "a whole number >= 0 or null", "a size (4GiB), a fraction of RAM, auto or null"
_TYPES: dict[str, tuple[tuple[type, ...], str, int | None]] = {  # key: (types, description, minimum)
    "backend": ((str,), "a backend name", None),
    "n-workers": ((int, _NONE), "a whole number >= 1 or null", 1),  # 0: nothing would ever run
    "threads-per-worker": ((int, _NONE), "a whole number >= 1 or null", 1),
    "memory-limit": ((str, int, float, _NONE), _SIZE, 0),
    "dashboard-address": ((str, int, _NONE), "null or a port on 127.0.0.1 (':0', ':8787')", None),
    "processes": ((bool, str), "true, false or auto", None),
    "address": ((str, _NONE), "tcp://HOST:PORT or tls://HOST:PORT", None),
    "tls": ((dict, _NONE), "a mapping {ca-file, cert, key} of file paths", None),
    "scheduler-file": ((str, _NONE), "a file path", None),
    "class": ((str, _NONE), "a dotted class name (dask_jobqueue.SLURMCluster)", None),
    "kwargs": ((dict, _NONE), "a mapping of keyword arguments", None),
    "scale": ((int, _NONE), _WHOLE, 0),
    "adapt": ((dict, _NONE), "a mapping {minimum, maximum}", None),
}


@dataclass(frozen=True)
class ClusterConfig:
    """A validated cluster choice: source file (None: built-in), backend, its options, dask overlay."""

    source: Path | None
    backend: str
    options: dict[str, Any]
    dask_config: dict[str, Any] = field(default_factory=dict)


class _Where:
    """Builds one-line errors naming the file and the key (and the env variable, if any)."""

    def __init__(self, source: Path | None, env: Mapping[str, Any]) -> None:
        self.label = str(source) if source is not None else "built-in cluster defaults"
        self.env = env

    def error(self, key: str, message: str) -> PcqrError:
        full = f"pcqr.cluster.{key}"
        if dask.config.get(full, default=None, config=dict(self.env)) is not None:
            full += f" (from DASK_{full.upper().replace('.', '__').replace('-', '_')})"
        return PcqrError(f"{self.label}: {full}: {message}")

    def expect(self, key: str, value: Any, types: tuple[type, ...], what: str, minimum: int | None = None) -> Any:
        too_small = isinstance(value, (int, float)) and minimum is not None and value < minimum
        if too_small or not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise self.error(key, f"expected {what}, got {value!r}")
        return value


def _read_file(path: Path) -> dict[str, Any]:
    data = read_yaml(path, "--cluster", CONFIG_LIMIT) or {}
    if not isinstance(data, dict):
        raise PcqrError(f"{path}: (top level): expected a mapping of config keys, got {data!r}")
    if isinstance(data.get("pcqr"), dict) and data["pcqr"].get("cluster", {}) is None:
        del data["pcqr"]["cluster"]  # every key under `cluster:` commented out
    return data


def _check_local(where: _Where, o: dict[str, Any], base: Path) -> None:
    try:
        _ = parse_bytes(o["memory-limit"]) if o["memory-limit"] not in ("auto", None) else 0
    except (ValueError, TypeError):
        raise where.error("memory-limit", f"expected {_SIZE}, got {o['memory-limit']!r}") from None
    if o["dashboard-address"] in (None, "auto"):
        return _check_processes(where, o)
    host, _, port = str(o["dashboard-address"]).rpartition(":")
    if host not in ("", "127.0.0.1", "localhost") or not port.isdigit() or int(port) > 65535:
        raise where.error("dashboard-address", f"expected {_TYPES['dashboard-address'][1]}, got {o['dashboard-address']!r}")
    o["dashboard-address"] = f"127.0.0.1:{int(port)}"  # never another interface
    _check_processes(where, o)


def _check_processes(where: _Where, o: dict[str, Any]) -> None:
    if isinstance(o["processes"], str) and o["processes"] != "auto":
        raise where.error("processes", f"expected {_TYPES['processes'][1]}, got {o['processes']!r}")


def _check_address(where: _Where, o: dict[str, Any], base: Path) -> None:
    address = o["address"]
    if not address or not address.startswith(("tcp://", "tls://")):
        raise where.error("address", f"backend 'address' needs {_TYPES['address'][1]}, got {address!r}")
    o["tls"] = tls = dict(o["tls"] or {})
    for key, value in tls.items():
        if key not in _DEFAULTS["pcqr"]["cluster"]["tls"]:
            raise where.error(f"tls.{key}", "unknown key (choose ca-file, cert or key)")
        if where.expect(f"tls.{key}", value, (str, _NONE), "a file path") is not None:
            tls[key] = str(base / os.path.expanduser(value))
            if not Path(tls[key]).is_file():
                raise where.error(f"tls.{key}", f"no such file {tls[key]!r}")
    if any(tls.values()) and not (address.startswith("tls://") and tls.get("ca-file") and tls.get("cert")):
        raise where.error("tls", "needs a tls:// address and both ca-file and cert")


def _check_scheduler_file(where: _Where, o: dict[str, Any], base: Path) -> None:
    if not o["scheduler-file"]:
        raise where.error("scheduler-file", "backend 'scheduler-file' needs the path of a scheduler file")
    o["scheduler-file"] = str(base / os.path.expanduser(o["scheduler-file"]))


def _check_spec(where: _Where, o: dict[str, Any], base: Path) -> None:
    module, _, attr = (o["class"] or "").rpartition(".")
    if not module:
        raise where.error("class", f"backend 'spec' needs {_TYPES['class'][1]}, got {o['class']!r}")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise where.error("class", f"cannot import {o['class']!r}: {exc} (is its package installed?)") from None
    if not (isinstance(cls, type) and issubclass(cls, Cluster)):
        raise where.error("class", f"{o['class']!r} is not a distributed Cluster class")
    if o["adapt"] is not None and o["scale"] is not None:
        raise where.error("adapt", "give either scale or adapt, not both")
    for key in ("kwargs", "adapt"):  # Python keyword arguments: cores, n_workers, ...
        o[key] = None if o[key] is None else {str(k).replace("-", "_"): v for k, v in o[key].items()}
    for key in ("minimum", "maximum") if o["adapt"] else ():
        where.expect(f"adapt.{key}", o["adapt"].get(key, 0), (int,), "a whole number >= 0", 0)


_CHECKS = {"local": _check_local, "address": _check_address,
           "scheduler-file": _check_scheduler_file, "spec": _check_spec}


def _pcqr_options(merged: dict[str, Any], where: _Where) -> dict[str, Any]:
    raw = merged.get("pcqr")
    raw = raw.get("cluster") if isinstance(raw, dict) else raw
    if not isinstance(raw, dict):
        raise PcqrError(f"{where.label}: pcqr.cluster: expected a mapping, got {raw!r}")
    options = {str(k).replace("_", "-"): v for k, v in raw.items()}
    for key in options.keys() - _TYPES.keys():
        raise where.error(key, f"unknown key (known: {', '.join(_TYPES)})")
    return options


def _sources(cluster_path: str | None) -> tuple[Path | None, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Which file (None: built-in defaults), its keys, the DASK_* environment's, and all merged."""
    candidate = Path(cluster_path if cluster_path is not None else "cluster.yaml")
    source: Path | None = candidate if cluster_path is not None or os.path.lexists(candidate) else None
    data = _read_file(source) if source is not None else {}
    env = dask.config.collect_env()
    merged = dask.config.merge(dask.config.config, data, env)  # environment wins over the file
    return source, data, env, merged


def cluster_ledger(cluster_path: str | None) -> tuple[str, str] | None:
    """The ledger the cluster's config names (``pcqr: ledger:`` in the cluster.yaml, or
    DASK_PCQR__LEDGER): a team's ``postgresql://`` URL, so that every analyst who uses the cluster
    charges one budget. Returns the value and where it was read (``FILE: pcqr.ledger`` or
    ``DASK_PCQR__LEDGER``), for the ledger's own checks to name (pcqr.pipeline.budget.location,
    a layer above this one); None if it names none. A value that is not a non-empty string is
    refused here, by its type only: it could hold a password."""
    source, data, env, _ = _sources(cluster_path)
    value = dask.config.get("pcqr.ledger", None, config=dask.config.merge(data, env))
    if value is None:
        return None
    origin = "DASK_PCQR__LEDGER" if "ledger" in (env.get("pcqr") or {}) else f"{source}: pcqr.ledger"
    if not isinstance(value, str) or not value.strip():
        got = "an empty string" if isinstance(value, str) else f"a {type(value).__name__}"
        raise PcqrError(f"{origin}: expected a ledger file's path or a postgresql:// URL, got {got}")
    return value, origin


def cluster_ledger_timeouts(cluster_path: str | None) -> tuple[Any, str] | None:
    """The server ledger's time limits the cluster's config sets (``pcqr: ledger-timeouts:`` in the
    cluster.yaml, or DASK_PCQR__LEDGER_TIMEOUTS__*), with where they were read, for the ledger's
    own check (pcqr.pipeline.budget.timeouts); None if it sets none."""
    source, data, env, _ = _sources(cluster_path)
    value = dask.config.get("pcqr.ledger-timeouts", None, config=dask.config.merge(data, env))
    if value is None:
        return None
    from_env = any(k.replace("_", "-") == "ledger-timeouts" for k in (env.get("pcqr") or {}))
    return value, "DASK_PCQR__LEDGER_TIMEOUTS" if from_env else f"{source}: pcqr.ledger-timeouts"


def learner_modules(cluster_path: str | None) -> tuple[str, ...]:
    """The module prefixes the operator allows ``--learner`` to name beyond sklearn. and pipeline.
    (``pcqr: learners: allow: [xgboost.]``; ``xgboost.`` or ``xgboost``: the package and its modules).

    Raises
    ------
    PcqrError
        One line naming the file and ``pcqr.learners.allow`` when it is not a list of module names.
    """
    source, _, env, merged = _sources(cluster_path)
    label = str(source) if source is not None else "built-in cluster defaults"
    pcqr = merged.get("pcqr")
    learners = pcqr.get("learners") if isinstance(pcqr, dict) else None
    if learners is None:
        return ()
    if not isinstance(learners, dict) or set(learners) - {"allow"}:
        raise PcqrError(f"{label}: pcqr.learners: expected a mapping with the one key allow, got {learners!r}")
    allow = learners.get("allow") or []
    valid = isinstance(allow, list) and all(isinstance(p, str) and _MODULE.fullmatch(p) for p in allow)
    if not valid:
        from_env = " (from DASK_PCQR__LEARNERS__ALLOW)" if "learners" in (env.get("pcqr") or {}) else ""
        raise PcqrError(f"{label}: pcqr.learners.allow{from_env}: expected a list of module names "
                        f"such as [xgboost., mylab.learners], got {allow!r}")
    return tuple(allow)


def load_cluster_config(cluster_path: str | None) -> ClusterConfig:
    """Resolve and validate the cluster configuration without starting anything.

    Parameters
    ----------
    cluster_path : str or None
        The ``--cluster`` file (must exist). ``None``: ``./cluster.yaml`` if present,
        else the built-in defaults.

    Returns
    -------
    ClusterConfig
        The source file (or None), the backend, its options (paths made absolute)
        and the dask config overlay (file, then environment) to apply.

    Raises
    ------
    PcqrError
        One line naming the file and the key at fault.
    """
    source, data, env, merged = _sources(cluster_path)
    _configure_storage(source, data)
    overlay = {key: merged[dask.config.canonical_name(key, merged)] for key in {*data, *env}}
    where = _Where(source, env)
    options = _pcqr_options(merged, where)
    backend = where.expect("backend", options["backend"], *_TYPES["backend"])
    if backend not in BACKENDS:
        raise where.error("backend", f"unknown backend {backend!r} "
                                     "(choose local, address, scheduler-file or spec)")
    if not any(dask.config.get("pcqr.cluster.backend", None, config=c) for c in (data, env)):
        for name, (key, *_) in _BACKEND_KEYS.items():
            if name != "local" and options[key] is not None:
                raise where.error(key, f"is set but no backend is chosen (default: local); add backend: {name}")
    opts = {key: where.expect(key, options[key], *_TYPES[key]) for key in _BACKEND_KEYS[backend]}
    _CHECKS[backend](where, opts, (source.parent if source is not None else Path()).absolute())
    dask_tls = all(dask.config.get(f"distributed.comm.tls.{k}", None, config=merged)
                   for k in ("ca-file", "client.cert"))
    if backend == "address" and opts["address"].startswith("tls://") and not any(opts["tls"].values()) and not dask_tls:
        raise where.error("tls", "a tls:// address needs the client's certificates: "
                                 "tls: {ca-file, cert, key} (or dask's distributed.comm.tls keys)")
    return ClusterConfig(source, backend, opts, overlay)


def _configure_storage(source: Path | None, data: dict[str, Any]) -> None:
    """The S3 settings for this command: the AWS variables, else the file's ``pcqr: storage:`` keys, and
    the file's ``connect-timeout`` and ``request-timeout`` (:func:`pcqr.pipeline.data.object_store.settings_from`)."""
    pcqr = data.get("pcqr")
    keys = pcqr.get("storage") if isinstance(pcqr, dict) else None
    object_store.configure(object_store.from_file(os.environ, keys, str(source)))


class StorageSettings(WorkerPlugin):
    """Gives each worker the driver's S3 settings (:mod:`pcqr.pipeline.data.object_store`), so that
    workers on other hosts read and write the bucket as the driver does. The settings travel over
    the client's connection to the scheduler, as the tasks' data do: use ``tls:`` across hosts."""

    name = "pcqr-storage-settings"

    def __init__(self, settings: object_store.S3Settings) -> None:
        self.settings = settings

    def setup(self, worker: Any) -> None:
        object_store.configure(self.settings)


def _connect(config: ClusterConfig, stack: ExitStack, key: str, **kwargs: Any) -> Client:
    """Client(address=...) (a scheduler file's address read by pcqr), failing within the connect timeout."""
    where = _Where(config.source, dask.config.collect_env())
    timeout = dask.config.get("distributed.comm.timeouts.connect")
    if key == "scheduler-file":  # the scheduler may not have written it yet (Client would wait forever)
        kwargs["address"] = scheduler_address(kwargs.pop("scheduler_file"), lambda message: where.error(key, message),
                                              parse_timedelta(timeout))
    try:
        return stack.enter_context(Client(**kwargs))
    except (OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise where.error(key, f"cannot reach the scheduler (timeout {timeout}): {reason}") from None
    except TypeError as exc:  # distributed: "TLS expects a `ssl_context` argument" (tls://, no certificates)
        if "ssl_context" not in str(exc):
            raise
        raise where.error(key, "the scheduler uses TLS but no client certificate is configured "
                               "(dask's distributed.comm.tls.ca-file and client.cert/key)") from None


class Connect(Protocol):
    """How the library gets a Dask client when it first needs one (``with connect() as client``):
    the command line's :func:`pcqr.jobs.common.connect_to`, or a :class:`pcqr.Session`'s own."""

    def __call__(self, array_work: bool = False) -> ContextManager[Any]: ...


def local_processes(setting: bool | str, array_work: bool) -> bool:
    """Whether a local cluster's workers are processes. ``auto`` (the default): threads of this
    process when the command's worker tasks are array work that releases the GIL (answering with
    stump or linear models: reading Parquet, one matrix product, hashing), which then starts in
    0.4 s instead of 0.9 s and hands results over without serialising them; processes otherwise
    (training, or models that vote one ``predict`` at a time in Python), so the workers run in
    parallel and each is held to its memory limit."""
    return setting if isinstance(setting, bool) else not array_work


def one_blas_thread() -> ContextManager[Any]:
    """One BLAS thread in this process while a local cluster's workers are its threads: Dask's nanny
    sets OMP/MKL/OPENBLAS_NUM_THREADS=1 for worker processes (distributed.nanny.pre-spawn-environ),
    but worker threads share this process's pool, and each of their matrix products (the linear
    votes) would start BLAS threads of its own on the same cores: 27% more CPU for the same votes
    in benchmarks/answer_logistic."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def local_dashboard(setting: str | None) -> str | None:
    """A local cluster's dashboard address (127.0.0.1:PORT), or None: a dashboard only when the
    cluster.yaml asks for one with a port (":0", a free one; ":8787"), and pcqr then prints its
    address. null (the default) and ``auto`` (a value of older files): none, and no line (its start
    was ~0.4 s of a 10^6-query answer run)."""
    return None if setting in (None, "auto") else setting


#: How much of its past a local cluster keeps (the scheduler's transitions and computations, each
#: worker's events): Dask's defaults (1,000 and 100) hold every task's arguments and events until the
#: logs fill, so a driver whose workers are threads grew by about 93 objects a log batch to 10^8
#: queries (1,000 batches; issue 32's flat-memory aim). A local cluster lives for one command.
LOCAL_HISTORY = {"distributed.admin.low-level-log-length": 100, "distributed.diagnostics.computations.max-history": 10}


def _start(config: ClusterConfig, stack: ExitStack, array_work: bool = False) -> tuple[Client, bool]:
    """(the client, whether the cluster.yaml asked for a dashboard: a local cluster's started there)."""
    o = config.options
    if config.backend == "local":  # tcp even without processes: inproc binds workers' HTTP to all interfaces
        processes = local_processes(o["processes"], array_work)
        dashboard = local_dashboard(o["dashboard-address"])
        if not processes:  # worker threads x BLAS threads would oversubscribe the cores
            stack.enter_context(one_blas_thread())
        # the scheduler's and workers' scratch (spilled data: private rows) in a 0700 folder, removed
        # after the cluster
        scratch = stack.enter_context(PrivateFolder())
        stack.enter_context(dask.config.set({"temporary-directory": scratch.path, **LOCAL_HISTORY}))
        cluster = stack.enter_context(LocalCluster(
            host="127.0.0.1", protocol="tcp://", n_workers=o["n-workers"], processes=processes,
            local_directory=scratch.path,
            threads_per_worker=o["threads-per-worker"], memory_limit=o["memory-limit"],
            # without a dashboard the scheduler's HTTP endpoints still take a free port, not 8787
            dashboard_address=dashboard or "127.0.0.1:0", scheduler_kwargs={} if dashboard else {"dashboard": False}))
        return stack.enter_context(Client(cluster)), dashboard is not None
    if config.backend == "address":
        tls = {k: v for k, v in (o["tls"] or {}).items() if v}
        security = Security(tls_ca_file=tls.get("ca-file"), tls_client_cert=tls.get("cert"),
                            tls_client_key=tls.get("key"), require_encryption=True) if tls else None
        return _connect(config, stack, "address", address=o["address"], security=security), False
    if config.backend == "scheduler-file":
        return _connect(config, stack, "scheduler-file", scheduler_file=o["scheduler-file"]), False
    module, _, attr = o["class"].rpartition(".")
    cluster = stack.enter_context(getattr(importlib.import_module(module), attr)(**(o["kwargs"] or {})))
    if o["adapt"] is not None:
        cluster.adapt(**o["adapt"])
    elif o["scale"] is not None:
        cluster.scale(o["scale"])
    return stack.enter_context(Client(cluster)), False


def _wait_for_workers(config: ClusterConfig, client: Client) -> None:
    """A job on a cluster with no worker fails in one line instead of waiting forever: at most
    ``distributed.scheduler.no-workers-timeout`` for the first worker (an adaptive cluster starts
    its workers on demand: there the scheduler's own timeout, the same key, fails the task)."""
    timeout = dask.config.get("distributed.scheduler.no-workers-timeout", None)
    if timeout is None or config.options.get("adapt") is not None:
        return
    try:
        client.wait_for_workers(1, timeout=parse_timedelta(timeout))
    except TimeoutError:
        key = {"address": "address", "scheduler-file": "scheduler-file", "spec": "scale"}.get(config.backend, "n-workers")
        raise _Where(config.source, dask.config.collect_env()).error(
            key, f"no Dask worker joined the scheduler within {timeout} (distributed.scheduler.no-workers-timeout): "
                 "start workers for it (dask worker ADDRESS), or set a longer timeout in the cluster.yaml") from None


@contextmanager
def open_client(cluster_path: str | None, echo: Callable[[str], None] | None = None,
                array_work: bool = False) -> Iterator[Client]:
    """Open the Dask client that the cluster configuration describes.

    Parameters
    ----------
    cluster_path : str or None
        The ``--cluster`` file; ``None``: ``./cluster.yaml`` if present, else built-in local.
    echo : callable, optional
        Called once with ``"dashboard: <link>"`` when the cluster.yaml asked for a dashboard (a local
        cluster's ``dashboard-address`` set to a port); otherwise never (a remote scheduler's own
        dashboard is its operator's to share).
    array_work : bool
        The command's worker tasks are array work only (see :func:`local_processes`): with
        ``processes: auto`` a local cluster's workers are then threads.

    Yields
    ------
    distributed.Client
        Connected client; the dask config from the file is in effect until exit,
        when the client and any cluster started here are closed.

    Raises
    ------
    PcqrError
        Bad configuration (checked before anything starts), an unreachable scheduler, or no worker
        within ``distributed.scheduler.no-workers-timeout``.
    """
    config = load_cluster_config(cluster_path)
    with dask.config.set(config.dask_config), ExitStack() as stack:
        client, asked = _start(config, stack, array_work)
        # a worker's PcqrError: pcqr's one line, no "Compute Failed" block (nor, on the local cluster it
        # closes, its workers' heartbeat failures at shutdown)
        quiet_expected_errors(client, local=config.backend == "local")
        if object_store.current() != object_store.S3Settings():  # an AWS key or a timeout set
            client.register_plugin(StorageSettings(object_store.current()))
        _wait_for_workers(config, client)
        if echo is not None and asked:
            link = None
            with suppress(KeyError):  # no HTTP server after all
                link = client.dashboard_link
            echo(f"dashboard: {link or 'unavailable'}")
        yield client


def _identity(value: Any) -> Any:
    return value


def hold(client: Any, value: Any) -> Any:
    """A driver-made value on the cluster as a task result: unlike ``client.scatter``, Dask can
    recompute it (from the task's own arguments) if every worker holding it dies."""
    return client.submit(_identity, value, pure=False)
