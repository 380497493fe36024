"""``torch.profiler``'s names over the core's profiler: ``with profile() as prof:`` times every
op, every derivative rule that backward runs (``matmul backward``) and every
``record_function`` range, on every thread; ``prof.key_averages().table(sort_by=...)`` prints
them by name and ``prof.export_chrome_trace(path)`` writes a trace that Perfetto opens.

Each name also gets the bytes of the tensors it made, the floating-point operations of the
products and convolutions in it, and the most threads its kernels ran on. There is no
accelerator, so ``ProfilerActivity.CUDA`` records nothing; shapes and stacks are not recorded
(``record_shapes`` and the like are accepted and change nothing)."""

import contextlib
import enum

from . import _core

__all__ = ["ProfilerActivity", "profile", "record_function"]


class ProfilerActivity(enum.Enum):
    CPU = "cpu"
    CUDA = "cuda"


class record_function(contextlib.ContextDecorator):
    """Times the ``with`` block (or the decorated function) under ``name``."""

    def __init__(self, name, args=None):
        del args
        self.name = name
        self._range = None

    def __enter__(self):
        self._range = _core.RecordFunction(self.name)
        self._range.__enter__()
        return self

    def __exit__(self, *exc):
        self._range.__exit__(*exc)
        self._range = None
        return False


class FunctionEventAvg:
    """The calls of one name: ``key``, ``count``, times in microseconds, the bytes of the
    tensors made (``cpu_memory_usage``, ``self_cpu_memory_usage``), the products' ``flops``
    and the most ``threads`` a kernel inside ran on."""

    def __init__(self, key, count, total_ns, self_ns, memory, self_memory, flops, threads):
        self.key = key
        self.count = count
        self.cpu_time_total = total_ns / 1e3
        self.self_cpu_time_total = self_ns / 1e3
        self.cpu_time = self.cpu_time_total / max(count, 1)
        self.cpu_memory_usage = memory
        self.self_cpu_memory_usage = self_memory
        self.flops = flops
        self.threads = threads

    def __repr__(self):
        return f"<FunctionEventAvg key={self.key} count={self.count} cpu_time_total={self.cpu_time_total:.3f}us>"


class EventList(list):
    """The averages by name, longest total first; ``table`` prints them."""

    def __init__(self, report):
        super().__init__(FunctionEventAvg(*row) for row in report.key_averages())
        self._report = report

    def table(self, sort_by=None, row_limit=100, **kwargs):
        del kwargs
        return self._report.table(sort_by, row_limit)


class profile:
    """Records while the ``with`` block runs (or between ``start()`` and ``stop()``)."""

    def __init__(
        self,
        activities=None,
        schedule=None,
        on_trace_ready=None,
        record_shapes=False,
        profile_memory=False,
        with_stack=False,
        with_flops=False,
        with_modules=False,
        **kwargs,
    ):
        del activities, schedule, record_shapes, profile_memory, with_stack, with_flops, with_modules, kwargs
        self.on_trace_ready = on_trace_ready
        self._report = None

    def start(self):
        _core.profiler_start()

    def stop(self):
        self._report = _core.profiler_stop()
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def step(self):
        """Accepted for programs that step a schedule: the whole span is recorded."""

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def _recorded(self):
        if self._report is None:
            raise RuntimeError("profile: nothing recorded yet (use it as a context manager, or start() and stop())")
        return self._report

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        del group_by_input_shape, group_by_stack_n
        return EventList(self._recorded())

    def events(self):
        """Every recorded scope: ``(name, start_ns, total_ns, self_ns, thread, depth)``."""
        return self._recorded().events()

    def export_chrome_trace(self, path):
        self._recorded().export_chrome_trace(str(path))
