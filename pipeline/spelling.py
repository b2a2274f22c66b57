"""How a message spells a parameter: as the command line's option (``--queries-max``) or, for a caller
of the Python API, as the keyword it passed (``queries_max``).

One check serves ``pcqr train`` and ``pcqr.Session.create`` / ``pcqr.PrivateClassifier``; the face the
caller came through decides how its one-line error names the parameter. The Python entry points run
under :func:`python_api` (a context variable: it holds for the call and what it runs in this thread,
not in Dask worker threads, whose errors keep the command line's spelling); everywhere else the
command line's spelling is the default. An error site writes ``spelled("--cutoff")`` for the name and
``spelled_with("--epsilon", "0.5")`` for the name with its value, instead of the literal option.
"""
from __future__ import annotations

import contextlib
import functools
from contextvars import ContextVar
from typing import Any, Callable, Iterator, TypeVar

_PYTHON: ContextVar[bool] = ContextVar("pcqr_python_api", default=False)

#: Options whose keyword is not the option's name with '-' as '_'.
KEYWORDS = {"--learner-param": "learner_params", "--student-learner-param": "student_learner_params"}
#: Flags: a keyword set to True in Python.
FLAGS = frozenset({"--allow-private-overlap", "--insecure-seed", "--wait", "--features-are-public"})

Function = TypeVar("Function", bound=Callable[..., Any])


def speaking_python() -> bool:
    """Whether the running call came through the Python API."""
    return _PYTHON.get()


@contextlib.contextmanager
def python_spelling() -> Iterator[None]:
    """Within the block, messages spell parameters as Python keywords."""
    token = _PYTHON.set(True)
    try:
        yield
    finally:
        _PYTHON.reset(token)


def python_api(function: Function) -> Function:
    """``function`` (an entry point of the Python API) with its messages in Python's spelling."""
    @functools.wraps(function)
    def spoken(*args: Any, **kwargs: Any) -> Any:
        with python_spelling():
            return function(*args, **kwargs)

    return spoken  # type: ignore[return-value]


def keyword(option: str) -> str:
    """The Python keyword of a command-line option: ``--queries-max`` -> ``queries_max``."""
    return KEYWORDS.get(option, option.removeprefix("--").replace("-", "_"))


def spelled(option: str) -> str:
    """``option`` (``--cutoff``, or ``--labels (M)``: an option, then words) as the caller spells it:
    unchanged on the command line; in Python its keyword (``labels (M)``), a flag as
    ``allow_private_overlap=True``. Text that is not an option is returned as it is."""
    name, space, rest = option.partition(" ")
    if not speaking_python() or not name.startswith("--"):
        return option
    return f"{keyword(name)}{'=True' if name in FLAGS else ''}{space}{rest}"


def spelled_with(option: str, value: object) -> str:
    """An option with its value: ``--epsilon 0.5`` on the command line, ``epsilon=0.5`` in Python."""
    return f"{keyword(option)}={value}" if speaking_python() else f"{option} {value}"
