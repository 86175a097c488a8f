"""The library's log messages, into Python's :mod:`logging`.

Messages go to the logger ``tether`` and its children by category:
``tether.http`` (requests: each one at DEBUG, retries and backoff at INFO,
failures at WARNING), ``tether.sync`` (fetches and refreshes), ``tether.store``
(the store opened, SQL statements slower than 100 ms), ``tether.save`` (each
save's counts), ``tether.migration`` (models built, tables changed) and
``tether.context`` (contexts opened, online or offline). No message holds a
credential; record values appear at DEBUG only.

The library's hook (tether_log_set) is process-wide and costs one atomic load
per message it does not want, so its level follows what Python wants: the
lowest effective level of ``tether`` and its category loggers (and
``logging.disable``). It is installed when :mod:`tether` is imported, with
the levels then in force; Python's logging says nothing when a level changes,
so after changing one call :func:`log_to_python` (or set the level with
:func:`set_log_level`, which does both). :func:`stop_logging` removes the hook
(nothing is then built at all). At interpreter exit the hook is removed, so a
library thread still running never calls into a finalizing interpreter.

As Python's documentation asks of libraries, ``tether`` has a NullHandler:
what reaches a handler is what the application configures (e.g.
``logging.basicConfig(level=logging.INFO)``).
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Dict, Optional, Union

from . import _lib

LOGGER_NAME = "tether"
CATEGORIES = ("http", "sync", "store", "save", "migration", "context")

logger = logging.getLogger(LOGGER_NAME)
logger.addHandler(logging.NullHandler())

_TO_PYTHON = {_lib.LOG_ERROR: logging.ERROR, _lib.LOG_WARNING: logging.WARNING,
              _lib.LOG_INFO: logging.INFO, _lib.LOG_DEBUG: logging.DEBUG}
_loggers: Dict[Optional[bytes], logging.Logger] = {}   # category -> its logger
_lock = threading.Lock()      # serializes installs (not held by the callback)
_installed = _lib.LOG_OFF


def _category_logger(category: Optional[bytes]) -> logging.Logger:
    found = _loggers.get(category)
    if found is None:
        name = category.decode("utf-8", "replace") if category else "unknown"
        found = _loggers[category] = logging.getLogger(LOGGER_NAME + "." + name)
    return found


def _on_log(level: int, category: Optional[bytes], message: Optional[bytes], userdata: Optional[int]) -> None:
    # On a library thread (or a thread inside a tether call), with the GIL
    # taken by ctypes. Nothing may escape into C: a failing handler or filter
    # is logging's business (Handler.handleError), anything else is dropped.
    try:
        python_level = _TO_PYTHON.get(level, logging.DEBUG)
        target = _category_logger(category)
        if target.isEnabledFor(python_level):
            target.log(python_level, "%s", message.decode("utf-8", "replace") if message else "",
                       extra={"tether_category": target.name[len(LOGGER_NAME) + 1:]})
    except BaseException:  # noqa: BLE001 - nothing may unwind into the library
        pass


# Kept for the life of the process: the library may call it until
# tether_log_set has replaced it, and it is never freed after that.
_CALLBACK = _lib.LOG_CB(_on_log)
_NO_CALLBACK = _lib.LOG_CB()   # NULL


def _c_level(python_level: int) -> int:
    """The library's level for messages at or above `python_level`."""
    if python_level <= logging.DEBUG:
        return _lib.LOG_DEBUG
    if python_level <= logging.INFO:
        return _lib.LOG_INFO
    if python_level <= logging.WARNING:
        return _lib.LOG_WARNING
    if python_level <= logging.CRITICAL:
        return _lib.LOG_ERROR
    return _lib.LOG_OFF


def wanted_level() -> int:
    """The library level Python wants now: from the lowest effective level of
    ``tether`` and its category loggers, above ``logging.disable``'s."""
    lowest = min([logger.getEffectiveLevel()]
                 + [logging.getLogger(LOGGER_NAME + "." + c).getEffectiveLevel() for c in CATEGORIES])
    if logger.disabled:
        return _lib.LOG_OFF
    lowest = max(lowest, logging.root.manager.disable + 1)
    return _c_level(lowest)


def log_to_python(level: Union[int, str, None] = None) -> int:
    """Installs the hook with the level Python wants now (see the module's
    doc), or re-reads the levels after they changed. With `level` (a logging
    level: ``logging.DEBUG``, ``"INFO"``...), first sets the ``tether``
    logger's level to it. Returns the library level installed (0: off).
    Raises BusyError from inside a tether log message's handler."""
    global _installed
    if level is not None:
        logger.setLevel(level)
    c_level = wanted_level()
    with _lock:
        _lib.tether_log_set(c_level, _CALLBACK if c_level != _lib.LOG_OFF else _NO_CALLBACK, None)
        _installed = c_level
    return c_level


def set_log_level(level: Union[int, str]) -> int:
    """Sets the ``tether`` logger's level and the library's hook to match."""
    return log_to_python(level)


def stop_logging() -> None:
    """Removes the hook: the library builds no message at all until
    :func:`log_to_python` installs it again. When this returns, the hook is
    not running and will not run."""
    global _installed
    with _lock:
        _lib.tether_log_set(_lib.LOG_OFF, _NO_CALLBACK, None)
        _installed = _lib.LOG_OFF


def installed_level() -> int:
    """The library level this module last installed (0: off)."""
    return _installed


def _at_exit() -> None:
    try:
        stop_logging()
    except Exception:  # noqa: BLE001 - exiting; nothing to tell
        pass


atexit.register(_at_exit)
log_to_python()
