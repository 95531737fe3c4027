"""Custom graders for the ``tool`` family: the ``@grader`` decorator and how references load.

A custom grader is a plain function ``fn(run, submission)`` (optionally with a third parameter
``ground_truth``) decorated with :func:`grader`. A config names it as ``package.module:callable``,
``path/to/file.py:callable``, or by a bare name: the name it was registered under by ``@grader``
in an already imported module, or an entry point of the group ``otel_tooleval.graders`` in an
installed package. A plugin that fails to load is logged once and skipped; it never crashes
the application.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import logging
import re
import sys
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, overload

from ..model import AgentRun

__all__ = [
    "ENTRY_POINT_GROUP",
    "CustomGrader",
    "grader",
    "load_reference",
    "plugin_graders",
    "registered_grader",
]

ENTRY_POINT_GROUP = "otel_tooleval.graders"

_log = logging.getLogger(__name__)

class CustomGrader:
    """A function decorated with :func:`grader`; calling it calls the function.

    ``takes_ground_truth`` is True when the function declares a ``ground_truth`` parameter (or
    ``**kwargs``): the grader then passes the run's ground truth (possibly None) by keyword.
    """

    __name__: str
    __wrapped__: Callable[..., Any]

    def __init__(self, function: Callable[..., Any], name: str) -> None:
        self.function = function
        self.name = name
        self.takes_ground_truth = _check_signature(function)
        functools.update_wrapper(self, function)

    @property
    def qualified_name(self) -> str:
        """``module:qualname`` of the wrapped function, to tell two registrations apart."""
        module = getattr(self.function, "__module__", "?")
        return f"{module}:{getattr(self.function, '__qualname__', self.name)}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<custom grader {self.name!r} ({self.qualified_name})>"

    def run(self, run: AgentRun, submission: str | None, ground_truth: str | None) -> Any:
        """Call the function with the arguments it declares."""
        if self.takes_ground_truth:
            return self.function(run, submission, ground_truth=ground_truth)
        return self.function(run, submission)


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _check_signature(function: Callable[..., Any]) -> bool:
    """Reject what could never be called as ``fn(run, submission[, ground_truth=...])``."""
    label = getattr(function, "__qualname__", repr(function))
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        raise TypeError(f"custom grader {label} must be a plain function; async graders are "
                        "not supported (grading runs off the application's event loop)")
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError) as exc:
        raise TypeError(f"custom grader {label}: cannot read its signature ({exc})") from None
    kinds = {p.kind for p in params}
    takes_kwargs = inspect.Parameter.VAR_KEYWORD in kinds
    gt = next((p for p in params if p.name == "ground_truth"), None)
    if gt is not None and gt.kind is inspect.Parameter.POSITIONAL_ONLY:
        raise TypeError(f"custom grader {label}: 'ground_truth' must not be positional-only")
    positional = [p for p in params if p.kind in _POSITIONAL and p is not gt]
    if len(positional) < 2 and inspect.Parameter.VAR_POSITIONAL not in kinds:
        raise TypeError(f"custom grader {label} must accept (run, submission), "
                        f"it takes {len(positional)} positional parameter(s)")
    required = [p.name for p in positional[2:] if p.default is inspect.Parameter.empty]
    required += [p.name for p in params
                 if p.kind is inspect.Parameter.KEYWORD_ONLY and p is not gt
                 and p.default is inspect.Parameter.empty]
    if required:
        raise TypeError(f"custom grader {label}: unexpected required parameter(s) "
                        f"{', '.join(required)}; the signature is (run, submission) with an "
                        "optional ground_truth")
    return gt is not None or takes_kwargs


# Bare names registered by @grader: name -> grader; names claimed by two different functions
# are remembered so a bare reference to them is refused instead of picking one.
_REGISTERED: dict[str, CustomGrader] = {}
_AMBIGUOUS: dict[str, set[str]] = {}
_LOCK = threading.Lock()


@overload
def grader(function: Callable[..., Any], /) -> CustomGrader: ...


@overload
def grader(*, name: str | None = None) -> Callable[[Callable[..., Any]], CustomGrader]: ...


def grader(function: Callable[..., Any] | None = None, /, *, name: str | None = None,
           ) -> CustomGrader | Callable[[Callable[..., Any]], CustomGrader]:
    """Mark ``function(run, submission[, ground_truth])`` as a custom grader.

    It returns an ``otel_tooleval.GradeResult``, a float in [0, 1] or a bool. The
    function is also registered under ``name`` (default: its ``__name__``) so a config can name
    it bare once its module is imported.

    Raises:
        TypeError: the function could never be called as a grader.
    """

    def decorate(fn: Callable[..., Any]) -> CustomGrader:
        wrapped = CustomGrader(fn, name or str(getattr(fn, "__name__", "grader")))
        _remember(wrapped)
        return wrapped

    return decorate(function) if function is not None else decorate


def _remember(wrapped: CustomGrader) -> None:
    with _LOCK:
        known = _REGISTERED.get(wrapped.name)
        if known is not None and known.qualified_name != wrapped.qualified_name:
            _AMBIGUOUS.setdefault(wrapped.name, {known.qualified_name}).add(
                wrapped.qualified_name)
        _REGISTERED[wrapped.name] = wrapped


def registered_grader(name: str) -> CustomGrader | None:
    """The grader a bare ``function:`` name refers to, or None when nothing claims it.

    Looks at ``@grader`` registrations first, then at installed plugins.

    Raises:
        ValueError: the name is claimed by two different functions, or names a plugin that
            failed to load.
    """
    with _LOCK:
        ambiguous = sorted(_AMBIGUOUS.get(name, ()))
        found = _REGISTERED.get(name)
    if ambiguous:
        raise ValueError(f"custom grader name {name!r} is registered by several functions "
                         f"({', '.join(ambiguous)}); name one as 'package.module:callable'")
    if found is not None:
        return found
    plugins, broken = _discover()
    if name in broken:
        raise ValueError(f"the installed grader plugin {name!r} failed to load ({broken[name]}); "
                         "see the log")
    return plugins.get(name)


def plugin_graders() -> dict[str, CustomGrader]:
    """The graders installed packages declare in the entry-point group, loaded once."""
    return dict(_discover()[0])


_DISCOVERY_LOCK = threading.Lock()
_discovered: tuple[dict[str, CustomGrader], dict[str, str]] | None = None


def _discover() -> tuple[dict[str, CustomGrader], dict[str, str]]:
    global _discovered
    with _DISCOVERY_LOCK:
        if _discovered is None:
            _discovered = _load_plugins()
        return _discovered


def _forget_plugins() -> None:
    """Drop the discovered plugins so the next lookup scans again (tests, after installs)."""
    global _discovered
    with _DISCOVERY_LOCK:
        _discovered = None


def _load_plugins() -> tuple[dict[str, CustomGrader], dict[str, str]]:
    loaded: dict[str, CustomGrader] = {}
    broken: dict[str, str] = {}
    try:
        points = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as exc:  # noqa: BLE001  (a broken distribution must not stop the app)
        _log.warning("cannot list %s entry points: %s", ENTRY_POINT_GROUP, exc)
        return loaded, broken
    for point in points:
        try:
            obj = point.load()
            if not isinstance(obj, CustomGrader):
                raise TypeError(f"{point.value} is not decorated with @grader")
        except Exception as exc:  # noqa: BLE001  (a broken plugin is logged once and skipped)
            reason = f"{type(exc).__name__}: {exc}"
            broken[point.name] = reason
            _log.warning("skipping grader plugin %r (%s): %s", point.name, point.value, reason)
            continue
        loaded[point.name] = obj
    return loaded, broken


_ATTR_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_FILE_MODULES: dict[Path, ModuleType] = {}


def load_reference(reference: str, base_dir: Path | None = None) -> CustomGrader:
    """Load ``package.module:callable`` or ``path/to/file.py:callable``.

    A relative file path is read from ``base_dir`` (the config file's directory) when given,
    else from the working directory.

    Raises:
        ValueError: the reference is malformed, the module cannot be imported or lacks the
            attribute.
        TypeError: the attribute is not decorated with @grader.
    """
    obj = resolve_reference(reference, base_dir, "is not a custom grader reference: expected "
                            "'package.module:callable' or 'path/to/file.py:callable'")
    if not isinstance(obj, CustomGrader):
        raise TypeError(f"{reference!r} is not decorated with @grader "
                         "(from otel_tooleval.graders.custom import grader)")
    return obj


def resolve_reference(reference: str, base_dir: Path | None, malformed: str) -> Any:
    """The object ``package.module:attr`` or ``path/to/file.py:attr`` names (a relative file
    read from ``base_dir``).

    Raises:
        ValueError: ``reference!r`` followed by ``malformed`` when it is not such a reference;
            the module cannot be imported or lacks the attribute.
    """
    target, _, attr = reference.rpartition(":")
    if not target or not _ATTR_PATH.match(attr):
        raise ValueError(f"{reference!r} {malformed}")
    if target.endswith(".py"):
        path = Path(target).expanduser()
        module = _import_file(base_dir / path if base_dir is not None else path)
    else:
        module = _import_module(target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{target!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _import_module(name: str) -> ModuleType:
    if not _ATTR_PATH.match(name):
        raise ValueError(f"{name!r} is not a module name")
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001  (any failure importing user code: config problem)
        raise ValueError(f"cannot import module {name!r}: {type(exc).__name__}: {exc}") from None


def _import_file(path: Path) -> ModuleType:
    resolved = path.resolve()
    with _LOCK:
        cached = _FILE_MODULES.get(resolved)
    if cached is not None:
        return cached
    if not resolved.is_file():
        raise ValueError(f"custom grader file {str(path)!r} does not exist "
                         f"(looked at {resolved})")
    digest = hashlib.sha1(str(resolved).encode(), usedforsecurity=False).hexdigest()[:12]
    stem = re.sub(r"\W", "_", resolved.stem)
    module_name = f"_otel_tooleval_custom_{stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module     # dataclasses and pickling look the module up here
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001  (any failure running user code: config problem)
        sys.modules.pop(module_name, None)
        raise ValueError(f"cannot import {str(path)!r}: {type(exc).__name__}: {exc}") from None
    with _LOCK:
        module = _FILE_MODULES.setdefault(resolved, module)
    return module
