"""``python -m thunder.plugins [--verbose]``: prints the plugins Thunder finds and what each contributed."""

import argparse

from thunder.plugins import report

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m thunder.plugins", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="full reasons and plugin modules")
    report(verbose=parser.parse_args().verbose)
