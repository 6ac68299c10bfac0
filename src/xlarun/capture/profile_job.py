"""A job run under its framework's profiler without the user changing the script (the spec's ``profile:``).

The job's command ``python SCRIPT ARGS`` becomes ``python -c BOOTSTRAP DIR DURATION TRACER FRAMEWORK SCRIPT ARGS``:
the bootstrap runs the script with :mod:`runpy` as ``__main__`` (its ``sys.argv`` and ``sys.path[0]`` as Python
gives them) and starts the profiler, then stops it at exit, or DURATION seconds after it started. For JAX,
``jax.profiler.start_trace(DIR)`` starts once the script's own use of JAX has made its backends (so that whatever
the script sets before, ``os.environ`` or ``jax.distributed.initialize``, still counts: ``start_trace`` makes the
backends itself); for TensorFlow, ``tf.profiler.experimental.start(DIR)`` starts as soon as TensorFlow is imported.
Both write the same XSpace, whose XLA thunk events name their module and op. ``-c`` and not a module file: the job's interpreter may be another Python, or one in a container,
that cannot import xlarun. DIR lies in the run's dump folder, so the trace (``*.xplane.pb``) is archived
content-addressed like every dump file, and indexed by :mod:`xlarun.store.profile_index`.
"""

from __future__ import annotations

from xlarun.capture.spec import ProfileSpec

#: The folder below the dump folder the trace is written to (``<dump>/xlarun-profile/plugins/profile/<time>/``).
PROFILE_DIR = "xlarun-profile"

#: Run as ``python -c BOOTSTRAP DIR DURATION TRACER SCRIPT ARGS...`` (DURATION 0: until exit; TRACER 0 or 1).
BOOTSTRAP = r"""
import atexit, importlib.abc, os, runpy, sys, threading
out, duration, tracer, framework, script = sys.argv[1:6]
sys.argv = [script, *sys.argv[6:]]
sys.path[0] = os.path.dirname(os.path.abspath(script))
if os.environ.get("XLARUN_PROCESS_ID"):
    out = os.path.join(out, "process-" + os.environ["XLARUN_PROCESS_ID"])
state = {"on": False, "lock": threading.Lock()}

def stop():
    with state["lock"]:
        if state["on"]:
            state["on"] = False
            try:
                if framework == "tensorflow":
                    sys.modules["tensorflow"].profiler.experimental.stop()
                else:
                    sys.modules["jax.profiler"].stop_trace()
            except Exception as exc:
                print("xlarun: the profile could not be written:", exc, file=sys.stderr)

def start():
    try:
        if framework == "tensorflow":
            experimental = sys.modules["tensorflow"].profiler.experimental
            if tracer == "1":  # options given make TensorFlow warn of each: none unless asked
                experimental.start(out, options=experimental.ProfilerOptions(python_tracer_level=1))
            else:
                experimental.start(out)
        else:
            import jax.profiler as profiler
            options = profiler.ProfileOptions()
            options.python_tracer_level = int(tracer)
            profiler.start_trace(out, profiler_options=options)
    except Exception as exc:
        print("xlarun: the profile could not start:", exc, file=sys.stderr)
        return
    state["on"] = True
    atexit.register(stop)
    if float(duration) > 0:
        timer = threading.Timer(float(duration), stop)
        timer.daemon = True
        timer.start()

def start_with_backends():
    # start_trace initialises JAX's backends: started at import, it would come before the script's own set-up
    # (jax.distributed.initialize must come first); so it starts once the script's first use has made them
    try:
        import jax._src.xla_bridge as bridge
        original = bridge.backends
        if bridge.backends_are_initialized():
            raise LookupError
    except Exception:
        start()
        return

    def backends(*args, **kwargs):
        made = original(*args, **kwargs)
        if bridge.backends is backends:
            bridge.backends = original
            start()
        return made

    bridge.backends = backends

class AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != ("tensorflow" if framework == "tensorflow" else "jax"):
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            start() if framework == "tensorflow" else start_with_backends()

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, AfterImport())
runpy.run_path(script, run_name="__main__")
"""

#: The frameworks whose jobs are profiled.
PROFILED = ("jax", "tensorflow")


def profiled_argv(argv: list[str], dump_dir: str, profile: ProfileSpec, framework: str = "jax", sep: str = "/") -> list[str]:
    """The job's command line run under ``framework``'s profiler (one of :data:`PROFILED`): ``argv`` is
    ``[python, script, *args]`` as the job sees it, ``dump_dir`` the dump folder as the job sees it; the trace goes
    to :data:`PROFILE_DIR` below it."""
    python, script, *args = argv
    out = f"{dump_dir.rstrip(sep)}{sep}{PROFILE_DIR}"
    tracer = "1" if profile.python_tracer else "0"
    return [python, "-c", BOOTSTRAP, out, str(profile.duration or 0), tracer, framework, script, *args]
