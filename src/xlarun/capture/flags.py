"""Compose the job's environment (XLA_FLAGS, TF_XLA_FLAGS, TF_CPP_*, JAX_*, Poplar...) from a spec.

:func:`compose_env` is pure: the same spec, paths, base environment and known flags always give the
same result, so ``xlarun flags`` shows exactly what ``xlarun capture`` will set. What the job's XLA
knows is probed outside it (:func:`xlarun.capture.known_flags.probe_known_xla_flags`) and passed in.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from xlarun.capture.backends.base import JobPaths
from xlarun.capture.known_flags import KnownXlaFlags
from xlarun.capture.spec import RunSpec

_FORMAT_FLAGS = {
    "text": "--xla_dump_hlo_as_text",
    "proto": "--xla_dump_hlo_as_proto",
    "dot": "--xla_dump_hlo_as_dot",
    "html": "--xla_dump_hlo_as_html",
    "url": "--xla_dump_hlo_as_url",
}

_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSW|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
_URL_CREDENTIALS = re.compile(r"(://[^/\s:@]+):[^/\s@]+@")
REDACTED = "***"

#: What a capture loses when the job's XLA lacks a flag xlarun would add, said in the warning.
_LOST_WITHOUT = {
    "xla_dump_large_constants": "big constants will be elided as {...} and replay will fill them with garbage",
    "xla_dump_hlo_snapshots": "no snapshots: replay will run on generated arguments",
    "xla_dump_hlo_as_proto": "no .hlo.pb dumps",
    "xla_dump_compress_protos": "protos will be written uncompressed",
    "xla_dump_hlo_pass_re": "no per-pass dumps",
    "xla_dump_hlo_module_re": "every module will be dumped",
    "xla_dump_hlo_pipeline_re": "every pipeline will be dumped",
    "xla_dump_max_hlo_modules": "every module will be dumped",
    "xla_dump_include_timestamp": "file names will have no timestamp",
}


@dataclass
class ComposedEnv:
    """The job's environment and how it differs from the one xlarun was started with."""

    env: dict[str, str]  # complete environment of the job
    delta: dict[str, str | None]  # set or changed variables (None = removed)
    xla_flags: list[str]  # the final XLA_FLAGS, one flag per item
    tf_xla_flags: list[str]
    warnings: list[str] = field(default_factory=list)

    def export_lines(self) -> list[str]:
        """``export NAME='value'`` lines (``unset NAME`` for removed ones), sorted by name."""
        lines = []
        for name in sorted(self.delta):
            value = self.delta[name]
            lines.append(f"unset {name}" if value is None else f"export {name}={shlex.quote(value)}")
        return lines


def join_flags(flags: list[str]) -> str:
    """Flags as one XLA_FLAGS / TF_XLA_FLAGS value that XLA's own parser reads back.

    XLA accepts quotes around a flag's *value* only (``--name="a b"``); a whole quoted flag
    (``'--name=.*'``, what shell quoting produces) is silently ignored. So values are left bare
    unless they hold spaces or quotes.
    """
    out = []
    for flag in flags:
        name, sep, value = flag.partition("=")
        if sep and (any(c.isspace() for c in value) or '"' in value or "'" in value):
            quote = "'" if '"' in value else '"'
            flag = f"{name}={quote}{value}{quote}"
        out.append(flag)
    return " ".join(out)


def split_flags(text: str | None) -> list[str]:
    """Split an XLA_FLAGS / TF_XLA_FLAGS value into flags (shell-like quoting respected)."""
    if not text:
        return []
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def flag_name(flag: str) -> str:
    """'--xla_dump_to=/x' -> 'xla_dump_to'; '--noxla_foo' stays 'noxla_foo' (XLA's bool negation is rare)."""
    return flag.lstrip("-").split("=", 1)[0]


def merge_flags(existing: list[str], ours: list[str]) -> tuple[list[str], list[str]]:
    """Merge flags: ours win on the same name. Returns (merged, names of existing flags we overrode)."""
    ours_names = {flag_name(f) for f in ours}
    kept = [f for f in existing if flag_name(f) not in ours_names]
    overridden = [flag_name(f) for f in existing if flag_name(f) in ours_names]
    return kept + ours, overridden


def xla_flags_for(spec: RunSpec, dump_dir: str) -> list[str]:
    """XLA_FLAGS the spec asks for, with ``--xla_dump_to`` pointing at ``dump_dir``."""
    dump = spec.dump
    flags = [f"--xla_dump_to={dump_dir}"]
    flags += [_FORMAT_FLAGS[f] for f in dict.fromkeys(dump.formats)]
    if dump.compress_protos:
        flags.append("--xla_dump_compress_protos")
    if dump.snapshots:
        flags.append("--xla_dump_hlo_snapshots")
        if spec.framework == "tensorflow":  # TF 2.21's XLA segfaults dumping a snapshot of an executable without its HLO
            flags.append("--xla_embed_ir_in_executable")
    if dump.pass_re:
        flags.append(f"--xla_dump_hlo_pass_re={dump.pass_re}")
    if dump.module_re:
        flags.append(f"--xla_dump_hlo_module_re={dump.module_re}")
    if dump.pipeline_re:
        flags.append(f"--xla_dump_hlo_pipeline_re={dump.pipeline_re}")
    if dump.large_constants:
        flags.append("--xla_dump_large_constants")
    if dump.timestamps:
        flags.append("--xla_dump_include_timestamp")
    if dump.max_modules:
        flags.append(f"--xla_dump_max_hlo_modules={dump.max_modules}")
    if dump.module_metadata:
        flags.append("--xla_dump_module_metadata")
    if dump.disable_metadata:
        flags.append("--xla_dump_disable_metadata")
    flags += dump.extra_xla_flags
    return flags


def tf_xla_flags_for(spec: RunSpec) -> list[str]:
    """TF_XLA_FLAGS the spec asks for (only flags TensorFlow knows: an unknown one aborts it)."""
    tf = spec.tensorflow
    flags = []
    if tf.auto_jit is not None:
        flags.append(f"--tf_xla_auto_jit={tf.auto_jit}")
    if tf.cpu_global_jit:
        flags.append("--tf_xla_cpu_global_jit")
    if tf.clustering_debug:
        flags.append("--tf_xla_clustering_debug")
    if tf.min_cluster_size is not None:
        flags.append(f"--tf_xla_min_cluster_size={tf.min_cluster_size}")
    return flags + tf.extra_flags


def _framework_vars(spec: RunSpec, paths: JobPaths) -> dict[str, str]:
    out: dict[str, str] = {}
    log = spec.logging
    if log.min_log_level is not None:
        out["TF_CPP_MIN_LOG_LEVEL"] = str(log.min_log_level)
    if log.vlog_level is not None:
        # older TF and the Graphcore docs read MIN, newer XLA/TSL read MAX: set both
        out["TF_CPP_MIN_VLOG_LEVEL"] = str(log.vlog_level)
        out["TF_CPP_MAX_VLOG_LEVEL"] = str(log.vlog_level)
    if log.vmodule:
        out["TF_CPP_VMODULE"] = ",".join(f"{name}={level}" for name, level in log.vmodule.items())
    if log.poplar_vlog_level is not None:
        out["TF_POPLAR_VLOG_LEVEL"] = str(log.poplar_vlog_level)
    if spec.dump.tf_graphs or spec.tensorflow.clustering_debug:
        out["TF_DUMP_GRAPH_PREFIX"] = paths.tf_graph_dir  # an env var: the TF_XLA_FLAGS flag aborts TF 2.21
    if spec.dump.jax_ir:
        out["JAX_DUMP_IR_TO"] = paths.jax_ir_dir
        out["JAX_DUMP_IR_MODES"] = ",".join(spec.dump.jax_ir)
    if spec.jax.disable_compilation_cache:
        out["JAX_ENABLE_COMPILATION_CACHE"] = "false"  # a cache hit compiles nothing, so dumps nothing
    if spec.jax.detailed_logging_min_ops is not None:
        out["JAX_COMPILER_DETAILED_LOGGING_MIN_OPS"] = str(spec.jax.detailed_logging_min_ops)
    if spec.dump.torch_xla != "off":
        out["XLA_SAVE_TENSORS_FILE"] = f"{paths.torch_xla_dir}/tensors.{spec.dump.torch_xla}"
        out["XLA_SAVE_TENSORS_FMT"] = spec.dump.torch_xla
    if spec.dump.torch_xla_post_optimizations:
        out["XLA_DUMP_POST_OPTIMIZATIONS"] = "1"
    if spec.torch_xla.ir_debug:
        out["XLA_IR_DEBUG"] = "1"
    if spec.torch_xla.hlo_debug:
        out["XLA_HLO_DEBUG"] = "1"
    if spec.torch_xla.debug_level is not None:
        out["PT_XLA_DEBUG_LEVEL"] = str(spec.torch_xla.debug_level)
    if spec.poplar.flags:
        out["TF_POPLAR_FLAGS"] = " ".join(spec.poplar.flags)
    engine_options = dict(spec.poplar.engine_options)
    if spec.dump.poplar_reports:
        engine_options.update({"autoReport.all": "true", "autoReport.directory": paths.poplar_report_dir})
    if engine_options:
        out["POPLAR_ENGINE_OPTIONS"] = json.dumps(engine_options, sort_keys=True)
    return out


def fit_to_known_flags(flags: list[str], known: KnownXlaFlags, theirs: dict[str, str]) -> tuple[list[str], list[str]]:
    """``flags`` without the ones xlarun added that the job's XLA lacks (an unknown flag aborts the job),
    and a warning per unknown flag. Flags named in ``theirs`` (name -> where the user put it) are kept."""
    kept: list[str] = []
    warnings: list[str] = []
    for flag in flags:
        name = flag_name(flag)
        if known.knows(flag) or name == "xla_dump_to":  # without --xla_dump_to there is no capture: never drop it
            kept.append(flag)
        elif name in theirs:
            kept.append(flag)
            warnings.append(
                f"{known.owner}'s XLA does not know --{name} (from {theirs[name]}): kept as you asked, "
                f"but the job will likely abort at start with 'Unknown flags in XLA_FLAGS'; remove it from {theirs[name]}"
            )
        else:
            lost = _LOST_WITHOUT.get(name)
            warnings.append(f"{known.owner}'s XLA does not know --{name}: left out" + (f"; {lost}" if lost else ""))
    return kept, warnings


#: How to stop xlarun adding a flag, for advice when a job's XLA refuses it.
_HOW_TO_DROP = {
    **{flag.lstrip("-"): f"take '{fmt}' out of dump.formats" for fmt, flag in _FORMAT_FLAGS.items()},
    **{
        name: f"set {option}: false in the spec"
        for name, option in [
            ("xla_dump_compress_protos", "dump.compress_protos"),
            ("xla_dump_hlo_snapshots", "dump.snapshots"),
            ("xla_embed_ir_in_executable", "dump.snapshots"),
            ("xla_dump_large_constants", "dump.large_constants"),
            ("xla_dump_include_timestamp", "dump.timestamps"),
            ("xla_dump_module_metadata", "dump.module_metadata"),
            ("xla_dump_disable_metadata", "dump.disable_metadata"),
            ("tf_xla_cpu_global_jit", "tensorflow.cpu_global_jit"),
            ("tf_xla_clustering_debug", "tensorflow.clustering_debug"),
        ]
    },
    **{
        name: f"remove {option} from the spec"
        for name, option in [
            ("xla_dump_hlo_pass_re", "dump.pass_re"),
            ("xla_dump_hlo_module_re", "dump.module_re"),
            ("xla_dump_hlo_pipeline_re", "dump.pipeline_re"),
            ("xla_dump_max_hlo_modules", "dump.max_modules"),
            ("tf_xla_auto_jit", "tensorflow.auto_jit"),
            ("tf_xla_min_cluster_size", "tensorflow.min_cluster_size"),
        ]
    },
}


def where_flag_comes_from(spec: RunSpec, base_env: dict[str, str], name: str) -> str:
    """Advice on removing flag ``name`` (``xla_foo``): the spec key or variable that put it into the job."""
    env = {**base_env, **spec.env}
    if name in {flag_name(f) for f in spec.dump.extra_xla_flags + spec.tensorflow.extra_flags}:
        return "remove it from " + ("dump.extra_xla_flags" if name.startswith("xla_") else "tensorflow.extra_flags")
    for variable in ("XLA_FLAGS", "TF_XLA_FLAGS"):
        if name in {flag_name(f) for f in split_flags(env.get(variable))}:
            return f"remove it from {variable}" + (" in the spec's env" if variable in spec.env else " in your environment")
    return _HOW_TO_DROP.get(name) or "remove it from the spec or your environment"


def compose_env(
    spec: RunSpec, paths: JobPaths, base_env: dict[str, str], known_xla_flags: KnownXlaFlags | None = None
) -> ComposedEnv:
    """The job's environment: ``base_env`` + the spec's ``env`` + every variable the dump and logging sections imply.

    XLA_FLAGS and TF_XLA_FLAGS already in ``base_env`` are merged flag by flag (the spec wins).
    With ``known_xla_flags`` (what the job's XLA registers), a flag xlarun would add that it lacks is
    left out with a warning; one the user gave (``dump.extra_xla_flags``, their XLA_FLAGS) is kept
    with a warning. Without it every flag is kept.
    """
    warnings: list[str] = []
    env = dict(base_env)
    env.update(spec.env)
    env["PYTHONUNBUFFERED"] = "1"  # so the job's prints stream live instead of arriving at exit

    ours = xla_flags_for(spec, paths.dump_dir)
    user_xla = split_flags(env.get("XLA_FLAGS"))
    xla_flags, overridden = merge_flags(user_xla, ours)
    if known_xla_flags is not None:
        theirs = {flag_name(f): "your XLA_FLAGS" for f in user_xla}
        theirs.update({flag_name(f): "dump.extra_xla_flags" for f in spec.dump.extra_xla_flags})
        xla_flags, unknown = fit_to_known_flags(xla_flags, known_xla_flags, theirs)
        warnings += unknown
    if "xla_dump_to" in overridden:
        warnings.append("XLA_FLAGS from your environment had --xla_dump_to; xlarun dumps into the run's folder instead")
    others = sorted(set(overridden) - {"xla_dump_to"})
    if others:
        warnings.append(f"the spec overrides these flags from your XLA_FLAGS: {', '.join(others)}")
    env["XLA_FLAGS"] = join_flags(xla_flags)

    user_tf = split_flags(env.get("TF_XLA_FLAGS"))
    tf_flags, _ = merge_flags(user_tf, tf_xla_flags_for(spec))
    if tf_flags:
        env["TF_XLA_FLAGS"] = join_flags(tf_flags)
    if any(flag_name(f) == "tf_dump_graph_prefix" for f in tf_flags):
        tf_flags = [f for f in tf_flags if flag_name(f) != "tf_dump_graph_prefix"]
        env["TF_XLA_FLAGS"] = join_flags(tf_flags)
        warnings.append(
            "removed --tf_dump_graph_prefix from TF_XLA_FLAGS (it aborts TensorFlow 2.21); set dump.tf_graphs instead"
        )

    env.update(_framework_vars(spec, paths))
    if env.get("JAX_COMPILATION_CACHE_DIR") and spec.jax.disable_compilation_cache:
        warnings.append(
            "JAX_COMPILATION_CACHE_DIR is set; xlarun turns the cache off for the capture so every module is compiled and dumped"
        )

    delta: dict[str, str | None] = {k: v for k, v in env.items() if base_env.get(k) != v}
    return ComposedEnv(env=env, delta=delta, xla_flags=xla_flags, tf_xla_flags=tf_flags, warnings=warnings)


def redact_env(env: dict[str, str | None]) -> dict[str, str | None]:
    """A copy with values of secret-looking variables (tokens, passwords, keys) and URL credentials hidden."""
    out: dict[str, str | None] = {}
    for name, value in env.items():
        if value is not None and _SECRET_NAME.search(name):
            out[name] = REDACTED
        elif value is not None:
            out[name] = _URL_CREDENTIALS.sub(r"\1:" + REDACTED + "@", value)
        else:
            out[name] = None
    return out


#: jaxlib releases whose XLA aborts the job (SIGABRT, "CopyToHostAsync() called on deleted or donated buffer") when it
#: writes the snapshot of a call whose arguments are donated (``jax.jit(step, donate_argnums=0)``, as Flax/optax loops
#: write it): seen on 0.4.30, 0.7.2 and 0.8.3; 0.10.2 and 0.12 write the snapshot without its result instead
#: (replay then compares with the unoptimized module). 0.9.x was not tried, so it counts as affected.
SNAPSHOT_DONATION_FIXED = (0, 10)
_DONATED_BUFFER = re.compile(r"called on deleted or donated buffer|Buffer has been deleted or donated")
_SIGABRT_EXITS = (-6, 134)  # killed by SIGABRT, as a process and as a shell reports it


def snapshots_abort_on_donation(jaxlib_version: str) -> bool:
    """Whether this jaxlib's XLA aborts writing a snapshot of a call whose arguments are donated."""
    parts = []
    for part in jaxlib_version.split(".")[:2]:
        digits = re.match(r"\d*", part)
        parts.append(int(digits.group()) if digits and digits.group() else 0)
    return tuple(parts) < SNAPSHOT_DONATION_FIXED


def snapshot_donation_warning(spec: RunSpec, known: KnownXlaFlags | None) -> str | None:
    """Before the job: snapshots asked of a jaxlib that aborts on them when an argument is donated. Donation itself is
    only known once the job compiles, so this warns on the version alone (``known.owner`` is "jaxlib 0.4.30")."""
    if not spec.dump.snapshots or known is None or not known.owner.startswith("jaxlib "):
        return None
    version = known.owner.split(" ", 1)[1]
    if not snapshots_abort_on_donation(version):
        return None
    return (
        f"dump.snapshots with {known.owner}: its XLA aborts the job (SIGABRT) writing a snapshot of a jitted call with "
        "donated arguments (donate_argnums, as Flax/optax training steps use); if the job donates, set dump.snapshots "
        "off or jit without donation for the capture (jaxlib 0.10 and later write the snapshot without its result)"
    )


def donation_abort_cause(exit_code: int | None, log_tail: str) -> str | None:
    """After the job: the post-mortem of a job XLA aborted writing a snapshot of donated arguments."""
    if exit_code not in _SIGABRT_EXITS or not _DONATED_BUFFER.search(log_tail):
        return None
    return (
        "the job was killed by SIGABRT: XLA aborted writing a snapshot of a call whose arguments were donated "
        '(its log says "called on deleted or donated buffer"); capture again with dump.snapshots off, or jit the step '
        "without donate_argnums for the capture, or use jaxlib 0.10 or later"
    )


#: What XLA prints (one ``E... cpu_client.cc] Failed to get literal for argument`` line per argument) when it writes
#: the snapshot of a call whose arguments were donated, on releases that write it without them: harmless, and noise
#: on the user's console, so a capture keeps it in the run's logs only.
_DONATED_SNAPSHOT_NOISE = "ToLiteral() called on deleted or donated buffer"


def without_donation_noise(text: str) -> tuple[str, int]:
    """Console output with XLA's donated-snapshot lines (see :data:`_DONATED_SNAPSHOT_NOISE`) left out, and how many."""
    if _DONATED_SNAPSHOT_NOISE not in text:
        return text, 0
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if _DONATED_SNAPSHOT_NOISE not in line]
    return "".join(kept), len(lines) - len(kept)


def donation_noise_note(hidden: int) -> str:
    """The one line a capture says for the donated-snapshot lines it kept off the console."""
    return (
        f'{hidden} line(s) of XLA\'s "{_DONATED_SNAPSHOT_NOISE}" (it writes the snapshot of a call with donated '
        "arguments without them; harmless) kept in the run's stderr.log, not shown"
    )
