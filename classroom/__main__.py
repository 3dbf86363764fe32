"""`python -m classroom COMMAND`: the same command line as `python -m course COMMAND` (classroom/cli.py)."""
import sys

from classroom.cli import main

if __name__ == "__main__":
    sys.exit(main())
