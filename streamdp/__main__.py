"""``python -m streamdp``: the same entry point as the ``streamdp`` console script."""

from streamdp.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
