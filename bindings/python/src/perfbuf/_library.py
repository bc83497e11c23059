"""libperfbuf, loaded once for the package: its functions (``LIB``), with
the warnings a failing call prints held back for the exception that
reports the failure (:func:`os_error`), and its messages routed to the
``logging`` logger ``"perfbuf"`` (:func:`use_logging`)."""
from __future__ import annotations

import atexit
import ctypes
import logging
import os
import threading
from typing import Any, Optional

from . import _lib

_log = logging.getLogger("perfbuf")


class _Library:
    """libperfbuf's functions, with the warnings a failing call prints held
    back: the package raises that failure, with libperfbuf's text, and
    printing it too would say it twice. A call that returns an error (a
    negative int, a NULL pointer) leaves its warnings pending on the thread
    for the exception to take (see :func:`os_error`); what no exception
    took is logged at the thread's next call. The warnings of a call that
    succeeded are logged when it returns, as they come."""

    # Not held: the error's own functions, and those called for every
    # record (decoding prints nothing; the per-record cost stays as it was).
    _PLAIN = frozenset({"perfbuf_last_error", "perfbuf_set_print", "perfbuf_version", "perfbuf_events_decode",
                        "perfbuf_events_decode_sideband", "perfbuf_events_field", "perfbuf_ring_peek"})

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.lib, name)
        if name in self._PLAIN or not name.startswith("perfbuf_"):
            return fn
        restype = fn.restype

        def call(*args: Any) -> Any:
            log_pending()
            outer = getattr(_calls, "held", None)
            _calls.held = held = []
            try:
                ret = fn(*args)
            finally:
                _calls.held = outer
            if held:
                failed = ret is None if restype is ctypes.c_void_p else restype is ctypes.c_int and ret < 0
                if failed:
                    pending().extend(held)
                else:
                    for text in held:
                        _log.warning("%s", text)
            return ret

        call.__name__ = name
        self.__dict__[name] = call
        return call


_calls = threading.local()


def pending() -> list[str]:
    """This thread's warnings of failed calls that no exception took yet."""
    if not hasattr(_calls, "pending"):
        _calls.pending = []
    return _calls.pending  # type: ignore[no-any-return]


def log_pending() -> None:
    waiting = pending()
    for text in waiting:
        _log.warning("%s", text)
    waiting.clear()


def take_pending(text: str) -> None:
    """The failure raised now says ``text``: the warnings that say the same
    are in the exception; the others are logged."""
    waiting = pending()
    for held in waiting:
        if held != text:
            _log.warning("%s", held)
    waiting.clear()


LIB: Any = _Library(_lib.load())


def library_version() -> str:
    """The loaded libperfbuf's version."""
    return LIB.perfbuf_version().decode()


def last_error() -> str:
    """The text of the last error a libperfbuf call of this thread returned
    (what failed, the errno's name and text, a hint at the fix); ``""``
    before any. The exceptions this package raises carry it already."""
    return (LIB.perfbuf_last_error() or b"").decode(errors="replace")


# ---- library messages -> logging -----------------------------------------------------

_LEVELS = {_lib.PERFBUF_WARN: logging.WARNING, _lib.PERFBUF_INFO: logging.INFO, _lib.PERFBUF_DEBUG: logging.DEBUG}


def _print(level: int, msg: Optional[bytes], _ctx: Optional[int]) -> None:
    try:
        text = (msg or b"").decode(errors="replace")
        held = getattr(_calls, "held", None)
        if level == _lib.PERFBUF_WARN and held is not None:
            held.append(text)  # a call of this thread's: see _Library
            return
        pylevel = _LEVELS.get(level, logging.DEBUG)
        if _log.isEnabledFor(pylevel):
            _log.log(pylevel, "%s", text)
    except BaseException:  # never let an exception reach C
        pass


_PRINT = _lib.PRINT_FN(_print)  # alive as long as the module: the library may call it from any thread
_print_lock = threading.Lock()
_previous_print: Optional[int] = None
_routed = False


def use_logging(enabled: bool = True) -> None:
    """Routes libperfbuf's messages (warnings, info, debug: every level) to
    the ``logging`` logger ``"perfbuf"`` — the default since import — or,
    with ``False``, back to the printer that was there before (the
    library's own, which writes warnings to stderr)."""
    global _previous_print, _routed
    with _print_lock:
        if enabled and not _routed:
            _previous_print = LIB.perfbuf_set_print(ctypes.cast(_PRINT, ctypes.c_void_p), None)
            _routed = True
        elif not enabled and _routed:
            LIB.perfbuf_set_print(_previous_print, None)
            _routed = False


use_logging(True)
# Give the library its own printer back before the interpreter tears down
# the module (buffers freed at exit may still print).
atexit.register(use_logging, False)


def os_error(err: int, what: str) -> OSError:
    """OSError(err, text): Python picks the subclass (PermissionError for
    EACCES/EPERM, FileNotFoundError, InterruptedError, ...); the text is
    libperfbuf's explanation of the failure."""
    text = last_error() or f"{what}: {os.strerror(err)}"
    take_pending(text)
    return OSError(err, text)
