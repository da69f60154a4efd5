"""The command line's building blocks, one module per command; `cli.py` is the entry point."""
