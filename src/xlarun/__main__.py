try:
    from xlarun.cli import main
except KeyboardInterrupt:  # Ctrl-C while xlarun loads: the exit code of any other interrupted command
    raise SystemExit(130) from None

main()
