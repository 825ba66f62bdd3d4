"""`python -m bench.fleet_sim`: runs the command line in `cli.py`."""

from bench.fleet_sim.cli import main

if __name__ == "__main__":
    main()
