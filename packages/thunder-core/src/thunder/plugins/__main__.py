"""``python -m thunder.plugins``: prints the plugins Thunder finds and what each contributed."""

from thunder.plugins import report

if __name__ == "__main__":
    report()
