"""``torch.jit``'s names for programs that only pass their modules through it: ferrograd runs
every module eagerly, so ``script`` and ``trace`` give back what they are given (which then
computes what it computed before), and the decorators change nothing: nothing is compiled."""

__all__ = ["ignore", "is_scripting", "is_tracing", "script", "trace", "unused"]


def script(obj, *args, **kwargs):
    """``torch.jit.script``: ``obj`` itself."""
    del args, kwargs
    return obj


def trace(func, example_inputs=None, *args, **kwargs):
    """``torch.jit.trace``: ``func`` itself (it is not run on ``example_inputs``)."""
    del example_inputs, args, kwargs
    return func


def ignore(fn=None, **kwargs):
    """``@torch.jit.ignore`` (with or without arguments): the function unchanged."""
    del kwargs
    return fn if fn is not None else (lambda f: f)


unused = ignore


def is_scripting():
    return False


def is_tracing():
    return False
