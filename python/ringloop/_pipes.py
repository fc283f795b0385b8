"""Pipe and subprocess transports for `ringloop.Loop`, borrowed from asyncio.

`connect_read_pipe`, `connect_write_pipe`, `subprocess_exec` and `subprocess_shell` come from
`BaseEventLoop` unchanged; they end in three factory hooks that `BaseEventLoop` leaves
abstract and asyncio's Unix loop fills in. This mixin fills them in the same way, with the
same code: the transports are asyncio's own (`_UnixReadPipeTransport`,
`_UnixWritePipeTransport`, `_UnixSubprocessTransport`), and the hooks are the very functions of
`asyncio.unix_events._UnixSelectorEventLoop`, taken by reference. Pipes and subprocesses are
not a hot path, and asyncio's code already gets their subtle parts right (EOF and broken-pipe
handling, write-buffer flow control, the order of `pipe_data_received`/`process_exited`/
`connection_lost`, killing a child whose start was cancelled), so ringloop repeats none of it.

What asyncio's code reaches for on the loop, besides the public API:

* `_add_reader`/`_remove_reader`/`_add_writer`/`_remove_writer`: the selector loop's internal
  fd registration (no check that a transport owns the fd, a closed loop answers `False` on
  removal). ringloop's native `add_reader`/... behave that way already, so these are plain
  aliases. A write-pipe transport registers a *reader* on its write end: when the read end is
  closed, the kernel reports POLLERR there, both backends hand POLLERR/POLLHUP to the reader
  callback, and the transport's `_read_ready` turns it into `BrokenPipeError`.
* `_child_watcher_callback` (the child watcher's completion callback) and, from Python 3.14 on,
  `self._watcher`.

Child watching differs by Python version, and the borrowed `_make_subprocess_transport` of the
running version already does the right thing provided the loop has what it expects:

* 3.11 and earlier: `asyncio.get_child_watcher()` from the policy; with no policy installed
  that is asyncio's default policy and its `ThreadedChildWatcher` (one `waitpid` thread per
  child, fine from any thread). A watcher the user installs is honoured, as on stock asyncio.
* 3.12/3.13: the same call, its `DeprecationWarning` silenced by asyncio itself; the default
  watcher becomes `PidfdChildWatcher` when the kernel has `pidfd_open`, which registers the
  pidfd with `loop._add_reader(pidfd, cb, *args)` on the running loop.
* 3.14+: watchers are gone from the public API; each loop owns one in `self._watcher`
  (`_PidfdChildWatcher`, or `_ThreadedChildWatcher` where pidfds are refused). `Loop.__init__`
  is not ours to extend here, so `_watcher` is built on first use.
"""

from __future__ import annotations

import functools
from asyncio import unix_events

from . import _core

_Unix = unix_events._UnixSelectorEventLoop


class PipesMixin:
    """Pipe and subprocess transport factories for `Loop`; see the module docstring."""

    # -- the selector loop's internal fd registration, as asyncio's transports call it -------

    _remove_reader = _core.LoopCore.remove_reader
    _remove_writer = _core.LoopCore.remove_writer

    # 3.15's transports pass the protocol's `context=` (None for those made without one).
    def _add_reader(self, fd, callback, *args, context=None):
        if context is None:
            return _core.LoopCore.add_reader(self, fd, callback, *args)
        return _core.LoopCore.add_reader(self, fd, context.run, callback, *args)

    def _add_writer(self, fd, callback, *args, context=None):
        if context is None:
            return _core.LoopCore.add_writer(self, fd, callback, *args)
        return _core.LoopCore.add_writer(self, fd, context.run, callback, *args)

    # -- the factory hooks of BaseEventLoop, as asyncio's Unix loop implements them ----------

    _make_read_pipe_transport = _Unix._make_read_pipe_transport
    _make_write_pipe_transport = _Unix._make_write_pipe_transport
    _make_subprocess_transport = _Unix._make_subprocess_transport
    _child_watcher_callback = _Unix._child_watcher_callback

    if hasattr(unix_events, "_PidfdChildWatcher"):  # Python 3.14+: a watcher per loop

        @functools.cached_property
        def _watcher(self):
            if unix_events.can_use_pidfd():
                return unix_events._PidfdChildWatcher()
            return unix_events._ThreadedChildWatcher()
