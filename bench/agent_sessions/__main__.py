"""`python -m bench.agent_sessions`: runs the command line in `cli.py`."""

from bench.agent_sessions.cli import main

if __name__ == "__main__":
    main()
