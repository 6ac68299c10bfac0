"""Which file of a module replay reads (replay/choose.py)."""

from __future__ import annotations

from xlarun.replay.choose import choose_replay_input


def test_the_before_optimizations_dump_is_offered_even_when_it_is_the_choice():
    """A replay of the optimized module the user names (--file) falls back on it: a partitioned module that cannot be
    recompiled said 'no before_optimizations dump of it was found' when that dump was the default choice."""
    files = [
        ("module_0010.jit_step.before_optimizations.hlo.pb", None),
        ("module_0010.jit_step.cpu_after_optimizations.hlo.pb", None),
    ]
    choice = choose_replay_input(files, read=lambda path: b"")
    assert choice.path == "module_0010.jit_step.before_optimizations.hlo.pb" and choice.input_kind == "proto"
    assert choice.unoptimized == "module_0010.jit_step.before_optimizations.hlo.pb"


def test_a_module_without_a_before_optimizations_dump_has_none_to_offer():
    choice = choose_replay_input([("module_0001.jit_f.cpu_after_optimizations.hlo.pb", None)], read=lambda path: b"")
    assert choice.unoptimized is None


def test_a_timeout_with_in_process_replay_is_refused_not_ignored(cli, tmp_path):
    """The replay ran past it silently: XLA in xlarun's own process cannot be stopped."""
    out = cli("replay", "anything", "--in-process", "--timeout", "30", "--store", tmp_path)
    assert out.exit_code == 2 and "--timeout cannot be kept with --in-process" in out.stderr


def test_an_unknown_file_kind_is_a_usage_error_naming_the_kinds(cli, tmp_path):
    out = cli("files", "--kind", "bogus", "--store", tmp_path)
    assert out.exit_code == 2 and "no file kind 'bogus'" in out.stderr and "tf-graph" in out.stderr


def test_a_partitioned_module_replays_its_optimized_dump_checked_against_the_unoptimized_one():
    texts = {
        "module_0010.jit_step.before_optimizations.txt": b"HloModule jit_step, num_partitions=8\n\nENTRY e {}\n",
        "module_0010.jit_step.cpu_after_optimizations.txt": b"HloModule jit_step, is_scheduled=true, num_partitions=8\n",
    }
    choice = choose_replay_input([(p, None) for p in texts], read=texts.__getitem__)
    assert choice.path == "module_0010.jit_step.cpu_after_optimizations.txt"
    assert choice.unoptimized == "module_0010.jit_step.before_optimizations.txt"
    one_device = {p: t.replace(b", num_partitions=8", b"") for p, t in texts.items()}
    assert choose_replay_input([(p, None) for p in one_device], read=one_device.__getitem__).path.endswith(
        "before_optimizations.txt"
    )


def test_a_partitioned_modules_recorded_snapshot_gives_its_arguments_to_the_optimized_dump():
    """XLA writes no snapshot of a partitioned module; one recorded by xlarun.record_arguments holds the program's
    global arguments: the optimized dump is still what runs on the N devices, on those arguments."""
    texts = {
        "module_0006.jit_total.before_optimizations.txt": b"HloModule jit_total, num_partitions=4\n\nENTRY e {}\n",
        "module_0006.jit_total.cpu_after_optimizations.txt": b"HloModule jit_total, is_scheduled=true, num_partitions=4\n",
        "module_0006.jit_total.snapshot.0.pb": b"",
    }
    choice = choose_replay_input([(p, None) for p in texts], read=texts.__getitem__)
    assert choice.path == "module_0006.jit_total.cpu_after_optimizations.txt"
    assert choice.arguments_from == "module_0006.jit_total.snapshot.0.pb"
    one_device = {p: t.replace(b", num_partitions=4", b"") for p, t in texts.items()}
    plain = choose_replay_input([(p, None) for p in one_device], read=one_device.__getitem__)
    assert plain.path == "module_0006.jit_total.snapshot.0.pb" and plain.arguments_from is None
