"""`python -m sparring.cli`: the `sparring` command."""

from . import main

if __name__ == "__main__":
    main()
