"""The program: ``python -m xlarun`` and the ``xlarun`` console script (``pyproject.toml`` points it here)."""


def run() -> None:
    """From the first line, a Ctrl-C is remembered as well as raised (a library may swallow the KeyboardInterrupt
    while xlarun loads; the capture that follows still stops), and one while xlarun loads exits 130."""
    from xlarun.interrupts import remember_early_interrupts  # the standard library only

    remember_early_interrupts()
    try:
        from xlarun.pydantic_plugins import skip_plugin_discovery

        skip_plugin_discovery()  # xlarun's own process: no plugin observes its models (26 ms of a capture's CPU)
        from xlarun.cli import main
    except KeyboardInterrupt:  # the exit code of any other interrupted command
        raise SystemExit(130) from None
    main()


if __name__ == "__main__":
    run()
